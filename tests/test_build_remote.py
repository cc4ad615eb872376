"""`neuronc compile --store s3://...` against a real S3 server (SeaweedFS on localhost)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from click.testing import CliRunner
from plugins import pipeline_backend

from neuronc._output import out
from neuronc.bundle import verify_bundle
from neuronc.cli import app
from neuronc.pipeline import compile_profiles
from neuronc.store import RemoteStore

pytestmark = pytest.mark.s3


@pytest.fixture
def bucket(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto at the server the way a user would (environment), and make a fresh bucket."""
    return use_server_and_make_bucket(s3_server, monkeypatch)


@pytest.fixture(autouse=True)
def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    yield
    pipeline_backend.unregister()


def test_compile_publishes_to_s3_and_another_host_gets_a_hit(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: CliRunner
) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    url = f"s3://{bucket}/ci/bundles"
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(tmp_path / "host-a"))
    [built] = compile_profiles([profile], store=url)
    assert built.status == "built", built.error
    [entry] = RemoteStore(url, cache_dir=tmp_path / "probe").list()
    assert entry.manifest.config_hash == built.config_hash

    # Another host (an empty local cache): a hit, downloaded and verified, nothing compiled.
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(tmp_path / "host-b"))
    out.reset()
    result = runner.invoke(app, ["compile", str(profile), "--store", url, "--json", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    [hit] = json.loads(result.stdout)["builds"]
    assert hit["status"] == "hit" and hit["config_hash"] == built.config_hash
    assert hit["bundle"].startswith(str(tmp_path / "host-b"))
    assert verify_bundle(hit["bundle"]).ok and verify_bundle(tmp_path / "out").ok
    assert len((tmp_path / "compiles.log").read_text().splitlines()) == 1

    # A miss against the remote store names what differs from the nearest remote bundle.
    [other] = compile_profiles([write_profile(tmp_path / "q.yaml", context_buckets=[16, 48])], store=url)
    assert other.status == "built" and other.nearest is not None
    assert [d["field"] for d in other.nearest.differences] == ["sequence.context_buckets"]
    assert len(RemoteStore(url, cache_dir=tmp_path / "probe2").list()) == 2


def test_compile_into_a_missing_bucket_fails_before_compiling(bucket: str, tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    [report] = compile_profiles([profile], store=f"s3://{bucket}-absent/ci")
    assert (report.status, report.exit_code) == ("failed", 5)
    assert report.error is not None and "does not exist" in report.error.message
    assert not (tmp_path / "compiles.log").exists()  # nothing was compiled


def test_a_build_that_loses_the_publish_race_reports_it_and_uses_the_published_bundle(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    url = f"s3://{bucket}/ci"
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(tmp_path / "host-a"))
    [first] = compile_profiles([profile], store=url)
    assert first.status == "built", first.error
    # Host B looked the key up before host A's manifest landed: it misses, compiles, and then
    # finds the key published when it publishes.
    store_b = RemoteStore(url, cache_dir=tmp_path / "host-b")
    monkeypatch.setattr(store_b, "lookup", lambda *args, **kwargs: None)
    [second] = compile_profiles([profile], store=store_b)
    assert second.status == "hit", second.error
    assert any("first; using its bundle" in m for m in second.messages), second.messages
    published = RemoteStore(url, cache_dir=tmp_path / "probe").list()
    assert len(published) == 1 and published[0].manifest.config_hash == second.config_hash
    assert verify_bundle(second.bundle or "").ok
    assert len((tmp_path / "compiles.log").read_text().splitlines()) == 2
