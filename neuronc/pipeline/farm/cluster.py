"""A Ray cluster as the farm sees it: how to connect, its nodes, what each build needs, where it fits,
and whether every node sees the store.

Ray is imported inside the functions here: only ``--executor ray`` loads it (``pip install 'neuronc[ray]'``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neuronc.errors import MISSING_LIBRARY, EnvironmentIncompatibleError, InvalidInputError, NeuroncError
from neuronc.fsutil import format_bytes, plural

if TYPE_CHECKING:
    from neuronc.pipeline.context import ResolvedBuild
    from neuronc.store import BundleStore

ADDRESS_ENV = "RAY_ADDRESS"
INSTALL_HINT = "pip install 'neuronc[ray]' (the driver and every node need Ray; the nodes also neuronc and the SDK)"
# Ray's own resources; anything else in a node's resources is a custom resource a build may ask for.
_BUILTIN_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}
# Seconds the store probe may take on each node (a runtime_env that installs packages is set up first).
PROBE_TIMEOUT_SECONDS = 600.0
# Seconds a TCP connection to the cluster's address may take before it counts as unreachable.
PROBE_CONNECT_SECONDS = 10.0


@dataclass(frozen=True)
class RaySettings:
    """``--executor ray``: where the cluster is and what every build asks of it."""

    # The cluster's address (``--ray-address``); None: $RAY_ADDRESS.
    address: str | None = None
    # Custom resources every build asks for (``--ray-resources``: an SDK-release label, ``neuron_cores``).
    resources: Mapping[str, float] = field(default_factory=dict)
    # A runtime_env for the workers (``--ray-runtime-env``): how they get neuronc and the backend's SDK.
    runtime_env: Mapping[str, Any] | None = None
    # CPUs (parallel graph workers) per build; None: the build's graphs, at most the largest node's CPUs.
    cpus: int | None = None
    # A directory store every node mounts at the same path (``--ray-shared-store``).
    shared_store: bool = False
    # Attempts after a node or worker dies mid-build, each on whichever node Ray places it.
    max_retries: int = 2
    # After Ctrl-C: how long running builds get to clean up before their workers are killed.
    cancel_grace_seconds: float = 30.0
    # How long connecting to the cluster may take (``--ray-connect-timeout``): Ray itself never gives up.
    connect_timeout_seconds: float = 60.0

    def resolved_address(self) -> str:
        address = self.address or os.environ.get(ADDRESS_ENV, "")
        if not address:
            msg = "--executor ray needs a cluster: give --ray-address or set RAY_ADDRESS"
            raise InvalidInputError(msg, hint="e.g. --ray-address ray://head:10001, or auto on a node of the cluster")
        return address


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster and what Ray says it has."""

    node_id: str
    address: str
    cpus: float
    memory_bytes: int
    resources: Mapping[str, float]

    @property
    def name(self) -> str:
        return f"{self.address} ({self.node_id[:8]})"

    def capacity(self) -> str:
        extra = "".join(f", {k}={v:g}" for k, v in sorted(self.resources.items()) if not k.startswith("node:"))
        return f"{format_bytes(self.memory_bytes, unit='GiB')}, {plural(int(self.cpus), 'CPU')}{extra}"

    def fits(self, need: Need) -> bool:
        if self.cpus < need.cpus or (need.memory_bytes or 0) > self.memory_bytes:
            return False
        return all(self.resources.get(k, 0.0) >= v for k, v in need.resources.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
            "resources": dict(self.resources),
        }


@dataclass(frozen=True)
class Need:
    """What one build asks Ray for: the pre-flight's host RAM, CPUs for its workers, custom resources."""

    label: str
    memory_bytes: int | None
    cpus: int
    resources: Mapping[str, float]
    # Why the memory is unknown (the model's config.json is not on the driver, an unknown family).
    unknown: str | None = None

    def describe(self) -> str:
        memory = format_bytes(self.memory_bytes, unit="GiB") if self.memory_bytes is not None else "memory unknown"
        extra = "".join(f", {k}={v:g}" for k, v in sorted(self.resources.items()))
        return f"{memory}, {plural(self.cpus, 'CPU')}{extra}"

    def ray_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.cpus, "resources": dict(self.resources)}
        if self.memory_bytes:
            options["memory"] = self.memory_bytes
        return options

    def to_json(self) -> dict[str, Any]:
        return {
            "memory_bytes": self.memory_bytes,
            "cpus": self.cpus,
            "resources": dict(self.resources),
            "unknown_reason": self.unknown,
        }


def import_ray() -> Any:
    """The ``ray`` module, or exit 5 with the install hint."""
    try:
        import ray
    except ImportError as exc:
        raise MISSING_LIBRARY.convert(
            exc, "--executor ray needs Ray, which is not installed here", hint=INSTALL_HINT
        ) from exc
    return ray


