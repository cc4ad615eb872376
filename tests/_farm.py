"""A local multi-node Ray cluster for the compile-farm tests, with Ray's own test utility.

``ray.cluster_utils.Cluster`` starts several raylets on this machine, each with its own CPUs, memory
and custom resources, and each with its own environment (``env_vars``): what a node "has" installed
(the test backends, as a third-party plugin's entry points), its own caches, the S3 endpoint. The
head has no CPUs, so no build runs there; drivers run as separate processes (the real CLI), as a CI
job does, and connect through ``RAY_ADDRESS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
TESTS_DIR = Path(__file__).resolve().parent
ENTRY_POINTS = """[neuronc.backends]
fake = plugins.fake_backend:FakeBackend
pipeline = plugins.pipeline_backend:PipelineBackend
missing = plugins.pipeline_backend:MissingBackend
pooled = plugins.pipeline_backend:PooledBackend
"""


def plugin_site(directory: Path) -> Path:
    """A directory that, on PYTHONPATH with tests/, installs the test backends as a plugin package
    would: a dist-info whose entry_points.txt names them in the ``neuronc.backends`` group."""
    info = directory / "neuronc_test_plugins-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: neuronc-test-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return directory


@dataclass
class Farm:
    cluster: Any
    root: Path
    # What every node and every driver has in its environment (the S3 endpoint, the plugins).
    env: dict[str, str]
    nodes: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    @property
    def compile_log(self) -> Path:
        return self.root / "compiles.log"

    def compiles(self) -> list[list[str]]:
        """One line per compile the pipeline test backend ran: pid, model, buckets, node."""
        if not self.compile_log.exists():
            return []
        return [line.rsplit(" ", 1) for line in self.compile_log.read_text().splitlines()]

    def add_node(
        self,
        name: str,
        *,
        cpus: int = 1,
        memory: int = 2 * GIB,
        env: Mapping[str, str] | None = None,
        **resources: float,
    ) -> Any:
        """A worker node; ``env`` is what this node alone has (another SDK version installed)."""
        node_env = {
            **self.env,
            "NEURONC_TEST_NODE": name,
            # Each node its own caches (a remote store's local copies, Hugging Face) ...
            "XDG_CACHE_HOME": str(self.root / "nodes" / name / "cache"),
            "HF_HOME": str(self.root / "nodes" / name / "hf"),
            # ... but one graph cache, as nodes that mount a shared cache volume have.
            "NEURONC_GRAPH_CACHE": str(self.root / "graphs"),
            "NEURONC_TEST_COMPILE_LOG": str(self.compile_log),
            **(env or {}),
        }
        node = self.cluster.add_node(
            num_cpus=cpus, memory=memory, resources=dict(resources), env_vars=node_env, object_store_memory=80 * 2**20
        )
        self.nodes[name] = node
        return node

    def remove_node(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def driver_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env, "RAY_ADDRESS": self.address, **(extra or {})}

    def neuronc(
        self, *args: str, timeout: float = 600, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``neuronc ARGS`` as a driver process connected to the cluster."""
        return subprocess.run(
            [sys.executable, "-m", "neuronc", *args],
            env=self.driver_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def spawn(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        """Start ``neuronc ARGS`` as a driver process; stdout (the JSON) to ``log``, stderr to ``log``.err."""
        with log.open("wb") as stdout, log.with_suffix(".err").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "neuronc", *args],
                env=self.driver_env(),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )


def start_farm(root: Path, env: Mapping[str, str]) -> Farm:
    """A head without CPUs (nothing is built there) and no worker node yet (``Farm.add_node``)."""
    from ray.cluster_utils import Cluster

    # Raylets and workers inherit this process's SIGINT disposition: where it is ignored (a background
    # job of a non-interactive shell, some CI runners) Ray's soft cancel would do nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    site = plugin_site(root / "site")
    pythonpath = os.pathsep.join(p for p in (str(TESTS_DIR), str(site), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**env, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "memory": GIB,
            "env_vars": full_env,
            "object_store_memory": 80 * 2**20,
            # Less to start and stop (the dashboard's port may be another cluster's on a shared machine).
            "include_dashboard": False,
            "no_monitor": True,
        },
    )
    return Farm(cluster, root, full_env)


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    msg = f"timed out after {timeout:.0f}s waiting for {what}"
    raise AssertionError(msg)
