"""Remote stores against a real S3 server (SeaweedFS on localhost), plus hf:// URL parsing and layout.

No S3 double: every s3:// test talks to ``weed server -s3`` started by the fixture below. The
Hugging Face Hub cannot be reached here, so hf:// is tested for URL parsing and layout only.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from click.testing import CliRunner
from plugins.fake_backend import build_bundle, make_spec, register, spec_key

from neuronc._output import out
from neuronc.bundle import MANIFEST_NAME, read_manifest, verify_bundle
from neuronc.cli import app
from neuronc.errors import InvalidInputError, RemoteStoreError, VerificationError
from neuronc.keys import toolchain_key
from neuronc.store import (
    OBJECTS_DIR,
    LocalStore,
    RemoteStore,
    object_rel,
    open_store,
    parse_store_url,
)

# -- URL parsing and layout (no server) --------------------------------------------------------


def _invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()  # the output object caches consoles bound to the previous invocation's streams
    return runner.invoke(app, args)


@pytest.mark.parametrize(
    ("url", "scheme", "container", "prefix", "repo_type", "revision", "fs_root"),
    [
        ("s3://bucket", "s3", "bucket", "", "model", None, "bucket"),
        ("s3://bucket/ci/bundles/", "s3", "bucket", "ci/bundles", "model", None, "bucket/ci/bundles"),
        ("hf://acme/neuron-bundles", "hf", "acme/neuron-bundles", "", "model", None, "acme/neuron-bundles"),
        ("hf://datasets/acme/b/v1", "hf", "acme/b", "v1", "dataset", None, "datasets/acme/b/v1"),
        ("hf://acme/b@ci/prebuilt", "hf", "acme/b", "prebuilt", "model", "ci", "acme/b@ci/prebuilt"),
        ("hf://models/acme/b", "hf", "acme/b", "", "model", None, "acme/b"),
    ],
)
def test_parse_store_url(
    url: str, scheme: str, container: str, prefix: str, repo_type: str, revision: str | None, fs_root: str
) -> None:
    parsed = parse_store_url(url)
    assert (parsed.scheme, parsed.container, parsed.prefix, parsed.repo_type, parsed.revision) == (
        scheme,
        container,
        prefix,
        repo_type,
        revision,
    )
    assert parsed.fs_root == fs_root
    assert parse_store_url(parsed.url) == parsed  # round trip


@pytest.mark.parametrize("url", ["s3://", "hf://acme", "hf://datasets/acme", "s3://b/../x", "gs://b/p", "hf://a/@x"])
def test_parse_store_url_rejects(url: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_store_url(url)


def test_open_store_picks_local_or_remote(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path / "s"), LocalStore)
    assert isinstance(open_store(None), LocalStore)
    remote = open_store("hf://acme/bundles", cache_dir=tmp_path / "cache")
    assert isinstance(remote, RemoteStore)
    assert remote.location == "hf://acme/bundles"
    with pytest.raises(InvalidInputError, match="unsupported scheme"):
        open_store("ftp://host/x")


def test_hf_layout_matches_local_store(tmp_path: Path) -> None:
    """hf:// uses the local store's bundle paths; objects and manifests are repo paths under the prefix."""
    bundle = build_bundle(tmp_path / "b")
    manifest = read_manifest(bundle)
    local = LocalStore(tmp_path / "local")
    expected = local.path_for(manifest).relative_to(local.root)
    assert expected.parts[1] == manifest.toolchain_label  # the label the build recorded
    remote = RemoteStore("hf://datasets/acme/bundles@main/neuronc", cache_dir=tmp_path / "cache")
    rel = remote.bundle_rel(manifest)
    assert rel == expected.as_posix()
    assert rel.split("/")[-1] == manifest.config_hash[:16]
    sha = manifest.files[0].sha256
    assert remote.url.repo_path(object_rel(sha)) == f"neuronc/{OBJECTS_DIR}/{sha[:2]}/{sha}"
    assert remote.io.path(f"{rel}/{MANIFEST_NAME}") == f"datasets/acme/bundles@main/neuronc/{rel}/manifest.json"


# -- a real S3 server ------------------------------------------------------------------------


