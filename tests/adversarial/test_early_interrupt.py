"""Ctrl-C in the first moments of a run ends it like Ctrl-C later: exit 130, ``interrupted``, one JSON document.

Importing the command line (Click, rich, the command modules) takes a tenth of a second or more; a
SIGINT then used to surface as a KeyboardInterrupt traceback from whatever module was loading, the
process killed by the signal and no ``--json`` document. ``neuronc.__main__`` now holds SIGINT back
while it imports and ends the run at once afterwards; argument parsing is covered the same way.

The clock starts when ``neuronc.__main__`` has imported ``signal`` (``-X importtime`` reports it on
stderr, after the ``neuronc`` package): what comes before is Python's own start-up (site, ``.pth``
hooks, runpy compiling ``__main__``), where no program's code runs yet. Each delay after that lands somewhere in the imports, the argument
parsing, or the command itself; every one must end the documented way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DELAYS = [0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.16, 0.2, 0.25, 0.3]


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text("model: {id: ./model}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n")
    return path


def _interrupted_at(delay: float, args: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "neuronc", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.stderr is not None
    # The clock starts once neuronc.__main__ has imported `signal` (importtime's "| signal" line, after
    # the package's): from there it holds Ctrl-C back. What comes before — Python's start-up, runpy
    # finding and compiling __main__ — runs no program code that could do anything with a signal.
    waiting_for = [b"| neuronc", b"| signal"]
    while waiting_for:
        line = proc.stderr.readline()
        assert line, f"the child ended before importing {waiting_for[0]!r}"
        if line.rstrip().endswith(waiting_for[0]):
            waiting_for.pop(0)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=60)
    stderr = b"\n".join(line for line in rest.splitlines() if not line.startswith(b"import time:"))
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize("delay", DELAYS)
def test_an_early_interrupt_with_json_is_exit_130_and_one_document(tmp_path: Path, delay: float) -> None:
    code, stdout, stderr = _interrupted_at(delay, ["validate", str(_profile(tmp_path)), "--json"], tmp_path)
    assert b"Traceback" not in stderr, stderr.decode()
    assert code in (130, 0), (code, stderr.decode())  # 0: validate finished before the signal came
    document = json.loads(stdout)  # exactly one
    if code == 130:
        assert document["exit_code"] == 130 and document["error"] == "interrupted", document
        assert b"interrupted" in stderr


@pytest.mark.parametrize("delay", DELAYS[::3])
def test_an_early_interrupt_without_json_is_exit_130(tmp_path: Path, delay: float) -> None:
    code, stdout, stderr = _interrupted_at(delay, ["validate", str(_profile(tmp_path))], tmp_path)
    assert b"Traceback" not in stderr, stderr.decode()
    assert code in (130, 0), (code, stderr.decode())
    if code == 130:
        assert stdout == b""
        assert stderr.strip().splitlines()[-1].endswith(b"interrupted"), stderr.decode()
