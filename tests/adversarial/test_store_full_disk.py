"""A full disk under the store: DiskFullError (exit 5) naming the path and the space, nothing half-written.

Runs on a small tmpfs mounted for the test (root, and a kernel that lets this process mount);
skipped with the reason where mounting is not permitted. Covers each way bytes reach the local disk:
a BundleWriter staging a build, ``publish`` copying a bundle in, a remote store materialising a
bundle in its cache, and the CLI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from plugins.fake_backend import build_bundle, make_spec

from neuronc.errors import DiskFullError

SIZE = "1m"


def _leftovers(root: Path) -> list[str]:
    """Files under a store other than its lock files: what a failed write left behind."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts)


def test_a_build_staging_into_a_full_store(tiny_disk: Path) -> None:
    from neuronc.store import LocalStore

    store = LocalStore(tiny_disk / "store")
    with pytest.raises(DiskFullError) as caught:
        build_bundle(store=store, spec=make_spec(tp_degree=2), shard_bytes=2 * 1024 * 1024)  # type: ignore[arg-type]
    error = caught.value
    assert error.exit_code == 5
    assert "no space left on device" in error.message and str(tiny_disk) in error.message
    assert store.list() == [] and _leftovers(store.root) == []


def test_publishing_into_a_full_store_is_refused_before_writing(tiny_disk: Path, tmp_path: Path) -> None:
    from neuronc.store import LocalStore

    bundle = build_bundle(tmp_path / "bundle", spec=make_spec(tp_degree=2), shard_bytes=1024 * 1024)
    store = LocalStore(tiny_disk / "store")
    with pytest.raises(DiskFullError) as caught:
        store.publish(bundle)
    assert re.search(r"not enough space for bundle .*needs 2\.\d MiB", caught.value.message)
    assert str(tiny_disk) in caught.value.message
    assert store.list() == [] and _leftovers(store.root) == []


def test_the_cli_says_so_in_one_line(tiny_disk: Path, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "bundle", spec=make_spec(tp_degree=2), shard_bytes=1024 * 1024)
    result = subprocess.run(
        [sys.executable, "-m", "neuronc", "store", "publish", str(bundle), "--store", str(tiny_disk / "s")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 5, result.stderr
    assert "Traceback" not in result.stderr
    assert "not enough space" in result.stderr and str(tiny_disk) in result.stderr


@pytest.mark.s3
def test_a_remote_bundle_materialised_into_a_full_cache(
    tiny_disk: Path, tmp_path: Path, s3_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _seaweedfs import SeaweedFS, use_server_and_make_bucket

    from neuronc.bundle import read_manifest
    from neuronc.store import RemoteStore

    assert isinstance(s3_server, SeaweedFS)
    bucket = use_server_and_make_bucket(s3_server, monkeypatch)
    bundle = build_bundle(tmp_path / "bundle", spec=make_spec(tp_degree=2), shard_bytes=1024 * 1024)
    url = f"s3://{bucket}/ci"
    RemoteStore(url, cache_dir=tmp_path / "publisher").publish(bundle)
    manifest = read_manifest(bundle)
    reader = RemoteStore(url, cache_dir=tiny_disk / "cache")
    with pytest.raises(DiskFullError) as caught:
        reader.lookup(manifest.config_hash, manifest.toolchain_key)
    assert caught.value.exit_code == 5 and "not enough space for bundle" in caught.value.message
    assert _leftovers(tiny_disk / "cache") == []
    # Past the up-front check (the space is taken while downloading): still exit 5, nothing partial kept.
    monkeypatch.setattr("neuronc.fsutil.check_free_space", lambda *args, **kwargs: None)
    with pytest.raises(DiskFullError, match="no space left on device"):
        reader.lookup(manifest.config_hash, manifest.toolchain_key)
    assert not [p for p in _leftovers(tiny_disk / "cache") if p.endswith(".part") or "fetch-" in p]
    assert reader.cache.lookup(manifest.config_hash, manifest.toolchain_key) is None
