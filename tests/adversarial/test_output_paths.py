"""Files a user names (``--out``, ``--report``, ``profiles copy DEST``): written through what stands
there, or refused in one line.

A regular file at the path is replaced atomically (a reader never sees half of it). Anything else
is written through, as a shell's ``>`` does: a symbolic link stays a link and its target gets the
bytes (``--report /dev/stdout`` writes to the terminal or pipe; it used to replace the system's
link with a regular file when run as root), a character device stays a device, a FIFO's reader gets
the bytes. A path that cannot be written is one error line: a directory, or a child of a file,
exit 2; a full device, exit 5 naming the path.

Devices here are made with mknod inside the test's directory (as /dev/null and /dev/full are:
character devices 1:3 and 1:7): a neuronc that replaced them would replace these copies, never the
machine's own. Where mknod is not permitted those cases are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _bundles import neuronc, text, write_bundle
from _pipeline import write_profile, write_tiny_llama
from plugins import pipeline_backend

NULL, FULL = (1, 3), (1, 7)


def _device(path: Path, numbers: tuple[int, int]) -> Path:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(*numbers))
    except PermissionError as exc:
        pytest.skip(f"character devices cannot be made here: {exc}")
    return path


def _is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def _fail_fast_profile(tmp_path: Path) -> Path:
    """A profile whose build fails at once (no such model): compile still writes its report."""
    path = tmp_path / "p.yaml"
    path.write_text("model: {id: ./nowhere}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n")
    return path


# -- item 5: write through what stands at the path ------------------------------------------------


def test_schema_out_writes_through_a_link_a_device_and_a_fifo(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    proc = neuronc("schema", "--out", link, cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    assert link.is_symlink() and os.readlink(link) == real.name
    assert "$defs" in json.loads(real.read_text())

    null = _device(tmp_path / "null", NULL)
    proc = neuronc("schema", "--out", null, cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    assert _is_char_device(null)

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    proc = neuronc("schema", "--out", fifo, cwd=tmp_path)
    reader.join(timeout=60)
    assert proc.returncode == 0, text(proc)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert "$defs" in json.loads(received[0])


def test_compile_report_to_a_link_to_stdout_writes_to_stdout(tmp_path: Path) -> None:
    """A link to ``/proc/self/fd/1`` (what ``/dev/stdout`` is): the report goes down the pipe."""
    stdout_link = tmp_path / "stdout"
    stdout_link.symlink_to("/proc/self/fd/1")
    proc = neuronc("compile", _fail_fast_profile(tmp_path), "--report", stdout_link, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert stdout_link.is_symlink() and os.readlink(stdout_link) == "/proc/self/fd/1"
    report, _ = json.JSONDecoder().raw_decode(proc.stdout.decode())  # the report, then the table for people
    assert report["exit_code"] == 2 and report["builds"][0]["status"] == "failed", report


def test_compile_report_to_a_device_leaves_the_device(tmp_path: Path) -> None:
    null = _device(tmp_path / "null", NULL)
    proc = neuronc("compile", _fail_fast_profile(tmp_path), "--report", null, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert _is_char_device(null)


def test_profiles_copy_onto_a_link_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("old\n")
    link = tmp_path / "mine.yaml"
    link.symlink_to("real.yaml")
    proc = neuronc("profiles", "copy", "tiny-llama-cpu", link, "--force", cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    assert link.is_symlink()
    assert "tiny" in (tmp_path / "real.yaml").read_text()


# -- item 6: a destination that cannot be written is one error line --------------------------------


def _unwritable(tmp_path: Path, kind: str) -> tuple[Path, int]:
    """(a path of this kind, the exit code writing there must end with)."""
    if kind == "directory":
        path = tmp_path / "a-directory.json"
        path.mkdir()
        return path, 2
    if kind == "child-of-a-file":
        (tmp_path / "a-file").write_text("x")
        return tmp_path / "a-file" / "child.json", 2
    return _device(tmp_path / "full.json", FULL), 5


KINDS = ["directory", "child-of-a-file", "full-device"]


def _assert_one_error_line(proc: subprocess.CompletedProcess[bytes], code: int, path: Path) -> None:
    stderr = proc.stderr.decode()
    assert proc.returncode == code, (proc.returncode, text(proc))
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert errors and any(path.name in line or path.parent.name in line for line in errors), stderr


@pytest.mark.parametrize("kind", KINDS)
def test_compile_report_that_cannot_be_written(tmp_path: Path, kind: str) -> None:
    path, code = _unwritable(tmp_path, kind)
    proc = neuronc("compile", _fail_fast_profile(tmp_path), "--report", path, cwd=tmp_path)
    _assert_one_error_line(proc, code, path)


@pytest.mark.parametrize("kind", KINDS)
def test_schema_out_that_cannot_be_written(tmp_path: Path, kind: str) -> None:
    path, code = _unwritable(tmp_path, kind)
    proc = neuronc("schema", "--out", path, "--json", cwd=tmp_path)
    _assert_one_error_line(proc, code, path)
    assert json.loads(proc.stdout)["exit_code"] == code
    if kind == "full-device":
        assert _is_char_device(path)


@pytest.mark.parametrize("kind", ["child-of-a-file", "full-device"])
def test_profiles_copy_that_cannot_be_written(tmp_path: Path, kind: str) -> None:
    path, code = _unwritable(tmp_path, kind)
    dest = path.with_suffix(".yaml") if kind == "child-of-a-file" else path.rename(tmp_path / "full.yaml")
    proc = neuronc("profiles", "copy", "tiny-llama-cpu", dest, "--force", cwd=tmp_path)
    _assert_one_error_line(proc, code, dest)


def test_deploy_out_that_cannot_be_written(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "bundle", "nxdi")
    (tmp_path / "a-file").write_text("x")
    proc = neuronc("deploy", bundle, "--for", "vllm", "--out", tmp_path / "a-file" / "deploy", cwd=tmp_path)
    _assert_one_error_line(proc, 2, tmp_path / "a-file" / "deploy")


@pytest.fixture
def _plugins() -> Iterator[None]:
    pipeline_backend.register()
    yield
    pipeline_backend.unregister()


def _compile_with_plugin(
    profile: Path, store: Path, *args: str | Path, cwd: Path
) -> subprocess.CompletedProcess[bytes]:
    script = (
        "import sys\nfrom plugins import pipeline_backend\npipeline_backend.register()\n"
        "from neuronc.cli import main\nmain(sys.argv[1:])\n"
    )
    tests = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*os.environ.get("PYTHONPATH", "").split(os.pathsep), tests])}
    argv = ["compile", str(profile), "--store", str(store), *map(str, args)]
    return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.usefixtures("_plugins")
def test_compile_out_under_a_file_is_invalid_input(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    store = tmp_path / "store"
    (tmp_path / "a-file").write_text("x")
    dest = tmp_path / "a-file" / "bundle"
    proc = _compile_with_plugin(profile, store, "--out", dest, cwd=tmp_path)
    _assert_one_error_line(proc, 2, dest)
