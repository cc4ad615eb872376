"""Plugin backends for compile-pipeline tests, registered like third-party entry points.

``pipeline`` is the fake backend with behaviours chosen by the profile's ``options`` (so each is a
different build, as it would be for a real option):

- ``sleep: S`` — take S seconds per graph (concurrency and interrupt tests);
- ``fail: true`` — write a compiler log and raise CompileError pointing at it;
- ``crash: true`` — raise a plain RuntimeError, as a compiler crashing inside Python would;
- ``interrupt: true`` — raise KeyboardInterrupt halfway through, as Ctrl-C would;
- ``env_error: true`` — raise EnvironmentIncompatibleError (a runtime the compiler needs is missing).

Every compile appends one line to ``$NEURONC_TEST_COMPILE_LOG`` (when set), so tests can count
how often a backend really compiled (and, on a Ray test cluster, on which node: ``$NEURONC_TEST_NODE``). ``missing`` is a backend whose package is not installed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from neuronc.backends.base import GIB, BackendBase, CompiledGraph, CompileJob, CompileResult, GraphSpec, HostRamModel
from neuronc.backends.worker import Workers
from neuronc.errors import CompileError, EnvironmentIncompatibleError
from neuronc.resources import PoolCancelled
from plugins.fake_backend import FakeBackend
from plugins.registry import register_backend, unregister_backend

NAME = "pipeline"
MISSING = "missing"
OWN_SHARDS = "own-shards"
COMPILE_LOG_ENV = "NEURONC_TEST_COMPILE_LOG"
NODE_ENV = "NEURONC_TEST_NODE"
POOLED = "pooled"
WORKER_LOG_ENV = "NEURONC_TEST_WORKER_LOG"


class PipelineBackend(FakeBackend):
    name: ClassVar[str] = NAME
    description: ClassVar[str] = "test double for the compile pipeline"

    def compile(self, job: CompileJob) -> CompileResult:
        options = job.spec.options
        log_path = os.environ.get(COMPILE_LOG_ENV)
        if log_path:
            with open(log_path, "a", encoding="utf-8") as f:
                node = os.environ.get(NODE_ENV, "-")
                f.write(f"{os.getpid()} {job.spec.model.id} {job.spec.sequence.context_buckets} {node}\n")
        graphs = []
        for index, graph in enumerate(job.plan.graphs):
            task = job.progress.task(f"graph {graph.name}")
            start = time.perf_counter()
            _sleep(float(options.get("sleep", 0)), job)
            if options.get("interrupt") and index == len(job.plan.graphs) // 2:
                raise KeyboardInterrupt
            if options.get("env_error"):
                msg = "fake-cc needs a Neuron device driver that is not loaded"
                raise EnvironmentIncompatibleError(msg)
            log = job.logs_dir / f"{graph.name}.log"
            log.write_text("".join(f"compiler line {i} for {graph.name}\n" for i in range(50)))
            if options.get("fail"):
                log.write_text(log.read_text() + "ERROR: fake-cc: unsupported operator 'aten::frobnicate'\n")
                msg = f"fake-cc failed on graph {graph.name}"
                # As the real backends do: the hint names the log in the bundle's staging directory.
                raise CompileError(msg, log_path=str(log), hint=f"full compiler output: {log}")
            if options.get("crash"):
                msg = "segfault-ish failure inside the compiler"
                raise RuntimeError(msg)
            path = job.artifacts_dir / f"{graph.name}.neff"
            path.write_bytes(f"{graph.name}:{job.spec.model.id}".encode() * 64)
            graphs.append(CompiledGraph(graph, f"artifacts/{path.name}", time.perf_counter() - start))
            task.done()
        leave = options.get("leave")  # a backend that leaves a link or a FIFO behind in the bundle's staging
        if leave == "symlink":
            (job.artifacts_dir / "leftover").symlink_to("/etc/hostname")
        elif leave == "fifo":
            os.mkfifo(job.logs_dir / "leftover")
        return CompileResult(graphs, extra={"compiled_by": NAME})


def _sleep(seconds: float, job: CompileJob) -> None:
    """Sleep as a compiler works: stopping when the run's worker pool is cancelled, as ``Workers`` do."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.pool is not None and job.pool.cancelled:
            raise PoolCancelled
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


