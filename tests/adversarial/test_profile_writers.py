"""The three profile writers (`buckets --write`, `compile --model … --save-profile`, `profiles new`) follow
docs/failure-modes.md's "Files you name" rules (issue 41, item 2).

A regular file at the path is replaced atomically; anything else is written through, as a shell's `>`
does: a symbolic link stays a link and its target gets the profile (it used to be replaced by a copy,
the real profile left as it was, and the command said it wrote it), a character device stays a
device (`profiles new /dev/stdout` run as root used to replace the system's link). A read-only
profile is refused, not replaced; a directory, a parent that is a file and a read-only directory
are one error line, exit 2, never a traceback. Run as real processes.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _bundles import neuronc, text

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "profiles" / "tiny-llama-cpu.yaml"
TRAFFIC = "prompt_tokens=20,prompt_tokens_stdev=5,output_tokens=10"  # buckets unlike the demo's
FLAGS = ("--backend", "inductor", "--target", "cpu", "--max-length", "128")
WRITERS = ("buckets", "save-profile", "new")


def _demo(directory: Path, name: str = "real.yaml") -> Path:
    """The demo profile and its model in ``directory`` (the model path in it is relative)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "models").exists():
        shutil.copytree(DEMO.parent / "models", directory / "models")
    shutil.copyfile(DEMO, directory / name)
    return directory / name


def _write(writer: str, target: Path, cwd: Path) -> tuple[int, str]:
    """Run ``writer`` aimed at ``target``; its exit code and output."""
    model = cwd / "src" / "models" / "tiny-llama"
    if not model.exists():
        _demo(cwd / "src")
    if writer == "buckets":
        proc = neuronc("buckets", target, "--traffic", TRAFFIC, "--write", cwd=cwd)
    elif writer == "save-profile":
        proc = neuronc("compile", "--model", model, *FLAGS, "--save-profile", target, "--dry-run", cwd=cwd)
    else:
        proc = neuronc("profiles", "new", target, "--model", model, *FLAGS, cwd=cwd)
    assert "Traceback" not in text(proc), text(proc)
    return proc.returncode, text(proc)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symlinked_profile_stays_a_link_and_its_target_is_written(tmp_path: Path, writer: str) -> None:
    real = _demo(tmp_path / "profiles")
    before = real.read_text()
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    code, said = _write(writer, link, tmp_path)
    assert code == 0, said
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() != before, "the real profile is the one written"
    if writer == "buckets":
        assert "context_buckets: [32, 64]" not in real.read_text()


@pytest.mark.parametrize("writer", ("save-profile", "new"))
def test_a_character_device_stays_a_device(tmp_path: Path, writer: str) -> None:
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError as exc:
        pytest.skip(f"character devices cannot be made here: {exc}")
    link = tmp_path / "stdout"
    link.symlink_to(null)  # as /dev/stdout is a link
    code, said = _write(writer, link, tmp_path)
    assert code == 0, said
    assert link.is_symlink() and stat.S_ISCHR(os.lstat(null).st_mode)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_read_only_profile_is_refused_not_replaced(tmp_path: Path, writer: str) -> None:
    real = _demo(tmp_path / "profiles")
    before = real.read_bytes()
    real.chmod(0o444)
    code, said = _write(writer, real, tmp_path)
    assert code == 2, said
    assert "error: " in said and "read-only" in said
    assert real.read_bytes() == before and stat.S_IMODE(real.stat().st_mode) == 0o444


@pytest.mark.parametrize("writer", ("save-profile", "new"))
def test_a_directory_or_a_file_as_parent_is_one_error_line(tmp_path: Path, writer: str) -> None:
    (tmp_path / "a-file").write_text("x")
    code, said = _write(writer, tmp_path / "a-file" / "p.yaml", tmp_path)
    assert code == 2, said
    assert "cannot write the profile: Not a directory" in said, said
    (tmp_path / "a-dir").mkdir()
    code, said = _write(writer, tmp_path / "a-dir", tmp_path)
    assert code == 2, said
    assert "a-dir" in said and "directory" in said, said


@pytest.mark.parametrize("writer", WRITERS)
def test_a_read_only_directory_is_one_error_line(tmp_path: Path, writer: str, small_fs: Callable[..., Path]) -> None:
    """A read-only file system stands for a read-only directory: root (the suite's user in CI
    containers) writes into a 0555 directory regardless."""
    source = _demo(tmp_path / "src")
    mounted = small_fs(16 * 1024 * 1024)
    target = mounted / "p.yaml"
    shutil.copyfile(source, target)
    shutil.copytree(tmp_path / "src" / "models", mounted / "models")
    if writer != "buckets":
        target.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(mounted)], check=True)  # the test's own tmpfs
    code, said = _write(writer, target, tmp_path)
    assert code == 2, said
    assert "cannot write the profile" in said and "Read-only file system" in said, said
