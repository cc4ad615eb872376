"""Ctrl-C and SIGTERM under ``interrupts_recorded``: an interrupt that lands where Python cannot raise it
(a ``__del__``, a library's C or Rust code calling back into Python) is delivered again, not lost.

Run in a child process: the test sends itself SIGINT, and pytest's own process must not see it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import signal, time
    from neuronc.cli._signals import interrupted, interrupts_recorded

    class Finalizer:
        def __del__(self):
            # The handler runs here, inside __del__: Python can only report its KeyboardInterrupt
            # as "Exception ignored in ..." (what pydantic-core's schema building did to a Ctrl-C).
            signal.raise_signal(signal.SIGINT)

    try:
        with interrupts_recorded():
            finalizer = Finalizer()
            del finalizer
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
        print("ran to its end")
    except KeyboardInterrupt:
        print("interrupted", interrupted())
    """
)


def test_an_interrupt_lost_in_a_finalizer_is_delivered_again() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "interrupted True", proc.stdout + proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_an_exception_other_than_an_interrupt_is_still_reported() -> None:
    child = textwrap.dedent(
        """
        from neuronc.cli._signals import interrupts_recorded

        class Finalizer:
            def __del__(self):
                raise ValueError("from a finalizer")

        with interrupts_recorded():
            finalizer = Finalizer()
            del finalizer
        print("done")
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "done"
    assert "Exception ignored" in proc.stderr and "ValueError: from a finalizer" in proc.stderr


def test_a_ctrl_c_after_the_command_ended_keeps_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    # The window between a command's body ending (its output printed) and the process ending: a
    # Ctrl-C there must not turn a finished run into exit 130, nor print a second --json document.
    from neuronc._output import out
    from neuronc.cli import _app

    _app._COMMAND_ENDED[:] = [4]
    try:
        assert _app.command_failed(KeyboardInterrupt(), args=["verify", "b", "--json"]) == 4
    finally:
        _app._COMMAND_ENDED.clear()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    # Before the body ran (argument parsing), it is the documented interrupt: 130 and one document.
    try:
        assert _app.command_failed(KeyboardInterrupt(), args=["verify", "b", "--json"]) == 130
    finally:
        out.end_command()  # back to text output for the tests that follow in this process
    assert json.loads(capsys.readouterr().out)["error"] == "interrupted"


def test_a_result_is_printed_whole_when_a_ctrl_c_comes_while_it_is_written() -> None:
    # out.result holds SIGINT while it writes: the signal raised in the middle of rendering neither
    # cuts the output nor raises afterwards, and the handler in place before is back after it.
    child = textwrap.dedent(
        """
        import signal
        from neuronc._output import out

        def render():
            out.print("first half")
            signal.raise_signal(signal.SIGINT)
            out.print("second half")

        out.result({"ok": True}, render)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        print("after the result")
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["first", "half", "second", "half", "after", "the", "result"], proc.stdout
