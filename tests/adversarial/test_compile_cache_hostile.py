"""`cache status` / `cache cleanup` on a compile cache shared with hostile or busy users (issue 41:
items 3, 12, 13 and 17).

The default cache (/var/tmp/neuron-compile-cache) is shared by every user of a host: anyone may
plant a FIFO, a folder they alone can read, a folder nested a thousand levels deep, or names with
terminal escapes; a compile may be running while cleanup looks. Each case runs the real command.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bundles import neuronc, text

CURRENT = "neuronxcc-2.21.33363.0+82129205"
HLO = {"model.hlo_module.pb": b"HloModule x", "compile_flags.json": b'["--target", "trn1"]'}


def invoke(*args: str) -> tuple[int, str, str]:
    out.reset()
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def entry(root: Path, name: str, files: dict[str, bytes], folder: str = CURRENT) -> Path:
    path = root / folder / name
    path.mkdir(parents=True)
    for file, data in files.items():
        (path / file).write_bytes(data)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "ncc"
    entry(root, "MODULE_1+aaaaaaaa", {**HLO, "model.neff": b"NEFF", "model.done": b""})
    return root


def test_a_fifo_named_lock_hangs_nothing(cache: Path, tmp_path: Path) -> None:
    """Item 3: the lock probe opens without blocking; a FIFO is a lock nobody can take (never removed)."""
    fifo_entry = entry(cache, "MODULE_2+aaaaaaaa", HLO)
    os.mkfifo(fifo_entry / "model.hlo_module.pb.lock")
    for args in (["status"], ["cleanup", "--dry-run"], ["cleanup"]):
        proc = neuronc("cache", *args, "--cache-dir", cache, "--json", cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, text(proc)
        assert b"Traceback" not in proc.stderr
    data = json.loads(neuronc("cache", "status", "--cache-dir", cache, "--json", cwd=tmp_path, timeout=60).stdout)
    [locked] = [e for e in data["entries"] if e["name"] == "MODULE_2+aaaaaaaa"]
    assert (locked["state"], locked["stale"]) == ("locked", False)
    assert (fifo_entry / "model.hlo_module.pb.lock").exists()


def _without_root_powers() -> list[str]:
    """A prefix that runs a command without root's power to read any file (or nothing, when not root)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, and no setpriv to drop CAP_DAC_OVERRIDE")
    return [
        "setpriv",
        "--bounding-set",
        "-dac_override,-dac_read_search",
        "--inh-caps",
        "-dac_override,-dac_read_search",
    ]


def _unprivileged(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1"}
    command = [*_without_root_powers(), sys.executable, "-m", "neuronc", *args]
    return subprocess.run(command, capture_output=True, env=env, cwd=cwd, timeout=60)


def test_an_unreadable_entry_is_reported_and_left_alone(cache: Path, tmp_path: Path) -> None:
    """Item 12: another user's 0700 folder in the shared cache is no traceback."""
    private = entry(cache, "MODULE_3+aaaaaaaa", {**HLO, "model.log": b"ERROR"})
    private.chmod(0)
    try:
        for args in (["status"], ["cleanup"]):
            proc = _unprivileged("cache", *args, "--cache-dir", str(cache), cwd=tmp_path)
            assert proc.returncode == 0, text(proc)
            assert b"Traceback" not in proc.stderr
            assert b"MODULE_3+aaaaaaaa: cannot read: Permission denied" in proc.stderr, text(proc)
            proc = _unprivileged("cache", *args, "--cache-dir", str(cache), "--json", cwd=tmp_path)
            assert proc.returncode == 0, text(proc)
            data = json.loads(proc.stdout)
            listed = data["unreadable"] if args == ["status"] else data["skipped"]
            assert [Path(item["path"]).name for item in listed] == ["MODULE_3+aaaaaaaa"]
    finally:
        private.chmod(0o700)
    assert (private / "model.log").exists()  # never removed: it could not be looked at


def test_an_entry_nested_deeper_than_python_recurses(cache: Path) -> None:
    """Item 12: 1,100 levels below a failed entry: counted, and removed, without a RecursionError."""
    failed = entry(cache, "MODULE_4+aaaaaaaa", {**HLO, "model.log": b"ERROR"})
    fd = os.open(failed, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):  # one level at a time: os.makedirs itself recurses
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leaf, b"x" * 10)
    os.close(leaf)
    os.close(fd)
    try:
        code, stdout, stderr = invoke("cache", "status", "--cache-dir", str(cache), "--json")
        assert code == 0, stderr
        [row] = [e for e in json.loads(stdout)["entries"] if e["name"] == "MODULE_4+aaaaaaaa"]
        assert row["state"] == "failed" and row["bytes"] >= 10
        code, stdout, stderr = invoke("cache", "cleanup", "--cache-dir", str(cache), "--json")
        assert code == 0, stderr
        assert [Path(r["path"]).name for r in json.loads(stdout)["removed"]] == ["MODULE_4+aaaaaaaa"]
        assert not failed.exists()
    finally:  # pytest's own clean-up of old temporary folders recurses (shutil.rmtree)
        if failed.exists():
            subprocess.run(["rm", "-rf", str(failed)], check=False)


