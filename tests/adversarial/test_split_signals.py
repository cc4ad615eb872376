"""`neuronc split` stopped by a signal leaves nothing behind, and a later split sweeps what a killed one left.

SIGTERM is what ``docker stop``, CI cancellation and ``timeout`` send. It used to end a split at
once, leaving its hidden staging directory (``.OUT.XXXX.partial``, as large as the split) that
nothing ever removed. SIGTERM is now handled like Ctrl-C: the staging directory is removed, exit
130, one JSON document with ``--json``. SIGKILL cannot be handled; the directory it leaves is
removed by the next split into the same ``--out``, which knows the owner is gone because the
owner's flock on it is free. A split that is still running (here: stopped) keeps its directory.

Each signal lands mid-split for certain: the test stops the child (SIGSTOP) as soon as its staging
directory appears, sends the signal, then lets it continue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _checkpoints import tiny_llama

SCALE = 128  # ~150 MB of float32: a split that takes long enough to be caught in the middle


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("split-signals") / "model"
    tiny_llama(path, scale=SCALE)
    return path


def _spawn(model: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "neuronc", "split", str(model), "--tp", "2", "--out", str(out), "--hash", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        cwd=out.parent,
    )


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.") and p.name != out.name)


def _stopped_mid_split(model: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A split stopped (SIGSTOP) once its staging directory holds a shard, before it publishes."""
    for _ in range(5):
        proc = _spawn(model, out, *extra)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            staging = [out.parent / name for name in _leftovers(out)]
            if any(any(d.glob("rank-*")) for d in staging if d.is_dir()):
                proc.send_signal(signal.SIGSTOP)
                if not out.exists():
                    return proc
                break
            time.sleep(0.001)
        proc.kill()
        proc.communicate()
        if out.exists():
            import shutil

            shutil.rmtree(out)
    raise AssertionError("the split finished before it could be stopped in the middle, five times")


def _resume(proc: subprocess.Popen[bytes], sig: signal.Signals) -> tuple[bytes, bytes]:
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    return proc.communicate(timeout=120)


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_signal_mid_split_is_exit_130_and_leaves_nothing(
    model: Path, tmp_path: Path, sig: signal.Signals, json_out: bool
) -> None:
    out = tmp_path / "w"
    proc = _stopped_mid_split(model, out, *(["--json"] if json_out else []))
    assert _leftovers(out), "the staging directory exists while the split runs"
    stdout, stderr = _resume(proc, sig)
    assert proc.returncode == 130, (proc.returncode, stderr.decode())
    assert b"Traceback" not in stderr
    assert b"interrupted" in stderr
    assert _leftovers(out) == []
    assert not out.exists()
    if json_out:
        assert json.loads(stdout)["exit_code"] == 130
    else:
        assert stdout == b""


def test_a_later_split_sweeps_what_a_killed_one_left(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "w"
    proc = _stopped_mid_split(model, out)
    _resume(proc, signal.SIGKILL)
    left = _leftovers(out)
    assert left, "SIGKILL leaves the staging directory (nothing can handle it)"
    again = _spawn(model, out)
    _, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr.decode()
    assert _leftovers(out) == [], "the leftover of the killed split was swept"
    assert (out / "index.json").is_file()
    assert not list(out.glob(".neuronc*")), "no marker in the published split"


def test_a_running_splits_staging_is_never_swept(
    model: Path, tmp_path: Path, reaper: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "w"
    first = _stopped_mid_split(model, out)
    reaper.append(first)
    running = _leftovers(out)
    second = _spawn(model, tmp_path / "other")  # a different --out: nothing of the first is its business
    second.communicate(timeout=120)
    third = _spawn(model, out)  # the same --out: sees the first's directory, finds its owner alive
    third.communicate(timeout=120)
    assert third.returncode == 0
    assert set(running) <= set(_leftovers(out)), "the live split's staging directory is still there"
    _resume(first, signal.SIGTERM)
    assert first.returncode == 130
    assert _leftovers(out) == []
