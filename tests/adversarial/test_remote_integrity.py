"""A remote store that is damaged, missing or raced: clear exits, and a way back to a sound store.

Against a real S3 server (SeaweedFS). Damage is done to the stored objects directly, the way a
faulty disk, a bad copy or a hand edit would: other bytes of the same size (only a hash can tell),
a truncated object, a missing one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from click.testing import CliRunner
from plugins.fake_backend import build_bundle, make_spec

from neuronc._output import out
from neuronc.bundle import MANIFEST_NAME, read_manifest, verify_bundle
from neuronc.cli import app
from neuronc.errors import RemoteStoreError, VerificationError
from neuronc.store import PublishStatus, RemoteStore, object_rel

pytestmark = pytest.mark.s3


@pytest.fixture
def bucket(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_server_and_make_bucket(s3_server, monkeypatch)


def _fs() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


def _invoke(runner: CliRunner, *args: str) -> Any:
    out.reset()
    return runner.invoke(app, list(args))


def _keys(bundle: Path) -> tuple[str, str]:
    manifest = read_manifest(bundle)
    return manifest.config_hash, manifest.toolchain_key


def test_store_list_prints_a_table_for_a_remote_store(bucket: str, tmp_path: Path, runner: CliRunner) -> None:
    url = f"s3://{bucket}/ci"
    store = RemoteStore(url, cache_dir=tmp_path / "c")
    store.publish(build_bundle(tmp_path / "a", spec=make_spec(batch_size=1)))
    store.publish(build_bundle(tmp_path / "b", spec=make_spec(batch_size=2)))
    result = _invoke(runner, "store", "list", "--store", url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any("key" in line and "age" in line for line in lines)
    assert sum("fake" in line for line in lines) == 2
    rows = json.loads(_invoke(runner, "store", "list", "--store", url, "--json").stdout)["bundles"]
    assert all(r["age_seconds"] is not None and r["path"].startswith(url + "/") for r in rows)


def _damage_same_size(path: str, size: int) -> None:
    _fs().pipe_file(path, b"\0" * size)


def _damage_truncate(path: str, size: int) -> None:
    _fs().pipe_file(path, b"\0" * (size // 2))


def _damage_delete(path: str, size: int) -> None:
    _fs().rm_file(path)


DAMAGE: dict[str, tuple[Callable[[str, int], None], str]] = {
    "other-bytes": (_damage_same_size, "hash differs"),
    "truncated": (_damage_truncate, "size differs"),
    "missing": (_damage_delete, "missing"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_object_is_found_by_verify_and_dropped_by_repair(
    damage: str, bucket: str, tmp_path: Path, runner: CliRunner
) -> None:
    url = f"s3://{bucket}/ci"
    bundle = build_bundle(tmp_path / "bundle")
    config, tool = _keys(bundle)
    RemoteStore(url, cache_dir=tmp_path / "publisher").publish(bundle)
    manifest = read_manifest(bundle)
    shard = next(f for f in manifest.files if f.role == "weights")
    do, words = DAMAGE[damage]
    do(f"{bucket}/ci/{object_rel(shard.sha256)}", shard.size)

    [entry] = RemoteStore(url, cache_dir=tmp_path / "lister").list()  # the manifest is still there
    result = _invoke(runner, "verify", entry.location, "--json")
    assert result.exit_code == 4, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is False and words in json.dumps(data["verify"])
    assert shard.path in json.dumps(data["verify"])
    assert "--repair" in data["error"]["hint"]

    reader = RemoteStore(url, cache_dir=tmp_path / "reader")
    if damage == "other-bytes":  # only a download can tell: the lookup says so, and what to do
        with pytest.raises(VerificationError, match="hash differs") as caught:
            reader.lookup(config, tool)
        assert f"store verify {config[:12]} --store {url} --repair" in (caught.value.hint or "")
    else:  # the size check before any download already refuses it: a miss
        assert reader.lookup(config, tool) is None
    assert _invoke(runner, "store", "verify", config[:8], "--store", url).exit_code == 4

    # No good copy on this host: --repair drops the bundle and the damaged object.
    result = _invoke(runner, "store", "verify", config[:8], "--store", url, "--repair", "--json")
    assert result.exit_code == 0, result.output
    [repaired] = json.loads(result.stdout)["bundles"]
    assert repaired["action"] == "dropped"
    assert RemoteStore(url, cache_dir=tmp_path / "after").list() == []

    # Publishing the key again uploads the object again (a same-size bad copy no longer counts as present).
    again = RemoteStore(url, cache_dir=tmp_path / "again").upload(bundle)
    assert again.status == "published" and again.objects_uploaded >= 1
    fetched = RemoteStore(url, cache_dir=tmp_path / "fresh").lookup(config, tool)
    assert fetched is not None and verify_bundle(fetched).ok


def test_repair_uploads_good_copies_from_a_local_bundle(bucket: str, tmp_path: Path, runner: CliRunner) -> None:
    url = f"s3://{bucket}/ci"
    bundle = build_bundle(tmp_path / "bundle")
    config, tool = _keys(bundle)
    RemoteStore(url, cache_dir=tmp_path / "pub").publish(bundle)
    for f in read_manifest(bundle).files:
        if f.role == "weights":
            _damage_same_size(f"{bucket}/ci/{object_rel(f.sha256)}", f.size)
    result = _invoke(runner, "store", "verify", config[:8], "--store", url, "--repair", "--from", str(bundle))
    assert result.exit_code == 0, result.output
    assert "repaired" in result.stdout
    assert _invoke(runner, "store", "verify", config[:8], "--store", url).exit_code == 0
    fetched = RemoteStore(url, cache_dir=tmp_path / "reader").lookup(config, tool)
    assert fetched is not None and verify_bundle(fetched).ok


def test_verify_of_a_sound_remote_bundle_passes(bucket: str, tmp_path: Path, runner: CliRunner) -> None:
    url = f"s3://{bucket}/ci"
    RemoteStore(url, cache_dir=tmp_path / "pub").publish(build_bundle(tmp_path / "bundle"))
    [entry] = RemoteStore(url, cache_dir=tmp_path / "c").list()
    result = _invoke(runner, "verify", entry.location)
    assert result.exit_code == 0, result.output
    assert "verify     ok" in result.stdout
    assert _invoke(runner, "verify", f"s3://{bucket}/ci/not-a-bundle").exit_code == 2


def test_a_missing_bucket_is_not_an_empty_store(bucket: str, tmp_path: Path, runner: CliRunner) -> None:
    url = f"s3://{bucket}-absent/ci"
    result = _invoke(runner, "store", "list", "--store", url)
    assert result.exit_code == 5
    assert "does not exist" in result.stderr and "no bundles" not in result.stdout
    store = RemoteStore(url, cache_dir=tmp_path / "c")
    for operation in (store.ensure_writable, lambda: store.lookup("ab" * 32, "cd" * 32), store.list, store.gc):
        with pytest.raises(RemoteStoreError, match="does not exist"):
            operation()
    # An existing bucket with nothing under the prefix is an empty store, and writable.
    empty = RemoteStore(f"s3://{bucket}/nothing-here", cache_dir=tmp_path / "e")
    assert empty.list() == []
    empty.ensure_writable()
    assert not [p for p in _fs().find(bucket) if "writable-" in p]  # the write check leaves no object behind


def test_the_loser_of_a_publish_race_says_so_and_uses_the_published_bundle(bucket: str, tmp_path: Path) -> None:
    url = f"s3://{bucket}/ci"
    spec = make_spec()
    stores = [RemoteStore(url, cache_dir=tmp_path / f"host{i}") for i in range(3)]
    writers: list[Any] = []
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            extra = {"logs/host.txt": f"host {i}\n".encode() * 4000}
            writers.append(_WriterSpy(stores[i], barrier))
            build_bundle(store=writers[-1], spec=spec, extra_files=extra)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    outcomes = [w.made.published for w in writers]
    assert sorted(str(o.status) for o in outcomes) == ["exists", "exists", "published"]
    [winner] = [o for o in outcomes if o.status is PublishStatus.PUBLISHED]
    stored = (winner.path / MANIFEST_NAME).read_bytes()
    for loser in (o for o in outcomes if o.lost_race):
        assert loser.message and "first; using its bundle" in loser.message
        assert (loser.path / MANIFEST_NAME).read_bytes() == stored  # the local copy is the published one
        assert verify_bundle(loser.path).ok
        assert loser.location == winner.location


class _WriterSpy:
    """A store whose writers all reach ``finish`` together (a real race); it keeps the writer it made."""

    def __init__(self, store: RemoteStore, barrier: threading.Barrier) -> None:
        self.store = store
        self.barrier = barrier
        self.made: Any = None

    def writer(self, *args: Any, **kwargs: Any) -> Any:
        made = self.store.writer(*args, **kwargs)
        finish = made.finish

        def lined_up(fields: Any) -> Path:
            self.barrier.wait(timeout=60)
            return finish(fields)

        made.finish = lined_up  # the test lines the finishes up; the store publishes through its hook
        self.made = made
        return made


def test_repair_passes_over_a_fifo_in_the_source_instead_of_waiting_on_it(
    bucket: str, tmp_path: Path, runner: CliRunner
) -> None:
    import os
    import shutil

    url = f"s3://{bucket}/ci"
    bundle = build_bundle(tmp_path / "bundle")
    config, _tool = _keys(bundle)
    RemoteStore(url, cache_dir=tmp_path / "pub").publish(bundle)
    source = tmp_path / "source"
    shutil.copytree(bundle, source)
    damaged = [f for f in read_manifest(bundle).files if f.role == "weights"]
    for f in damaged:
        _damage_same_size(f"{bucket}/ci/{object_rel(f.sha256)}", f.size)
        (source / f.path).unlink()
        os.mkfifo(source / f.path)  # opened for reading, a FIFO would wait for a writer forever
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(
            _invoke(runner, "store", "verify", config[:8], "--store", url, "--repair", "--from", str(source))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=120)
    assert done, "store verify --repair blocked on a FIFO in --from"
    assert "repaired" not in done[0].stdout  # no good copy of those objects: nothing was uploaded from a FIFO