@pytest.fixture
def held_failed(cache: Path) -> Iterator[Path]:
    """A failed entry (model.log, no NEFF) whose lock this process holds: a retry under way."""
    path = entry(cache, "MODULE_5+aaaaaaaa", {**HLO, "model.log": b"ERROR", "model.hlo_module.pb.lock": b""})
    fd = os.open(path / "model.hlo_module.pb.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield path
    finally:
        os.close(fd)


def test_cleanup_never_removes_an_entry_whose_lock_is_held(cache: Path, held_failed: Path) -> None:
    """Item 13: locks are looked at before the log; a held lock keeps its folder, "locked", not "failed"."""
    code, stdout, stderr = invoke("cache", "status", "--cache-dir", str(cache), "--json")
    assert code == 0, stderr
    [row] = [e for e in json.loads(stdout)["entries"] if e["name"] == held_failed.name]
    assert (row["state"], row["stale"]) == ("locked", False)
    code, stdout, stderr = invoke("cache", "cleanup", "--cache-dir", str(cache), "--failed", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["removed"] == []
    assert (held_failed / "model.log").exists()


@pytest.fixture
def compiler(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process named neuronx-cc (as the compiler's console script is), running while the test looks."""
    program = tmp_path / "bin" / "neuronx-cc"
    program.parent.mkdir()
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, program)
    proc = subprocess.Popen([str(program), "60"])
    time.sleep(0.2)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_cleanup_keeps_every_lock_while_a_compiler_runs(cache: Path, compiler: subprocess.Popen[bytes]) -> None:
    """Item 13: as optimum-neuron's cleanup (no lock removed while neuronx-cc runs), and a failed entry
    with a lock file is kept too: libneuronxla's locking is closed source, flock may not see it."""
    stale = entry(cache, "MODULE_6+aaaaaaaa", {**HLO, "model.hlo_module.pb.lock": b""})
    failed_locked = entry(cache, "MODULE_7+aaaaaaaa", {**HLO, "model.log": b"E", "model.hlo_module.pb.lock": b""})
    failed = entry(cache, "MODULE_8+aaaaaaaa", {**HLO, "model.log": b"E"})
    code, stdout, stderr = invoke("cache", "cleanup", "--cache-dir", str(cache), "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert [Path(r["path"]).name for r in data["removed"]] == ["MODULE_8+aaaaaaaa"]
    kept = {Path(s["path"]).name: s["reason"] for s in data["skipped"]}
    assert set(kept) == {"MODULE_6+aaaaaaaa", "MODULE_7+aaaaaaaa"}
    assert f"pid {compiler.pid}" in kept["MODULE_6+aaaaaaaa"]
    assert (stale / "model.hlo_module.pb.lock").exists() and (failed_locked / "model.log").exists()
    assert not failed.exists()
    code, _, stderr = invoke("cache", "cleanup", "--cache-dir", str(cache))
    assert code == 0 and "kept" in stderr and "neuronx-cc is running" in stderr


def test_names_from_the_cache_reach_the_terminal_escaped(cache: Path) -> None:
    """Item 17: escape sequences and line feeds in folder names are shown escaped, in status and cleanup."""
    hostile = "neuronxcc-2.21\x1b[2J\nFAKE LINE"
    entry(cache, "MODULE_9\x1b]0;owned\x07+aaaaaaaa", {**HLO, "model.log": b"E"}, folder=hostile)
    for args in (["status"], ["cleanup", "--dry-run"], ["cleanup"]):
        code, stdout, stderr = invoke("cache", *args, "--cache-dir", str(cache))
        assert code == 0, stderr
        for stream in (stdout, stderr):
            assert "\x1b" not in stream and "\x07" not in stream
            assert not any(line.startswith("FAKE LINE") for line in stream.splitlines())
        assert "\\x1b" in stdout and "\\n" in stdout