class PooledBackend(PipelineBackend):
    """Compiles each graph in a real worker process through ``neuronc.backends.worker.Workers`` (the
    runner the real backends use), ``job.jobs`` at a time, holding the run's pool slots as they do.

    ``options.sleep`` is each worker's run time; every worker appends ``<profile> <graph> <start> <end>``
    (monotonic seconds) to ``$NEURONC_TEST_WORKER_LOG`` as it ends, and its graph's name to that file's
    ``.started`` sibling as it starts. Its host-RAM model: 1 GiB per graph process.
    """

    name: ClassVar[str] = POOLED
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(0, 0.0, GIB, False, "test: 1 GiB per graph process")

    def compile(self, job: CompileJob) -> CompileResult:
        import concurrent.futures
        import sys

        workers = Workers(job.pool, job.host_compile_per_graph_bytes)
        seconds = float(job.spec.options.get("sleep", 0.5))
        log = os.environ.get(WORKER_LOG_ENV, os.devnull)
        tag = Path(job.spec.profile_path or "-").name

        def one(graph: GraphSpec) -> CompiledGraph:
            code = (
                "import sys, time; s = time.monotonic(); open(sys.argv[2] + '.started', 'a').write(sys.argv[4] + '\\n'); "
                "time.sleep(float(sys.argv[1])); "
                "open(sys.argv[2], 'a').write(f'{sys.argv[3]} {sys.argv[4]} {s} {time.monotonic()}\\n')"
            )
            with (job.logs_dir / f"{graph.name}.log").open("wb") as out:
                ended = workers.run(
                    [sys.executable, "-c", code, str(seconds), log, tag, graph.name],
                    env=dict(os.environ),
                    cwd=job.work_dir,
                    log=out,
                )
            path = job.artifacts_dir / f"{graph.name}.neff"
            path.write_bytes(graph.name.encode() * 64)
            return CompiledGraph(graph, f"artifacts/{path.name}", ended.seconds)

        job.work_dir.mkdir(parents=True, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, job.jobs)) as pool:
            graphs = list(pool.map(one, job.plan.graphs))
        return CompileResult(graphs, extra={"compiled_by": POOLED})


class OwnShardsBackend(PipelineBackend):
    """Shards weights in its own format (as the Neuron SDKs do): neuronc's rank shards are not needed."""

    name: ClassVar[str] = OWN_SHARDS
    consumes_rank_shards: ClassVar[bool] = False


class MissingBackend(BackendBase):
    name: ClassVar[str] = MISSING
    description: ClassVar[str] = "a backend whose SDK is not installed"
    targets: ClassVar[frozenset[str]] = frozenset({"cpu", "inf2"})
    requires_tp_divides_heads: ClassVar[bool] = False
    packages: ClassVar[tuple[str, ...]] = ("neuronc-test-sdk-that-does-not-exist",)
    required: ClassVar[tuple[str, ...]] = ("neuronc-test-sdk-that-does-not-exist",)
    install_hint: ClassVar[str | None] = "pip install neuronc-test-sdk-that-does-not-exist"


def register() -> None:
    register_backend("fake", "plugins.fake_backend:FakeBackend")
    register_backend(NAME, "plugins.pipeline_backend:PipelineBackend")
    register_backend(MISSING, "plugins.pipeline_backend:MissingBackend")
    register_backend(OWN_SHARDS, "plugins.pipeline_backend:OwnShardsBackend")
    register_backend(POOLED, "plugins.pipeline_backend:PooledBackend")


def unregister() -> None:
    for name in ("fake", NAME, MISSING, OWN_SHARDS, POOLED):
        unregister_backend(name)
