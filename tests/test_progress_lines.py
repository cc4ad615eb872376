"""Progress in a log (stderr not a terminal): a line when a task starts, a heartbeat while it runs,
a line with its elapsed time when it ends — a long stage is never minutes of silence in CI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from click.testing import CliRunner
from plugins import pipeline_backend
from rich.console import Console

from neuronc._output import out
from neuronc.cli import app


@pytest.fixture(autouse=True)
def _pipeline_backend() -> Iterator[None]:
    pipeline_backend.register()
    yield
    pipeline_backend.unregister()


def test_a_task_open_past_the_interval_says_it_is_still_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out.reset()
    buffer = StringIO()
    monkeypatch.setattr(out, "_stderr", Console(file=buffer, force_terminal=False, width=200))
    monkeypatch.setenv("NEURONC_HEARTBEAT_SECONDS", "0.1")
    with out.progress() as sink:
        slow = sink.task("compile 3 graphs", total=3)
        slow.advance()
        quick = sink.task("copy config")
        quick.done()
        time.sleep(0.45)
        slow.done("built")
        time.sleep(0.25)  # nothing more is said of a finished task
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "start: compile 3 graphs"
    beats = [line for line in lines if line.startswith("running: compile 3 graphs (")]
    assert 2 <= len(beats) <= 6 and beats[0].endswith(", 1/3)")
    assert not any(line.startswith("running: copy config") for line in lines)
    assert lines[-1].startswith("done: compile 3 graphs (built, ") and lines[-1].endswith("s)")
    assert lines.index(lines[-1]) > lines.index(beats[-1])


def test_compile_in_a_log_has_a_heartbeat(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml", options={"sleep": 0.4})
    out.reset()
    result = runner.invoke(
        app,
        ["compile", str(profile), "--store", str(tmp_path / "store"), "--jobs", "1"],
        env={"NEURONC_HEARTBEAT_SECONDS": "0.15"},
    )
    assert result.exit_code == 0, result.output
    assert "running: " in result.stderr and "start: " in result.stderr