def connect(settings: RaySettings) -> bool:
    """Connect this process to the cluster (unless it already is); True when this call connected.

    Bounded: Ray retries an unreachable GCS for ever in C++ code that neither Ctrl-C nor SIGTERM
    interrupts. So the address is probed first (resolved, and a TCP connection to its port: exit 5
    at once naming it when nothing answers), and ``ray.init`` runs in a helper thread while this
    one waits, interruptibly, at most ``connect_timeout_seconds`` (exit 5). Ctrl-C or SIGTERM while
    waiting ends the run (exit 130); the helper thread is a daemon and does not hold the exit.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = settings.resolved_address()
    result: dict[str, BaseException | None] = {}
    done = threading.Event()

    def attempt() -> None:
        try:
            endpoint = _endpoint(address)
            if endpoint is not None:
                _probe(address, *endpoint, timeout=min(PROBE_CONNECT_SECONDS, settings.connect_timeout_seconds))
            with _quiet_thread_warning():
                ray.init(
                    address=address,
                    runtime_env=dict(settings.runtime_env) if settings.runtime_env is not None else None,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    configure_logging=True,
                )
            result["error"] = None
        except BaseException as exc:  # handed to the waiting thread, which raises it or a neuronc error
            result["error"] = exc
        finally:
            done.set()

    threading.Thread(target=attempt, name="neuronc-ray-connect", daemon=True).start()
    deadline = time.monotonic() + settings.connect_timeout_seconds
    while not done.wait(0.2):  # an Event wait: Ctrl-C and SIGTERM (KeyboardInterrupt) get through
        if time.monotonic() >= deadline:
            msg = f"cannot connect to the Ray cluster at {address}: no answer in {settings.connect_timeout_seconds:g} s"
            hint = "check --ray-address / RAY_ADDRESS and that the head runs (or raise --ray-connect-timeout)"
            raise EnvironmentIncompatibleError(msg, hint=hint)
    error = result.get("error")
    if isinstance(error, NeuroncError | KeyboardInterrupt):
        raise error
    if isinstance(error, ConnectionError | RuntimeError | ValueError):
        msg = f"cannot connect to the Ray cluster at {address}: {error}"
        hint = "check --ray-address / RAY_ADDRESS and that the head runs"
        raise EnvironmentIncompatibleError(msg, hint=hint) from error
    if error is not None:
        raise error
    return True


def _endpoint(address: str) -> tuple[str, int] | None:
    """The host and port of ``ray://host:port`` or ``host:port`` (GCS); None for ``auto``/``local``,
    which Ray resolves itself. An address without a port gets Ray's defaults (10001 for Ray Client,
    6379 for the GCS); an address that is not host:port is exit 2."""
    from urllib.parse import urlsplit

    text = address.strip()
    if text in {"auto", "local"}:
        return None
    scheme, _, rest = text.rpartition("://")
    try:
        parts = urlsplit(f"//{rest}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or parts.path or parts.query or parts.fragment or parts.username is not None:
        msg = f"--ray-address {address}: not an address of a Ray cluster"
        raise InvalidInputError(msg, hint="give host:port (the GCS), ray://host:10001 (Ray Client), or auto")
    return host, port or (10001 if scheme else 6379)


def _probe(address: str, host: str, port: int, *, timeout: float) -> None:
    """Exit 5 naming ``address`` when ``host`` does not resolve or nothing accepts a connection on ``port``."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror as exc:
        msg = f"cannot connect to the Ray cluster at {address}: cannot resolve {host} ({exc.strerror})"
        raise EnvironmentIncompatibleError(msg, hint="check --ray-address / RAY_ADDRESS") from None
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        msg = f"cannot connect to the Ray cluster at {address}: nothing answers on {host}:{port} ({why})"
        hint = "check --ray-address / RAY_ADDRESS and that the head runs (`ray status` on the head)"
        raise EnvironmentIncompatibleError(msg, hint=hint) from None


