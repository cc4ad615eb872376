"""Building the graphs the graph cache lacks: one worker process for all of them.

``build_all`` hands every graph to one process (``python -m neuronc.backends.inductor.worker
REQUESTS.json PARALLEL``), which imports torch once and compiles up to ``PARALLEL`` graphs at a time
in forked children; it takes each graph as soon as it is written (published into the graph cache,
reported done), and turns a failed graph into a CompileError with its log. Used by
``InductorBackend.compile``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.backends.base import ROLE_CONTEXT, CompileJob, GraphSpec
from neuronc.backends.inductor import cache
from neuronc.backends.inductor.format import TRUST_CPU_FLAGS_ENV
from neuronc.backends.worker import Workers, worker_command, worker_env
from neuronc.errors import CompileError, log_tail

_LOG_TAIL_LINES = 40
_WORKER_MODULE = "neuronc.backends.inductor.worker"


@dataclass
class Pending:
    """One graph to build: its key and the directory it is built in (``log_path`` inside it)."""

    graph: GraphSpec
    key: str
    out_dir: Path
    log_path: Path


def _worker_env(job: CompileJob, cache_root: Path | None) -> dict[str, str]:
    inductor_cache = cache_root / "torchinductor" if cache_root is not None else job.work_dir / "torchinductor"
    # Not setdefault: torch writes its default into os.environ once Inductor runs in this process.
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), **job.env}
    # One graph at a time per process and several processes in parallel: keep each single-threaded.
    fixed = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # Inductor's CPU-ISA probe compiles a test program against ATen's vector headers per ISA (seconds
    # each, in every process): trust the CPU's flags instead, which the graph cache key already
    # records (toolchain.cpu_isa). The ISA picked, and so the code, is the same (format.py).
    trusted = {k: v for k, v in TRUST_CPU_FLAGS_ENV.items() if k not in env}
    return worker_env(env, {**fixed, **trusted, "HF_HUB_OFFLINE": "1"})


def _start_order(pending: Sequence[Pending]) -> list[Pending]:
    """The graphs in the order to start them: the costliest first, so the last to start are short.

    A context graph costs about its bucket (its kernels loop over the prompt), a token graph a few
    positions' worth; an estimate, only used to order the work.
    """

    def cost(item: Pending) -> int:
        return item.graph.bucket if item.graph.role == ROLE_CONTEXT else max(1, item.graph.bucket // 4)

    return sorted(pending, key=cost, reverse=True)


def build_all(
    job: CompileJob,
    pending: Sequence[Pending],
    inductor_config: Mapping[str, Any],
    max_length: int,
    cache_root: Path | None,
) -> dict[GraphSpec, tuple[dict[str, Any], float, Path]]:
    """Export + compile the graphs the cache lacks in one worker process, which runs up to
    ``job.jobs`` of them at once (within the pool's slots and memory), taking each graph as it
    completes: published into the graph cache and reported done while the others go on."""
    env = _worker_env(job, cache_root)
    ordered = _start_order(pending)
    workers = Workers(job.pool, job.host_compile_per_graph_bytes, own_group=True)
    parallel = workers.slots_for(min(job.jobs, len(ordered)))
    requests = []
    for item in ordered:
        item.out_dir.mkdir(parents=True, exist_ok=True)
        graph = item.graph
        header = f"# neuronc inductor: graph {graph.name}, cache key {item.key}\n"
        header += f"# TORCHINDUCTOR_CACHE_DIR={env.get('TORCHINDUCTOR_CACHE_DIR')}\n"
        item.log_path.write_text(header, encoding="utf-8")
        requests.append(
            {
                "model_dir": str(job.checkpoint_dir.resolve()),
                "role": graph.role,
                "batch": graph.batch,
                "bucket": graph.bucket,
                "max_length": max_length,
                "dtype": job.spec.dtype,
                "out_dir": str(item.out_dir.resolve()),
                "name": graph.name,
                "inductor_config": dict(inductor_config),
                "log": str(item.log_path.resolve()),
            }
        )
    job.work_dir.mkdir(parents=True, exist_ok=True)
    request_path = job.work_dir / "graphs.json"
    request_path.write_text(json.dumps(requests, indent=2), encoding="utf-8")
    tasks = {item.graph: job.progress.task(f"graph {item.graph.name}") for item in ordered}
    done: dict[GraphSpec, tuple[dict[str, Any], float, Path]] = {}

    def take_finished() -> None:
        for item in ordered:
            if item.graph not in done and (item.out_dir / f"{item.graph.name}.json").is_file():
                meta, seconds = _finish(job, item)
                entry = cache.publish(item.out_dir, cache_root, item.graph.name, item.key)
                done[item.graph] = (meta, seconds, entry)
                tasks[item.graph].done(f"{seconds:.1f} s")

    command = worker_command(_WORKER_MODULE, [str(request_path), str(parallel)])
    # The process's own output, before its first graph's log is opened (an import failure).
    process_log = job.work_dir / "graphs.log"
    with process_log.open("wb") as log:
        ended = workers.run(
            command, env=env, cwd=job.work_dir, log=log, poll=take_finished, poll_seconds=0.2, slots=parallel
        )
    take_finished()
    request_path.unlink(missing_ok=True)
    missing = [item for item in ordered if item.graph not in done]
    if not missing:
        return done
    marked = [item for item in missing if (item.out_dir / f"{item.graph.name}.failed").is_file()]
    failed = marked[0] if marked else missing[0]
    for item in missing:
        tasks[item.graph].done("failed" if item is failed else "not compiled")
    bundle_log = job.logs_dir / f"{failed.graph.name}.log"
    with bundle_log.open("wb") as out:
        for source in (process_log, failed.log_path):
            if source.is_file():
                out.write(source.read_bytes())
        out.write(f"# exit status {ended.returncode} after {ended.seconds:.2f} s\n".encode())
    tail = log_tail(bundle_log, _LOG_TAIL_LINES)
    for item in missing:
        shutil.rmtree(item.out_dir, ignore_errors=True)
    msg = f"graph {failed.graph.name}: export/AOTInductor compile failed (exit status {ended.returncode})"
    raise CompileError(msg, details=tail, log_path=str(bundle_log), hint=f"full compiler output: {bundle_log}")


def _finish(job: CompileJob, item: Pending) -> tuple[dict[str, Any], float]:
    """Record a graph the worker completed: its key, time and package digest; its log into the bundle."""
    name = item.graph.name
    meta_path = item.out_dir / f"{name}.json"
    meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
    seconds = float(meta.get("worker_seconds", 0.0))
    meta["cache_key"] = item.key
    meta["built_seconds"] = round(seconds, 3)
    meta["package_sha256"] = cache.sha256_file(item.out_dir / f"{name}.pt2")
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with item.log_path.open("a", encoding="utf-8") as log:
        log.write(f"# built in {seconds:.2f} s\n")
    shutil.copyfile(item.log_path, job.logs_dir / f"{name}.log")
    return meta, seconds
