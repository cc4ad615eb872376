"""The bundle store: layout, lookup, lock, list, rm, gc, nearest, verify and repair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.fake_backend import FakeBackend, build_bundle, make_spec, spec_key

from neuronc.bundle import BuildRecord
from neuronc.errors import InvalidInputError
from neuronc.keys import toolchain_key, toolchain_label
from neuronc.store import LocalStore, default_store_path, model_slug, open_store


def test_default_store_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONC_STORE", str(tmp_path / "s"))
    assert open_store().location == str(tmp_path / "s")
    monkeypatch.delenv("NEURONC_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "neuronc" / "bundles"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".cache" / "neuronc" / "bundles"
    assert open_store(str(tmp_path / "flag")).location == str(tmp_path / "flag")
    assert open_store(f"file://{tmp_path / 'flag'}").location == str(tmp_path / "flag")
    with pytest.raises(InvalidInputError, match="unsupported scheme 'gs'"):
        open_store("gs://bucket/x")


def test_publish_lookup_layout(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    spec = make_spec(options={"artifact_bytes": 4096})
    key = spec_key(spec)
    versions = FakeBackend().toolchain_versions()
    tk = toolchain_key(versions)
    assert store.lookup(key.hash, tk) is None
    path = build_bundle(store=store, spec=spec)
    assert path == store.root / "acme--tiny-llama" / toolchain_label("fake", None, versions) / key.hash[:16]
    assert store.lookup(key.hash, tk) == path
    assert store.lookup(key.hash, "0" * 64) is None
    [entry] = store.list()
    assert entry.path == path and entry.manifest.config_hash == key.hash
    assert entry.size > 0
    assert model_slug("/data/models/llama/") == "local--llama"


def test_rm_and_gc(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
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
    store = LocalStore(tmp_path / "store")
    build_bundle(store=store, spec=make_spec(batch_size=1))
    wanted = spec_key(make_spec(batch_size=4))
    near = store.nearest(wanted.inputs)
    assert near is not None
    assert [d["field"] for d in near.differences] == ["batch_size"]


def test_store_writer_checks_keys_and_publishes_nothing_on_mismatch(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    spec = make_spec()
    with store.writer("ab" * 32, toolchain_key({})) as w:
        w.write_bytes("artifacts/a", b"a")
        with pytest.raises(ValueError, match="config hash"):
            w.finish(BuildRecord.for_build(spec, spec_key(spec), {}))
    assert store.list() == []
    assert [p for p in store.staging_dir.iterdir()] == []


def test_lock_waits_reports_holder_and_times_out(tmp_path: Path) -> None:
    import os
    import signal
    import time

    store = LocalStore(tmp_path / "store")
    key, tk = "1" * 64, "2" * 64
    pid = os.fork()
    if pid == 0:
        with store.lock(key, tk):
            time.sleep(30)
        os._exit(0)
    try:
        deadline = time.time() + 10
        lock_file = store.locks_dir / f"{key[:16]}-{tk[:16]}.lock"
        while not (lock_file.exists() and lock_file.read_text()) and time.time() < deadline:
            time.sleep(0.01)
        seen: list[str] = []
        with pytest.raises(TimeoutError):
            with store.lock(key, tk, timeout=0.2, on_wait=seen.append):
                pass
        assert seen and seen[0].startswith(f"pid {pid}")
        assert store.gc().removed == []  # a held lock is not stale
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    # The holder died: the kernel released the lock; the next builder gets it, gc may remove it.
    with store.lock(key, tk, timeout=2):
        pass
    assert [r.reason for r in store.gc().removed] == ["stale lock"]


def test_gc_keeps_bundles_from_a_newer_neuronc(tmp_path: Path) -> None:
    import json

    store = LocalStore(tmp_path / "store")
    path = build_bundle(store=store)
    data = json.loads((path / "manifest.json").read_text())
    data["schema_version"] = "2.0"
    (path / "manifest.json").write_text(json.dumps(data))
    assert store.gc().removed == []
    assert path.exists()


def test_find_by_hash_toolchain_and_path(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    a = build_bundle(store=store, spec=make_spec(batch_size=1))
    b = build_bundle(store=store, spec=make_spec(batch_size=2))
    ha, hb = read_hash(a), read_hash(b)
    common = next(i for i in range(64) if ha[i] != hb[i])
    if common >= 4:
        with pytest.raises(InvalidInputError, match="matches 2 bundles"):
            store.remove(ha[:common])
    assert [e.path for e in store.find(f"{ha[:12]}@{read_tk(a)[:6]}")] == [a]
    assert [e.path for e in store.find(str(b.relative_to(store.root)))] == [b]
    assert store.find(f"{ha[:12]}@ffffff") == [] or read_tk(a).startswith("ffffff")


def test_publish_copies_a_bundle_byte_for_byte(tmp_path: Path) -> None:
    from neuronc.errors import VerificationError

    store = LocalStore(tmp_path / "store")
    source = build_bundle(tmp_path / "out")
    published = store.publish(source)
    stored = published.path
    assert published.status == "published" and stored.is_relative_to(store.root)
    assert (stored / "manifest.json").read_bytes() == (source / "manifest.json").read_bytes()
    assert verify_bundle_ok(stored)
    again = store.publish(source)
    assert (again.path, again.status) == (stored, "exists")  # reused
    store.remove(read_hash(stored))
    (source / "weights" / "rank0.safetensors").write_bytes(b"tampered")
    with pytest.raises(VerificationError, match="failed verification") as info:
        store.publish(source)
    assert any("weights/rank0.safetensors" in d for d in info.value.details)
    assert store.list() == [] and list(store.staging_dir.iterdir()) == []


def verify_bundle_ok(path: Path) -> bool:
    from neuronc.bundle import verify_bundle

    return verify_bundle(path).ok


def test_store_verify_and_repair_a_damaged_local_bundle(tmp_path: Path, runner: CliRunner) -> None:
    from neuronc._output import out
    from neuronc.cli import app

    store = LocalStore(tmp_path / "store")
    source = build_bundle(tmp_path / "source")
    stored = store.publish(source).path
    key = read_hash(stored)[:10]

    def cli(*args: str) -> Any:
        out.reset()
        return runner.invoke(app, ["store", "verify", key, "--store", str(store.root), *args])

    assert cli().exit_code == 0
    (stored / "weights" / "rank0.safetensors").write_bytes(b"tampered")
    result = cli("--json")
    assert result.exit_code == 4
    assert "weights/rank0.safetensors" in result.stdout and "--repair" in result.stderr
    repaired = cli("--repair", "--from", str(source), "--json")
    assert repaired.exit_code == 0, repaired.output
    assert [b["action"] for b in json.loads(repaired.stdout)["bundles"]] == ["repaired"]
    assert cli().exit_code == 0
    (stored / "weights" / "rank0.safetensors").write_bytes(b"tampered again")
    dropped = cli("--repair", "--json")
    assert [b["action"] for b in json.loads(dropped.stdout)["bundles"]] == ["dropped"]
    assert store.list() == []


def test_store_commands_on_a_mistyped_local_path_say_it_does_not_exist(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`store list --store TYPO` used to print "no bundles in TYPO" and exit 0."""
    from neuronc._output import out
    from neuronc.cli import app

    missing = tmp_path / "stroe"
    for args in (["store", "list"], ["store", "gc"], ["store", "verify", "abcd"]):
        out.reset()
        result = runner.invoke(app, [*args, "--store", str(missing), "--json"])
        assert result.exit_code == 2, result.output
        assert f"store {missing} does not exist (--store)" in json.loads(result.stdout)["message"]
    monkeypatch.setenv("NEURONC_STORE", str(missing))
    out.reset()
    result = runner.invoke(app, ["store", "list"])
    assert result.exit_code == 2 and "(NEURONC_STORE)" in result.stderr
    # The default store (nothing compiled yet) is an empty store, not an error.
    monkeypatch.delenv("NEURONC_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh-cache"))
    out.reset()
    result = runner.invoke(app, ["store", "list", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["bundles"] == []
