"""The stages of one build after it is resolved, on a miss: pre-flight, resolve checkpoint, split,
model files, compile, publish. Each takes the ``ResolvedBuild`` and returns what it produced."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.backends.base import CompileJob, CompileResult
from neuronc.bundle import BuildRecord, BundleWriter, Graph, Shard, WeightsSource
from neuronc.errors import CompileError, NeuroncError, log_tail
from neuronc.fsutil import plural
from neuronc.pipeline.context import ResolvedBuild
from neuronc.pipeline.messages import say
from neuronc.pipeline.timing import StageClock
from neuronc.resources import PoolCancelled
from neuronc.store import BundleStore

if TYPE_CHECKING:
    from neuronc.pipeline.run import BuildOptions
    from neuronc.preflight import Estimate

_LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class Built:
    """A compiled and published bundle; ``lost_race``: another host published the key first, and
    ``bundle`` is its bundle."""

    bundle: Path
    graphs: list[Graph]
    lost_race: bool = False
    message: str | None = None


def preflight(ctx: ResolvedBuild, jobs: int) -> Estimate:
    """The memory estimate `neuronc plan` shows: a build that cannot fit fails (exit 2) before it compiles."""
    from neuronc.preflight import preflight as check

    estimate = check(ctx.spec, ctx.model_config, backend=ctx.backend, graphs=len(ctx.plan.graphs), jobs=jobs)
    for warning in estimate.warnings:
        say(f"warning: {warning}")
    return estimate


def compile_into_store(
    ctx: ResolvedBuild,
    store: BundleStore,
    options: BuildOptions,
    clock: StageClock,
    estimate: Estimate | None = None,
) -> Built:
    """Resolve the checkpoint, split, copy model files, compile and publish; never leave a half-written bundle.

    With ``options.pool`` (a matrix compiled in this process) the split holds one of the run's worker
    slots and the compile's worker processes each hold one, reserving the pre-flight's ``estimate``.
    """
    from neuronc.model.source import resolve_checkpoint

    spec = ctx.spec
    writer = store.writer(ctx.config.hash, ctx.toolchain_key)
    staging = Path(writer.path)
    try:
        with clock.stage("resolve", "resolve checkpoint"):
            model_dir, source = resolve_checkpoint(spec, ctx.model_dir, ctx.revision)
        _stop_if_cancelled(options)
        weights_dir: Path | None = None
        shards: list[Shard] = []
        # A backend that shards in its own format (the Neuron SDKs) never reads neuronc's rank
        # shards; writing them would only cost time and disk.
        if spec.weights == "presharded" and ctx.backend.toolchain.consumes_rank_shards:
            # The splitter draws its own byte-progress bar.
            with clock.stage("split", f"split weights (tp={spec.tp_degree})", quiet=True):
                weights_dir = staging / "weights"
                split_bytes = estimate.host_split_bytes if estimate is not None else None
                with options.pool.slot(split_bytes) if options.pool is not None else contextlib.nullcontext():
                    shards = split_weights(model_dir, weights_dir, ctx, writer, options)
        _stop_if_cancelled(options)
        with clock.stage("model_files", "copy config and tokenizer"):
            add_model_files(model_dir, writer)
            add_profile(ctx, writer)
        _stop_if_cancelled(options)
        job = CompileJob(
            spec=spec,
            plan=ctx.plan,
            checkpoint_dir=model_dir,
            artifacts_dir=staging / "artifacts",
            logs_dir=staging / "logs",
            work_dir=writer.scratch_dir,
            weights_dir=weights_dir,
            jobs=options.jobs,
            progress=options.progress,
            pool=options.pool,
            host_compile_bytes=estimate.host_compile_bytes if estimate is not None else None,
            host_compile_per_graph_bytes=estimate.host_compile_per_graph_bytes if estimate is not None else None,
        )
        job.artifacts_dir.mkdir(parents=True, exist_ok=True)
        job.logs_dir.mkdir(parents=True, exist_ok=True)
        graphs = plural(len(ctx.plan.graphs), "graph")
        with clock.stage("compile", f"compile {graphs} with {spec.backend}", children=True):
            result = _compile(ctx, job)
        records = _graph_records(result)
        _stop_if_cancelled(options)  # a cancelled build never publishes
        with clock.stage("publish", "write manifest and publish"):
            record = build_record(ctx, clock, graphs=records, shards=shards, source=source, extra=result.extra)
            bundle = writer.finish(record)
    except CompileError as exc:
        _keep_logs(exc, staging, ctx)
        raise
    finally:
        writer.abort()  # nothing once finished; the staging directory otherwise
    published = writer.published
    if published is not None and published.lost_race:
        return Built(bundle, records, lost_race=True, message=published.message)
    return Built(bundle, records)


def _stop_if_cancelled(options: BuildOptions) -> None:
    """A cancelled run (Ctrl-C here, a cancelled Ray task on a node) stops between stages too, not only
    where it waits for the worker pool: the caller's cleanup then removes the staging directory."""
    if options.pool is not None and options.pool.cancelled:
        raise PoolCancelled


def _compile(ctx: ResolvedBuild, job: CompileJob) -> CompileResult:
    try:
        return ctx.backend.compile(job)
    except NeuroncError:
        raise
    except Exception as exc:
        # A compiler crash is a compile failure of this build, not a bug in the pipeline.
        msg = f"{ctx.label}: {ctx.backend.name} compile failed: {type(exc).__name__}: {exc}"
        raise CompileError(msg) from exc


