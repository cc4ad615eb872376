"""Interrupted publishes over a slow link: Ctrl-C returns 130 at once with no manifest stored; a SIGKILLed
publish never resurrects a bundle that was removed, and ``--require-hit`` never writes.

SeaweedFS sits behind a throttling proxy (tests/_netproxy.py) so that an upload is still running when
the signal arrives; the publishers are real subprocesses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from _netproxy import ThrottlingProxy
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from plugins.fake_backend import TESTS_DIR, build_bundle, make_spec

from neuronc.bundle import MANIFEST_NAME, read_manifest
from neuronc.store import RemoteStore

pytestmark = pytest.mark.s3

RATE = 256 * 1024  # bytes per second through the proxy
SHARD_BYTES = 3 * 1024 * 1024  # two ranks: about 6 MiB, some 25 s at RATE
INTERRUPT_LIMIT_SECONDS = 5.0


@pytest.fixture
def slow_s3(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ThrottlingProxy]]:
    """A fresh bucket, and the environment pointed at it through a throttling proxy."""
    bucket = use_server_and_make_bucket(s3_server, monkeypatch)
    proxy = ThrottlingProxy(int(urlparse(s3_server.endpoint).port or 0), RATE)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    try:
        yield bucket, proxy
    finally:
        proxy.stop()


def _direct(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)


def _wait_for_upload(process: subprocess.Popen[bytes], proxy: ThrottlingProxy, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while proxy.bytes_up < at_least:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)


def _manifests(bucket: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
    return [p for p in fs.find(bucket) if p.endswith("/" + MANIFEST_NAME)]


def test_ctrl_c_during_an_s3_publish_returns_130_promptly_and_stores_no_manifest(
    slow_s3: tuple[str, ThrottlingProxy], s3_server: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, proxy = slow_s3
    bundle = build_bundle(tmp_path / "bundle", shard_bytes=SHARD_BYTES)
    url = f"s3://{bucket}/ci"
    process = subprocess.Popen(
        [sys.executable, "-m", "neuronc", "store", "publish", str(bundle), "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    try:
        _wait_for_upload(process, proxy, 512 * 1024)
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=30)
        seconds = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read().decode() if process.stderr else ""
    print(f"Ctrl-C during publish: exit {code} after {seconds:.2f} s ({proxy.bytes_up} bytes had gone up)")
    assert code == 130, stderr
    assert seconds < INTERRUPT_LIMIT_SECONDS
    assert "Traceback" not in stderr
    _direct(s3_server, monkeypatch)
    assert _manifests(bucket) == []
    assert RemoteStore(url, cache_dir=tmp_path / "reader").list() == []


CHILD = """
import sys
from pathlib import Path
from plugins.fake_backend import build_bundle, make_spec
from neuronc.store import RemoteStore

store = RemoteStore(sys.argv[1], cache_dir=Path(sys.argv[2]))
build_bundle(store=store, spec=make_spec(tp_degree=2), shard_bytes=int(sys.argv[3]))
print("published", flush=True)
"""


def _kill_a_publish(url: str, cache: Path, proxy: ThrottlingProxy) -> None:
    """Compile-and-publish in a subprocess, SIGKILLed while its objects upload."""
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(cache), str(SHARD_BYTES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        _wait_for_upload(process, proxy, 512 * 1024)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _keys(bundle: Path) -> tuple[str, str]:
    manifest = read_manifest(bundle)
    return manifest.config_hash, manifest.toolchain_key


@pytest.mark.parametrize("seen_before_rm", [True, False], ids=["seen-published", "not-seen"])
def test_a_killed_publish_never_resurrects_a_removed_bundle(
    slow_s3: tuple[str, ThrottlingProxy],
    s3_server: SeaweedFS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    seen_before_rm: bool,
) -> None:
    bucket, proxy = slow_s3
    url = f"s3://{bucket}/ci"
    host_a = tmp_path / "host-a"
    _kill_a_publish(url, host_a, proxy)
    assert list((host_a / ".pending").iterdir()), "the killed publish left its pending mark"
    _direct(s3_server, monkeypatch)

    # Host B compiles the same key (other bytes) and publishes it; then someone removes it.
    spec = make_spec(tp_degree=2)
    b_store = RemoteStore(url, cache_dir=tmp_path / "host-b")
    b_bundle = build_bundle(store=b_store, spec=spec, extra_files={"logs/host.txt": b"host b\n"})  # type: ignore[arg-type]
    config, tool = _keys(b_bundle)
    a_store = RemoteStore(url, cache_dir=host_a)
    if seen_before_rm:
        hit = a_store.lookup(config, tool)  # host A sees B's bundle: its own upload is moot
        assert hit is not None and (hit / MANIFEST_NAME).read_bytes() == (b_bundle / MANIFEST_NAME).read_bytes()
    [removed] = RemoteStore(url, cache_dir=tmp_path / "admin").remove(config[:12])
    assert removed.manifest.config_hash == config

    # Host A afterwards: a lookup (what --require-hit and plan do) is a miss and writes nothing.
    assert a_store.lookup(config, tool) is None
    assert a_store.probe(config, tool).status == "miss"
    assert _manifests(bucket) == []
    if seen_before_rm:
        assert not list((host_a / ".pending").iterdir())
        with a_store.lock(config, tool):  # the compile path: nothing pending any more
            assert a_store.lookup(config, tool) is None
        assert _manifests(bucket) == []
    else:
        # A compile on host A (it would build this key anyway) finishes its own interrupted upload:
        # what reaches the store is host A's bundle, never the removed one.
        with a_store.lock(config, tool):
            resumed = a_store.lookup(config, tool)
        assert resumed is not None
        assert (resumed / "logs").exists() and not (resumed / "logs" / "host.txt").exists()
        assert [m for m in _manifests(bucket)]


def test_require_hit_never_writes_after_a_killed_publish(
    slow_s3: tuple[str, ThrottlingProxy], s3_server: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compile --require-hit` on the host with a pending mark: exit 6, nothing uploaded."""
    from _pipeline import write_profile, write_tiny_llama
    from plugins import pipeline_backend

    from neuronc.pipeline import compile_profiles

    bucket, proxy = slow_s3
    url = f"s3://{bucket}/ci"
    host = tmp_path / "host"
    _kill_a_publish(url, host, proxy)
    _direct(s3_server, monkeypatch)
    pending = list((host / ".pending").iterdir())
    assert pending
    pipeline_backend.register()
    try:
        write_tiny_llama(tmp_path / "model")
        profile = write_profile(tmp_path / "p.yaml")
        monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(host.parent / "other-host"))
        [report] = compile_profiles([profile], store=RemoteStore(url, cache_dir=host), require_hit=True)
    finally:
        pipeline_backend.unregister()
    assert report.exit_code == 6
    assert _manifests(bucket) == []
    assert list((host / ".pending").iterdir()) == pending
