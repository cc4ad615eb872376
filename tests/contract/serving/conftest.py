"""Contract tests of the deploy targets against the serving stacks' own code (tests/contract/run_serving_contract.sh).

They run only where that script sets ``NEURONC_SERVING_CONTRACT=1`` (its own virtual environments
hold the stacks, whose pins clash with ours); elsewhere they are skipped. The bundles are the
shipped Neuron profiles compiled through the SDK doubles (tests/_serving.py), and one vllm-neuron
bundle per vLLM line (SDK 2.31.0, 2.32.0, 2.33.0: vLLM 0.21.0, 0.24.0, 0.29.0) compiled in the
release's "DLC image" by the stand-in container runtime (tests/sdk_doubles/container_runtime.py),
once per run directory (``NEURONC_SERVING_BUNDLES``) and reused by the script's later pytest runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _serving import compile_shipped
from _vllm_neuron_bundles import compile_vllm_neuron

ENABLED = os.environ.get("NEURONC_SERVING_CONTRACT") == "1"


# The skips the contract expects: optimum-neuron 0.4.x serves only through vLLM 0.11.0, and the
# vllm-neuron engine flags are checked only with the vLLMs a vllm-neuron image pins (0.21.0, 0.24.0, 0.29.0).
EXPECTED_SKIPS = ("optimum-neuron 0.4.x pins vLLM 0.11.0", "no vllm-neuron image pins vLLM")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under the contract script a skip is a failure: a stack that did not import checks nothing."""
    if not ENABLED:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    unexpected = [r for r in skipped if not any(reason in str(r.longrepr) for reason in EXPECTED_SKIPS)]
    if unexpected:
        for report in unexpected:
            print(f"\nserving contract: unexpected skip: {report.nodeid}: {report.longrepr}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="serving contract: run tests/contract/run_serving_contract.sh")
    for item in items:
        if "contract/serving" in str(item.fspath):
            item.add_marker(skip)


def _compiled_once(
    tmp_path_factory: pytest.TempPathFactory, index_name: str, compile_all: Callable[[Path], dict[str, Path]]
) -> dict[str, Path]:
    """Name -> bundle, compiled once per NEURONC_SERVING_BUNDLES directory and read back by later passes."""
    root = os.environ.get("NEURONC_SERVING_BUNDLES")
    workdir = Path(root) if root else tmp_path_factory.mktemp("serving-bundles")
    index = workdir / index_name
    if index.is_file():
        return {name: Path(path) for name, path in json.loads(index.read_text()).items()}
    workdir.mkdir(parents=True, exist_ok=True)
    bundles = compile_all(workdir)
    index.write_text(json.dumps({name: str(path) for name, path in bundles.items()}))
    return bundles


@pytest.fixture(scope="session")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Shipped profile stem -> bundle."""
    return _compiled_once(tmp_path_factory, "bundles.json", compile_shipped)


@pytest.fixture(scope="session")
def vllm_neuron_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``vllm-neuron-<release>`` -> bundle (the compile runs in the stand-in container, whose Python path
    holds the doubles' vllm, not a real one)."""
    return _compiled_once(tmp_path_factory, "vllm-neuron-bundles.json", compile_vllm_neuron)
