"""`compile --out` onto a full disk: exit 5 naming the path and the space, and nothing half-copied.

The bundle is built into a store on the normal disk; only the ``--out`` copy goes to a small tmpfs
(skipped with the reason where mounting is not permitted).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from plugins import pipeline_backend


@pytest.fixture(autouse=True)
def _plugins() -> Iterator[None]:
    pipeline_backend.register()
    yield
    pipeline_backend.unregister()


def compile_cli(profile: Path, out: Path, store: Path) -> subprocess.CompletedProcess[str]:
    script = (
        "import sys\nfrom plugins import pipeline_backend\npipeline_backend.register()\n"
        "from neuronc.cli import main\nmain(sys.argv[1:])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), *sys.path])}
    args = ["compile", str(profile), "--store", str(store), "--out", str(out), "--json"]
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env)


def test_compile_out_onto_a_full_disk_is_exit_5_and_leaves_the_old_bundle(
    small_fs: Callable[..., Path], tmp_path: Path
) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    store = tmp_path / "store"
    first = compile_cli(profile, tmp_path / "elsewhere", store)
    assert first.returncode == 0, first.stderr
    bundle_bytes = sum(p.stat().st_size for p in (tmp_path / "elsewhere").rglob("*") if p.is_file())

    disk = small_fs(max(64 * 1024, bundle_bytes // 2))  # room for half the bundle
    out = disk / "bundle"
    proc = compile_cli(profile, out, store)
    assert proc.returncode == 5, proc.stderr
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["builds"][0]["error"]
    assert error["error"] == "disk_full" and str(out) in error["message"] and "needs" in error["message"]
    assert not out.exists() and list(disk.iterdir()) == []  # nothing half-copied

    # An older bundle at --out stays as it was when the new copy does not fit.
    roomy = small_fs(4 * bundle_bytes)
    old = roomy / "bundle"
    assert compile_cli(profile, old, store).returncode == 0
    before = sorted((p.relative_to(old), p.read_bytes()) for p in old.rglob("*") if p.is_file())
    free = shutil.disk_usage(roomy).free
    (roomy / "filler").write_bytes(b"\0" * max(0, free - bundle_bytes // 2))  # less than one bundle free
    again = compile_cli(profile, old, store)
    assert again.returncode == 5, again.stderr
    assert sorted((p.relative_to(old), p.read_bytes()) for p in old.rglob("*") if p.is_file()) == before


def test_a_disk_that_fills_during_the_copy_leaves_nothing_half_copied(
    small_fs: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuronc import fsutil
    from neuronc.errors import DiskFullError
    from neuronc.pipeline import place_bundle

    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    assert compile_cli(profile, tmp_path / "bundle", tmp_path / "store").returncode == 0
    size = sum(p.stat().st_size for p in (tmp_path / "bundle").rglob("*") if p.is_file())
    disk = small_fs(max(64 * 1024, size // 2))
    # The free-space check passes (as when another writer fills the disk after it): the copy
    # itself runs out of space.
    monkeypatch.setattr(fsutil, "free_bytes", lambda path: 1 << 40)
    with pytest.raises(DiskFullError) as caught:
        place_bundle(tmp_path / "bundle", disk / "out")
    assert str(disk / "out") in caught.value.message
    assert list(disk.iterdir()) == []