@pytest.fixture
def s3_env(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto at the server the way a user would (environment), and make a fresh bucket."""
    return use_server_and_make_bucket(s3_server, monkeypatch)


def _remote(bucket: str, tmp_path: Path, name: str = "cache", prefix: str = "ci/bundles") -> RemoteStore:
    return RemoteStore(f"s3://{bucket}/{prefix}", cache_dir=tmp_path / name)


def _keys(bundle: Path) -> tuple[str, str]:
    manifest = read_manifest(bundle)
    return manifest.config_hash, manifest.toolchain_key


def _raw_fs() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


@pytest.mark.s3
def test_publish_then_lookup_from_another_host(s3_env: str, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "bundle", shard_bytes=3 * 1024 * 1024)
    publisher = _remote(s3_env, tmp_path, "publisher-cache")
    result = publisher.upload(bundle)
    assert result.status == "published"
    manifest = read_manifest(bundle)
    assert result.objects_uploaded == len({f.sha256 for f in manifest.files})
    assert result.bytes_uploaded == sum({f.sha256: f.size for f in manifest.files}.values())

    # The remote layout: the local store's bundle path with the manifest byte for byte; objects by hash.
    fs = _raw_fs()
    rel = publisher.bundle_rel(manifest)
    assert fs.cat_file(f"{s3_env}/ci/bundles/{rel}/manifest.json") == (bundle / MANIFEST_NAME).read_bytes()
    for entry in manifest.files:
        assert fs.info(f"{s3_env}/ci/bundles/{object_rel(entry.sha256)}")["size"] == entry.size

    # Another host (a fresh cache) finds it, downloads it, and gets a bundle that verifies.
    reader = _remote(s3_env, tmp_path, "reader-cache")
    config, tool = _keys(bundle)
    assert reader.locate(config, tool) == f"s3://{s3_env}/ci/bundles/{rel}"
    fetched = reader.lookup(config, tool)
    assert fetched is not None
    assert fetched.is_relative_to(tmp_path / "reader-cache")
    assert verify_bundle(fetched).ok
    assert (fetched / MANIFEST_NAME).read_bytes() == (bundle / MANIFEST_NAME).read_bytes()
    # A second lookup is served from the local cache without downloading again.
    before = {p: p.stat().st_mtime_ns for p in fetched.rglob("*") if p.is_file()}
    assert reader.lookup(config, tool) == fetched
    assert {p: p.stat().st_mtime_ns for p in fetched.rglob("*") if p.is_file()} == before
    # Publishing the same bundle again uploads nothing.
    again = publisher.upload(bundle)
    assert (again.status, again.objects_uploaded) == ("exists", 0)


@pytest.mark.s3
def test_a_bundle_exists_only_once_its_manifest_is_there_and_its_objects_verify(s3_env: str, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "bundle")
    manifest = read_manifest(bundle)
    config, tool = _keys(bundle)
    store = _remote(s3_env, tmp_path)
    store.publish(bundle)
    fs = _raw_fs()
    rel = store.bundle_rel(manifest)
    manifest_path = f"{s3_env}/ci/bundles/{rel}/manifest.json"

    # Objects without a manifest (a publisher interrupted before its last step): not a bundle.
    raw = fs.cat_file(manifest_path)
    fs.rm_file(manifest_path)
    assert store.locate(config, tool) is None
    assert store.lookup(config, tool) is None
    assert store.probe(config, tool).status == "miss"

    # A manifest whose object is missing: not a bundle either.
    fs.pipe_file(manifest_path, raw)
    victim = manifest.files[0]
    object_path = f"{s3_env}/ci/bundles/{object_rel(victim.sha256)}"
    content = fs.cat_file(object_path)
    fs.rm_file(object_path)
    assert store.locate(config, tool) is None
    assert store.missing_objects(manifest) == [f"{victim.path} (object {victim.sha256[:12]} missing)"]

    # An unreadable manifest is not a bundle.
    fs.pipe_file(object_path, content)
    fs.pipe_file(manifest_path, b'{"schema_version": "1.0", "oops": ')
    assert store.locate(config, tool) is None

    fs.pipe_file(manifest_path, raw)
    assert store.locate(config, tool) is not None


@pytest.mark.s3
def test_reader_verifies_hashes_and_keeps_nothing_corrupt(s3_env: str, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "bundle")
    manifest = read_manifest(bundle)
    config, tool = _keys(bundle)
    _remote(s3_env, tmp_path, "pub").upload(bundle)
    fs = _raw_fs()
    shard = next(f for f in manifest.files if f.role == "weights")
    path = f"{s3_env}/ci/bundles/{object_rel(shard.sha256)}"
    fs.pipe_file(path, b"\0" * shard.size)  # same size, different bytes: only the hash can tell

    reader = _remote(s3_env, tmp_path, "reader")
    with pytest.raises(VerificationError, match="failed verification") as caught:
        reader.lookup(config, tool)
    assert caught.value.exit_code == 4
    assert reader.cache.lookup(config, tool) is None
    assert not (reader.cache.root / OBJECTS_DIR / shard.sha256[:2] / shard.sha256).exists()
    assert not [p for p in reader.cache.root.rglob("*.part")]


@pytest.mark.s3
def test_concurrent_publishers_of_one_key_do_not_corrupt_each_other(s3_env: str, tmp_path: Path) -> None:
    """Two hosts compile the same key with different bytes (compiles are not bit-reproducible)."""
    spec = make_spec()
    bundles = [
        build_bundle(tmp_path / f"host{i}", spec=spec, extra_files={"logs/host.txt": f"host {i}\n".encode() * 5000})
        for i in range(4)
    ]
    assert len({_keys(b) for b in bundles}) == 1
    assert len({(b / MANIFEST_NAME).read_bytes() for b in bundles}) == 4
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(bundles))

    def publish(i: int) -> None:
        try:
            store = _remote(s3_env, tmp_path, f"cache{i}")
            barrier.wait()
            results[i] = store.upload(bundles[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(bundles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    statuses = sorted(r.status for r in results.values())
    # SeaweedFS honours If-None-Match: exactly one publisher's manifest wins, the others reuse it.
    assert statuses.count("published") == 1, statuses
    winner = next(i for i, r in results.items() if r.status == "published")
    fetched = _remote(s3_env, tmp_path, "reader").lookup(*_keys(bundles[0]))
    assert fetched is not None
    assert verify_bundle(fetched).ok
    assert (fetched / MANIFEST_NAME).read_bytes() == (bundles[winner] / MANIFEST_NAME).read_bytes()
    assert (fetched / "logs/host.txt").read_bytes() == (bundles[winner] / "logs/host.txt").read_bytes()


@pytest.mark.s3
def test_readers_download_only_what_they_need(s3_env: str, tmp_path: Path) -> None:
    """Two bundles share their weights and model files; fetching the second downloads only its own objects."""
    a = build_bundle(tmp_path / "a", spec=make_spec(batch_size=1))
    b = build_bundle(tmp_path / "b", spec=make_spec(batch_size=4))
    publisher = _remote(s3_env, tmp_path, "pub")
    publisher.upload(a)
    result_b = publisher.upload(b)
    files_a = {f.sha256 for f in read_manifest(a).files}
    files_b = {f.sha256 for f in read_manifest(b).files}
    shared = files_a & files_b
    assert shared, "the fake bundles share weight shards"
    assert result_b.objects_present == len(shared)
    assert result_b.objects_uploaded == len(files_b - files_a)

    reader = _remote(s3_env, tmp_path, "reader")
    assert reader.lookup(*_keys(a)) is not None
    objects = reader.cache.root / OBJECTS_DIR
    cached = {p.name: p.stat().st_mtime_ns for p in objects.rglob("*") if p.is_file()}
    assert set(cached) == files_a
    time.sleep(0.01)
    fetched_b = reader.lookup(*_keys(b))
    assert fetched_b is not None and verify_bundle(fetched_b).ok
    after = {p.name: p.stat().st_mtime_ns for p in objects.rglob("*") if p.is_file()}
    assert set(after) == files_a | files_b
    assert all(after[sha] == cached[sha] for sha in shared)  # not downloaded again
    # Probing (what `neuronc plan` does) downloads no object at all.
    fresh = _remote(s3_env, tmp_path, "probe-only")
    assert fresh.probe(*_keys(b)).status == "hit"
    assert not (fresh.cache.root / OBJECTS_DIR).exists()


@pytest.mark.s3
def test_store_writer_publishes_and_resumes_an_interrupted_upload(s3_env: str, tmp_path: Path) -> None:
    """The pipeline's path: lock, writer, finish; finish uploads (files first, manifest last)."""
    register()
    spec = make_spec(tp_degree=4)
    store = RemoteStore(f"s3://{s3_env}-missing/x", cache_dir=tmp_path / "cache")
    # The bucket does not exist: the bundle is built locally, the upload fails with exit 5.
    with pytest.raises(RemoteStoreError) as caught:
        build_bundle(store=store, spec=spec)  # type: ignore[arg-type]
    assert caught.value.exit_code == 5
    config = spec_key(spec).hash
    from neuronc.backends import get_backend

    tool = toolchain_key(get_backend(spec.backend).toolchain.toolchain_versions())
    assert store.cache.lookup(config, tool) is not None  # built here, not yet published

    _raw_fs().mkdir(f"{s3_env}-missing")
    assert store.lookup(config, tool) is None  # a lookup never writes to the store
    assert store.probe(config, tool).status == "miss"
    with store.lock(config, tool):  # the write path: the pending upload is finished under the key lock
        found = store.lookup(config, tool)
    assert found is not None
    assert _remote(f"{s3_env}-missing", tmp_path, "other", prefix="x").locate(config, tool) is not None
    assert not list((store.cache.root / ".pending").iterdir())

    # The normal path, with the bucket in place.
    ok = RemoteStore(f"s3://{s3_env}/y", cache_dir=tmp_path / "cache2")
    with ok.lock(config, tool):
        path = build_bundle(store=ok, spec=spec)  # type: ignore[arg-type]
    assert verify_bundle(path).ok
    assert _remote(s3_env, tmp_path, "third", prefix="y").lookup(config, tool) is not None


@pytest.mark.s3
def test_list_find_remove_and_gc(s3_env: str, tmp_path: Path) -> None:
    a = build_bundle(tmp_path / "a", spec=make_spec(batch_size=1))
    b = build_bundle(tmp_path / "b", spec=make_spec(batch_size=2))
    store = _remote(s3_env, tmp_path)
    store.publish(a)
    store.publish(b)
    listed = store.list()
    assert sorted(e.manifest.config_hash for e in listed) == sorted([_keys(a)[0], _keys(b)[0]])
    assert all(e.location.startswith(f"s3://{s3_env}/ci/bundles/") for e in listed)
    assert [e.manifest.config_hash for e in store.find(_keys(a)[0][:8])] == [_keys(a)[0]]
    assert store.probe(_keys(a)[0], "0" * 64).status == "other-toolchain"

    removed = store.remove(_keys(b)[0][:10])
    assert len(removed) == 1
    assert store.locate(*_keys(b)) is None
    young = store.gc()  # default grace: nothing is old enough to collect
    assert young.removed == [] and young.kept_young > 0
    report = store.gc(grace_seconds=0)
    only_b = {f.sha256 for f in read_manifest(b).files} - {f.sha256 for f in read_manifest(a).files}
    assert {r.path.rsplit("/", 1)[-1] for r in report.removed} == only_b
    assert report.bytes_freed == sum(f.size for f in read_manifest(b).files if f.sha256 in only_b)
    assert store.locate(*_keys(a)) is not None  # still complete
    with pytest.raises(InvalidInputError):
        store.remove(_keys(b)[0][:10])


@pytest.mark.s3
def test_plan_reports_a_remote_store_hit(s3_env: str, tmp_path: Path, runner: CliRunner) -> None:
    register()
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "model: {id: acme/tiny-llama, revision: 0123456789abcdef0123456789abcdef01234567}\n"
        "backend: fake\ntarget: inf2\ntp_degree: 2\nbatch_size: 1\namp: bf16\n"
        "sequence: {max_length: 256, max_context_length: 128, context_buckets: [64, 128], token_buckets: [128, 256]}\n"
        "compiler: {flags: ['-O1']}\n"
    )
    from neuronc.profile import load_profile

    spec = load_profile(profile).specs[0]
    bundle = build_bundle(tmp_path / "b", spec=spec)
    store_url = f"s3://{s3_env}/plan"
    RemoteStore(store_url, cache_dir=tmp_path / "c").publish(bundle)
    result = _invoke(runner, ["plan", str(profile), "--store", store_url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    build = data["builds"][0]
    assert build["store"]["status"] == "hit"
    assert build["store"]["location"].startswith(store_url + "/")
    assert {g["store"] for g in build["graphs"]} == {"hit"}


@pytest.mark.s3
def test_ci_flow_compile_only_key_publishes_and_another_runner_gets_a_verified_hit(
    s3_env: str, tmp_path: Path, runner: CliRunner, repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ci.md end to end: matrix → compile --only KEY --store s3:// → verify; then --require-hit elsewhere."""
    register()
    model = repo_root / "profiles" / "models" / "tiny-llama"
    profile = tmp_path / "fan.yaml"
    profile.write_text(
        f"model: {{id: {model}}}\nbackend: fake\ntarget: inf2\ntp_degree: 1\n"
        "sequence: {max_length: 128}\nmatrix: {batch_size: [1, 2]}\n"
    )
    entry = json.loads(_invoke(runner, ["matrix", str(profile)]).stdout)["include"][1]
    store_url = f"s3://{s3_env}/ci"
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(tmp_path / "runner-a"))
    args = ["compile", entry["profile"], "--only", entry["key"], "--store", store_url]
    result = _invoke(runner, [*args, "--out", str(tmp_path / "a"), "--report", str(tmp_path / "a.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "a.json").read_text())["builds"][0]["status"] == "built"
    assert _invoke(runner, ["verify", str(tmp_path / "a")]).exit_code == 0

    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(tmp_path / "runner-b"))  # another machine
    result = _invoke(
        runner, [*args, "--require-hit", "--out", str(tmp_path / "b"), "--report", str(tmp_path / "b.json")]
    )
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "b.json").read_text())["builds"][0]
    assert (record["status"], record["config_hash"]) == ("hit", entry["config_hash"])
    assert verify_bundle(tmp_path / "b").ok
    assert (tmp_path / "b" / MANIFEST_NAME).read_bytes() == (tmp_path / "a" / MANIFEST_NAME).read_bytes()

    other = json.loads(_invoke(runner, ["matrix", str(profile)]).stdout)["include"][0]
    result = _invoke(
        runner, ["compile", other["profile"], "--only", other["key"], "--store", store_url, "--require-hit"]
    )
    assert result.exit_code == 6  # never built: --require-hit misses
