"""The bundle store: layout, lookup, lock, list, rm, gc, nearest."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugins.fake_backend import FakeBackend, build_bundle, make_spec

from neuronc.errors import InvalidInputError
from neuronc.keys import config_key, toolchain_key, toolchain_label
from neuronc.store import Store, default_store_path, model_slug


def test_default_store_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONC_STORE", str(tmp_path / "s"))
    assert Store.default().root == tmp_path / "s"
    monkeypatch.delenv("NEURONC_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "neuronc" / "bundles"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".cache" / "neuronc" / "bundles"
    assert Store.from_option(str(tmp_path / "flag")).root == tmp_path / "flag"
    with pytest.raises(InvalidInputError):
        Store.from_option("s3://bucket/x")


def test_publish_lookup_layout(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    spec = make_spec(options={"artifact_bytes": 4096})
    key = config_key(spec)
    versions = FakeBackend().toolchain_versions()
    tk = toolchain_key(versions)
    assert store.lookup(key.hash, tk) is None
    path = build_bundle(store=store, spec=spec)
    assert path == store.root / "acme--tiny-llama" / toolchain_label("fake", versions) / key.hash[:16]
    assert store.lookup(key.hash, tk) == path
    assert store.lookup(key.hash, "0" * 64) is None
    [entry] = store.list()
    assert entry.path == path and entry.manifest.config_hash == key.hash
    assert entry.size > 0
    assert model_slug("/data/models/llama/") == "local--llama"


def test_rm_and_gc(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = build_bundle(store=store)
    # An incomplete directory at bundle depth and a staging leftover with no live owner.
    junk = path.parent / "deadbeefdeadbeef"
    junk.mkdir()
    (junk / "half.bin").write_bytes(b"x" * 1000)
    leftover = store.staging_dir / ".neuronc-staging-abc-1-ffff"
    leftover.mkdir(parents=True)
    (leftover / "big").write_bytes(b"y" * 5000)
    report = store.gc()
    assert report.bytes_freed == 6000
    assert not junk.exists() and not leftover.exists()
    assert store.lookup(read_hash(path), read_tk(path)) == path
    with pytest.raises(InvalidInputError):
        store.remove("zz")
    [removed] = store.remove(read_hash(path)[:8])
    assert removed.path == path and not path.exists()
    assert store.list() == []


def read_hash(path: Path) -> str:
    from neuronc.bundle import read_manifest

    return read_manifest(path).config_hash


def read_tk(path: Path) -> str:
    from neuronc.bundle import read_manifest

    return read_manifest(path).toolchain_key


def test_nearest_names_differing_fields(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    build_bundle(store=store, spec=make_spec(batch_size=1))
    wanted = config_key(make_spec(batch_size=4))
    near = store.nearest(wanted.inputs)
    assert near is not None
    assert [d["field"] for d in near.differences] == ["batch_size"]