@contextlib.contextmanager
def _quiet_thread_warning() -> Iterator[None]:
    """Drop Ray's warning that ``ray.init`` outside the main thread sets no SIGTERM handler: neuronc
    keeps its own handler on purpose (SIGTERM ends the run as Ctrl-C does)."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")

    # The logger of ray/_private/worker.py, by name (logging's public API; nothing of Ray's imported).
    logger = logging.getLogger("ray._private.worker")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def cluster_nodes() -> list[Node]:
    """The alive nodes of the connected cluster."""
    ray = import_ray()
    found = []
    for raw in ray.nodes():
        if not raw.get("Alive"):
            continue
        resources = {str(k): float(v) for k, v in (raw.get("Resources") or {}).items()}
        found.append(
            Node(
                node_id=str(raw["NodeID"]),
                address=str(raw.get("NodeManagerAddress") or raw.get("NodeName") or "?"),
                cpus=resources.get("CPU", 0.0),
                memory_bytes=int(resources.get("memory", 0.0)),
                resources={k: v for k, v in resources.items() if k not in _BUILTIN_RESOURCES},
            )
        )
    return found


def build_need(ctx: ResolvedBuild, settings: RaySettings, nodes: Sequence[Node]) -> Need:
    """What ``ctx`` asks of the cluster: the pre-flight's host RAM for the CPUs it is given."""
    from neuronc.preflight import estimate

    graphs = len(ctx.plan.graphs)
    largest = max((int(n.cpus) for n in nodes), default=1)
    cpus = settings.cpus or max(1, min(graphs, largest))
    est = estimate(ctx.spec, ctx.model_config, backend=ctx.backend, graphs=graphs, jobs=cpus)
    sizes = [v for v in (est.host_compile_bytes, est.host_split_bytes) if v is not None]
    memory = max(sizes) if est.host_compile_bytes is not None and sizes else None
    unknown = None if memory is not None else (est.unknown_reason or "the backend has no host-RAM model")
    return Need(ctx.label, memory, cpus, dict(settings.resources), unknown)


def fitting(need: Need, nodes: Sequence[Node]) -> list[Node]:
    return [n for n in nodes if n.fits(need)]


def refuse_unplaceable(needs: Sequence[Need], nodes: Sequence[Node]) -> None:
    """Exit 5 before anything is submitted when a build fits no node: name it, its need, the largest node."""
    unplaceable = [need for need in needs if not fitting(need, nodes)]
    if not unplaceable:
        return
    workers = [n for n in nodes if n.cpus > 0]  # a head started with no CPUs runs no task
    if not workers:
        raise EnvironmentIncompatibleError("the Ray cluster has no alive node with CPUs", hint="start its nodes")
    largest = max(workers, key=lambda n: (n.memory_bytes, n.cpus))
    details = [f"{need.label}: needs {need.describe()}" for need in unplaceable]
    details.append(f"largest node: {largest.name} with {largest.capacity()}")
    count = plural(len(workers), "node")
    msg = f"{plural(len(unplaceable), 'build')} fit no node of the Ray cluster ({count} with CPUs)"
    hint = "add a larger node, lower --jobs (CPUs and memory per build), or drop --ray-resources the nodes lack"
    raise EnvironmentIncompatibleError(msg, details=details, hint=hint)


def _probe_marker(location: str, name: str) -> tuple[str, bytes | None, str | None]:
    """On a node: the node's id and what it reads of the marker ``name`` in the store at ``location``."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    try:
        from neuronc.store import open_store

        return node, open_store(location).read_marker(name), None
    except Exception as exc:  # any failure means this node cannot use the store: report it, do not raise
        return node, None, f"{type(exc).__name__}: {exc}"


def check_store_shared(store: BundleStore, nodes: Sequence[Node], *, shared: bool) -> None:
    """Refuse a store some node cannot see: a node-local directory (not declared shared), or one a
    probe task on a node cannot read (the driver writes the probe, a task pinned to each node reads it)."""
    from neuronc.store import LocalStore

    if isinstance(store, LocalStore) and not shared:
        msg = f"the store {store.location} is a directory on this machine: the nodes of a Ray cluster do not see it"
        hint = "use an s3:// or hf:// store (--store), or --ray-shared-store if every node mounts it at this path"
        raise InvalidInputError(msg, hint=hint)
    if not nodes:
        return
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = secrets.token_hex(12)
    name = f"farm-probe-{token[:16]}"
    store.write_marker(name, token.encode())
    try:
        probe = ray.remote(_probe_marker)
        refs = [
            probe.options(
                num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            ).remote(store.location, name)
            for node in nodes
        ]
        problems = []
        for node, ref in zip(nodes, refs, strict=True):
            try:
                _, seen, why = ray.get(ref, timeout=PROBE_TIMEOUT_SECONDS)
            except ray.exceptions.TaskUnschedulableError:
                continue  # the node went away since it was listed (Ray marks a lost node dead a while later)
            except Exception as exc:  # the task could not run there (no neuronc, a runtime_env that fails)
                seen, why = None, f"the probe task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            if seen != token.encode():
                problems.append(f"{node.name}: {why or 'does not see the probe the driver wrote'}")
    finally:
        store.remove_marker(name)
    if problems:
        msg = f"the store {store.location} is not one every node of the Ray cluster sees"
        hint = "every node needs the store (credentials, endpoint, mount) and neuronc (--ray-runtime-env or its image)"
        raise EnvironmentIncompatibleError(msg, details=problems, hint=hint)


__all__ = [
    "ADDRESS_ENV",
    "INSTALL_HINT",
    "Need",
    "Node",
    "RaySettings",
    "build_need",
    "check_store_shared",
    "cluster_nodes",
    "connect",
    "fitting",
    "import_ray",
    "refuse_unplaceable",
]