def _graph_records(result: CompileResult) -> list[Graph]:
    return [
        Graph(
            name=g.graph.name,
            role=g.graph.role,
            batch=g.graph.batch,
            bucket=g.graph.bucket,
            artifact=g.artifact,
            compile_seconds=round(g.compile_seconds, 3),
            cache_hit=g.cache_hit,
        )
        for g in result.graphs
    ]


def split_weights(
    model_dir: Path, weights_dir: Path, ctx: ResolvedBuild, writer: BundleWriter, options: BuildOptions
) -> list[Shard]:
    from neuronc.checkpoint import split_checkpoint

    spec = ctx.spec
    # hash=True: the manifest records each shard's SHA-256 and the bundle writer adopts it unread.
    result = split_checkpoint(
        model_dir, weights_dir, spec.tp_degree, dtype=spec.amp, progress=options.progress, hash=True
    )
    shards: list[Shard] = []
    recorded: set[str] = set()
    for shard in result.shards:
        rel = f"weights/{Path(shard.file).name}"
        entry = writer.adopt(rel, role="weights", sha256=shard.sha256, size=shard.bytes)
        recorded.add(rel)
        shards.append(Shard(rank=shard.rank, file=rel, bytes=entry.size, sha256=entry.sha256))
    # Anything else the splitter wrote (index.json) is hashed by the writer.
    for path in sorted(weights_dir.rglob("*")):
        rel = path.relative_to(weights_dir.parent).as_posix()
        if path.is_file() and rel not in recorded:
            writer.adopt(rel, role="weights")
    return shards


def add_model_files(model_dir: Path, writer: BundleWriter) -> None:
    from neuronc.model.files import model_files

    for path in model_files(model_dir):
        # Resolve hub-cache symlinks: the bundle carries real files.
        writer.add_file(f"model/{path.name}", role="model", source_path=path.resolve())


def build_record(
    ctx: ResolvedBuild,
    clock: StageClock,
    *,
    graphs: list[Graph],
    shards: list[Shard],
    source: Any,
    extra: dict[str, Any],
) -> BuildRecord:
    """What the writer records for a compiled or rebound build: its graphs, shards, weights source, the
    stages so far (publish is timed by the clock, not recorded in the manifest) and ``extra`` with the keys."""
    return BuildRecord.for_build(
        ctx.spec,
        ctx.config,
        ctx.versions,
        toolchain_label=ctx.toolchain_label,
        graphs=graphs,
        shards=shards,
        weights=WeightsSource.model_validate(source, strict=False),
        stages=[s.to_manifest() for s in clock.stages],
        extra={**extra, "keys": ctx.config.keys_record()},
    )


def add_profile(ctx: ResolvedBuild, writer: BundleWriter) -> None:
    profile = ctx.spec.profile_path
    if profile and Path(profile).is_file():
        writer.add_file("profile.yaml", role="profile", source_path=Path(profile))


# -- failures: keep the logs, show their tail ---------------------------------------------------


def failed_logs_root() -> Path:
    """Where logs of failed builds are kept after their staging directory is removed."""
    from neuronc.locations import user_cache_dir

    return user_cache_dir() / "failed-builds"


def _keep_logs(exc: CompileError, staging: Path, ctx: ResolvedBuild) -> None:
    """Move the staging logs somewhere that survives cleanup and add the log tail to the error."""
    logs = staging / "logs"
    kept: Path | None = None
    if logs.is_dir() and any(logs.iterdir()):
        kept = failed_logs_root() / f"{ctx.config.short}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(logs, kept, symlinks=True)  # a link a backend left is not followed
        except OSError:
            kept = None  # keeping logs is best effort: the compile error itself is what matters
    log_path = Path(exc.log_path) if exc.log_path else None
    if log_path is not None and kept is not None:
        with contextlib.suppress(ValueError):
            log_path = kept / log_path.resolve().relative_to(logs.resolve())
    elif log_path is None and kept is not None:
        candidates = sorted(kept.rglob("*.log"), key=lambda p: p.stat().st_mtime)
        log_path = candidates[-1] if candidates else None
    if log_path is not None and log_path.is_file():
        exc.log_path = str(log_path)
        tail = log_tail(log_path, _LOG_TAIL_LINES)
        if tail and not any(line in exc.details for line in tail[-3:]):
            exc.details.append(f"last lines of {log_path}:")
            exc.details.extend(f"  {line}" for line in tail)
    if kept is not None:
        # The backend named files in the staging directory, which is removed now: name the kept copies.
        exc.message = _moved(exc.message, logs, kept)
        exc.details = [_moved(line, logs, kept) for line in exc.details]
        exc.hint = _moved(exc.hint, logs, kept) if exc.hint else None
        where = f"compiler logs kept in {kept}"
        exc.hint = where if exc.hint is None else (exc.hint if str(kept) in exc.hint else f"{exc.hint}; {where}")


def _moved(text: str, logs: Path, kept: Path) -> str:
    """``text`` with paths under the staging ``logs`` directory turned into their kept copies."""
    for form in dict.fromkeys((str(logs), str(logs.resolve()))):
        text = text.replace(form, str(kept))
    return text
