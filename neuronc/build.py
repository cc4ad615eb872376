"""The compile pipeline: profile → BuildSpec → plan → store lookup → checkpoint → split → compile → bundle.

``compile_profiles`` runs every build of every profile given and returns one ``BuildReport`` per
build; ``build_one`` runs a single ``BuildSpec``. Library code here returns or raises: progress goes
to the ``ProgressSink`` passed in, and a build's failure is recorded in its report (with the exit
code the CLI will return) rather than stopping the other builds — except an environment error,
which would fail every remaining build the same way.

A store hit is the fast path: plan, key and lookup import neither torch nor transformers, so
``neuronc compile`` on a built profile returns in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import (
    EXIT_COMPILE_FAILED,
    EXIT_ENVIRONMENT,
    EXIT_INTERRUPTED,
    EXIT_INVALID_INPUT,
    EXIT_MISS,
    EXIT_OK,
    EXIT_UNEXPECTED,
    EXIT_VERIFICATION_FAILED,
    BackendUnavailableError,
    CacheMissError,
    CompileError,
    InvalidInputError,
    NeuroncError,
    log_tail,
)
from neuronc.model.files import MODEL_FILES
from neuronc.model.source import resolve_checkpoint, resolve_revision
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.backends.base import Availability, Backend, CompilePlan, CompileResult
    from neuronc.keys import ConfigKey
    from neuronc.remote_store import RemoteStore
    from neuronc.spec import BuildSpec
    from neuronc.store import Store

    # A local directory store or a remote one (s3://, hf://): the pipeline uses what both provide.
    AnyStore = Store | RemoteStore

STATUS_BUILT = "built"
STATUS_HIT = "hit"
STATUS_FAILED = "failed"
STATUS_SKIPPED = "skipped"

REPORT_SCHEMA_VERSION = 1

# Most severe first: the exit code of a run with several builds is the first of these that occurs.
# An interruption or an environment problem stops the run; a bug (1) outranks an ordinary failure.
_SEVERITY = (
    EXIT_INTERRUPTED,
    EXIT_ENVIRONMENT,
    EXIT_UNEXPECTED,
    EXIT_COMPILE_FAILED,
    EXIT_VERIFICATION_FAILED,
    EXIT_INVALID_INPUT,
    EXIT_MISS,
    EXIT_OK,
)

_MODEL_FILE_PATTERNS = ("tokenizer*", "*.tiktoken")
_LOG_TAIL_LINES = 20


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------


@dataclass
class StageReport:
    """Wall time and peak memory of one pipeline stage."""

    name: str
    seconds: float
    # Peak resident set of this process during the stage (None where the OS does not tell).
    peak_rss_bytes: int | None = None
    # Largest peak of a child process (parallel graph compiles) that ended during the stage.
    children_peak_rss_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wall_seconds": round(self.seconds, 4),
            "peak_rss_bytes": self.peak_rss_bytes,
            "children_peak_rss_bytes": self.children_peak_rss_bytes,
        }

    def to_manifest(self) -> dict[str, Any]:
        """The manifest's stage record: peak RSS of this process or any child, whichever is larger."""
        peaks = [v for v in (self.peak_rss_bytes, self.children_peak_rss_bytes) if v is not None]
        return {
            "name": self.name,
            "wall_seconds": round(self.seconds, 4),
            "peak_rss_bytes": max(peaks) if peaks else None,
        }


@dataclass
class BuildReport:
    """What happened to one build: its keys, hit/built/failed, where the bundle is, and what it cost."""

    profile: str
    build_index: int
    status: str
    model: str = ""
    backend: str = ""
    target: str = ""
    name: str | None = None
    matrix: dict[str, Any] = field(default_factory=dict)
    config_hash: str | None = None
    toolchain_key: str | None = None
    toolchain_label: str | None = None
    bundle: str | None = None
    out: str | None = None
    graphs: list[dict[str, Any]] = field(default_factory=list)
    stages: list[StageReport] = field(default_factory=list)
    wall_seconds: float = 0.0
    exit_code: int = EXIT_OK
    error: dict[str, Any] | None = None
    # On a miss: the closest bundle of the same model and backend in the store, and what differs.
    nearest: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in (STATUS_BUILT, STATUS_HIT)

    @property
    def peak_rss_bytes(self) -> int | None:
        """The largest peak resident set of any stage, this process or its children."""
        values = [v for s in self.stages for v in (s.peak_rss_bytes, s.children_peak_rss_bytes) if v is not None]
        return max(values) if values else None

    @property
    def label(self) -> str:
        """``profile.yaml`` or ``profile.yaml#2`` for matrix builds."""
        return f"{self.profile}#{self.build_index}" if self.matrix else self.profile

    def stage_seconds(self) -> dict[str, float]:
        return {s.name: round(s.seconds, 4) for s in self.stages}

    def to_json(self) -> dict[str, Any]:
        """The stable record printed by ``--json`` and written by ``--report`` (docs/compile.md)."""
        return {
            "profile": self.profile,
            "build_index": self.build_index,
            "name": self.name,
            "matrix": self.matrix,
            "model": self.model,
            "backend": self.backend,
            "target": self.target,
            "status": self.status,
            "exit_code": self.exit_code,
            "config_hash": self.config_hash,
            "toolchain_key": self.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "bundle": self.bundle,
            "out": self.out,
            "graphs": self.graphs,
            "stages": [s.to_json() for s in self.stages],
            "stage_seconds": self.stage_seconds(),
            "peak_rss_bytes": self.peak_rss_bytes,
            "wall_seconds": round(self.wall_seconds, 4),
            "nearest": self.nearest,
            "error": self.error,
            "messages": self.messages,
        }

    def raise_for_status(self) -> None:
        """Raise the recorded error again (for Python callers who prefer exceptions)."""
        if self.ok or self.status == STATUS_SKIPPED:
            return
        error = self.error or {}
        message = str(error.get("message") or f"build {self.label} failed")
        cls = _ERROR_BY_EXIT.get(self.exit_code, NeuroncError)
        raise cls(message, hint=error.get("hint"), details=error.get("details") or ())


_ERROR_BY_EXIT: dict[int, type[NeuroncError]] = {
    EXIT_INVALID_INPUT: InvalidInputError,
    EXIT_COMPILE_FAILED: CompileError,
    EXIT_ENVIRONMENT: BackendUnavailableError,
    EXIT_MISS: CacheMissError,
}


def overall_exit_code(reports: Iterable[BuildReport]) -> int:
    """The most severe exit code among the reports (0 when every build is built or a hit)."""
    codes = {r.exit_code for r in reports}
    for code in _SEVERITY:
        if code in codes:
            return code
    return max(codes, default=EXIT_OK)


def run_report(reports: Sequence[BuildReport], *, interrupted: bool = False) -> dict[str, Any]:
    """The whole run as one JSON document (``--json`` and ``--report FILE``)."""
    counts = {s: 0 for s in (STATUS_BUILT, STATUS_HIT, STATUS_FAILED, STATUS_SKIPPED)}
    for r in reports:
        counts[r.status] = counts.get(r.status, 0) + 1
    exit_code = EXIT_INTERRUPTED if interrupted else overall_exit_code(reports)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "exit_code": exit_code,
        "interrupted": interrupted,
        "summary": counts,
        "builds": [r.to_json() for r in reports],
    }


# ------------------------------------------------------------------------------------------------
# Stage clock: wall time and peak RSS
# ------------------------------------------------------------------------------------------------


class _Stages:
    """Times stages and measures each one's peak RSS (Linux resets the high-water mark per stage)."""

    def __init__(self, report: BuildReport, progress: ProgressSink, prefix: str) -> None:
        self._report = report
        self._progress = progress
        self._prefix = prefix

    @contextlib.contextmanager
    def stage(self, name: str, description: str, *, quiet: bool = False, children: bool = False) -> Iterator[None]:
        """Time a stage; ``children`` also measures child processes (a fork inherits our RSS, so
        only stages whose children are fresh interpreters, like parallel graph compiles, ask)."""
        task = None if quiet else self._progress.task(f"{self._prefix}{description}")
        _reset_peak_rss()
        children_before = _children_peak_rss() if children else None
        start = time.perf_counter()
        status = "failed"
        try:
            yield
            status = "ok"
        finally:
            seconds = time.perf_counter() - start
            children_after = _children_peak_rss() if children else None
            self._report.stages.append(
                StageReport(
                    name=name,
                    seconds=seconds,
                    peak_rss_bytes=_peak_rss(),
                    children_peak_rss_bytes=children_after
                    if children_after and children_after > (children_before or 0)
                    else None,
                )
            )
            if task is not None:
                task.done(f"{seconds:.1f}s" if status == "ok" else status)


_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _reset_peak_rss() -> None:
    # Writing 5 to clear_refs resets VmHWM (Linux >= 4.0), so each stage reports its own peak.
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


def _peak_rss() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        scale = 1 if sys.platform == "darwin" else 1024
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
    except (ImportError, OSError):
        return None


def _children_peak_rss() -> int | None:
    try:
        import resource

        value = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    except (ImportError, OSError):
        return None
    return value * (1 if sys.platform == "darwin" else 1024) if value else None


# ------------------------------------------------------------------------------------------------
# Running profiles
# ------------------------------------------------------------------------------------------------


def default_jobs() -> int:
    """Parallel graph compiles by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def load_builds(paths: Sequence[str | os.PathLike[str]]) -> list[BuildSpec]:
    """Load and validate every profile first, so bad input fails before any work starts."""
    from neuronc.errors import ProfileError
    from neuronc.profile import load_profile

    specs: list[BuildSpec] = []
    failures: list[ProfileError] = []
    for path in paths:
        try:
            specs.extend(load_profile(path).builds)
        except ProfileError as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        details = [line for exc in failures for line in (exc.details or [exc.message])]
        msg = f"{len(failures)} of {len(paths)} profiles are invalid"
        raise ProfileError(msg, details=details, hint=failures[0].hint)
    return specs


def check_backends(specs: Iterable[BuildSpec]) -> dict[str, Availability]:
    """Each backend's availability; raise BackendUnavailableError (exit 5) naming every one that cannot run."""
    from neuronc.backends import get_backend

    problems: list[str] = []
    hints: list[str] = []
    found: dict[str, Availability] = {}
    for name in sorted({s.backend for s in specs}):
        availability = found[name] = get_backend(name).availability()
        if not availability.available:
            problems.append(f"{name}: {availability.reason or 'not available'}")
            if availability.install_hint:
                hints.append(f"{name}: {availability.install_hint}")
    if problems:
        names = ", ".join(p.split(":", 1)[0] for p in problems)
        msg = f"backend {names} cannot compile on this machine"
        raise BackendUnavailableError(msg, details=problems, hint="; ".join(hints) or "run `neuronc backends`")
    return found


def compile_profiles(
    paths: Sequence[str | os.PathLike[str]],
    *,
    store: AnyStore | str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    require_hit: bool = False,
    progress: ProgressSink = NULL_PROGRESS,
    on_report: Callable[[BuildReport], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> list[BuildReport]:
    """Compile every build of every profile; return one report per build.

    Args:
        paths: profile YAML files; every one is loaded and validated before any work starts.
        store: a ``Store`` or ``RemoteStore``, a location (directory, s3://, hf://), or None for the
            default store.
        out_dir: also place the bundle here (the bundle itself for a single build; one
            sub-directory per bundle when the run has several).
        jobs: graphs compiled in parallel (default: the number of cores).
        only: build only the builds whose config hash starts with one of these keys.
        require_hit: never compile; a build that is not in the store fails with exit 6.
        progress: where stage and graph progress goes.
        on_report: called with each report as soon as its build ends.
        log: called with messages for people (why a lookup missed, waiting for a lock).

    Raises:
        ProfileError: a profile is invalid (exit 2), before anything is built.
        BackendUnavailableError: a backend cannot run here (exit 5), before anything is built.
        InvalidInputError: ``only`` matches no build.
        KeyboardInterrupt: after the running build's staging directory is removed.
    """
    specs = load_builds(paths)
    if not specs:
        raise InvalidInputError("no builds to compile")
    availabilities = check_backends(specs)
    resolved_store = open_store(store)
    selected = specs
    if only:
        selected = _select(specs, only)
    reports: list[BuildReport] = []
    several = len(selected) > 1
    for index, spec in enumerate(selected):
        report = build_one(
            spec,
            store=resolved_store,
            out_dir=Path(out_dir) if out_dir is not None else None,
            out_subdir=several,
            jobs=jobs,
            require_hit=require_hit,
            progress=progress,
            log=log,
            availability=availabilities.get(spec.backend),
        )
        reports.append(report)
        if on_report is not None:
            on_report(report)
        if report.exit_code == EXIT_ENVIRONMENT:
            # The same environment would fail every remaining build: say so instead of trying.
            for rest in selected[index + 1 :]:
                skipped = _new_report(rest, STATUS_SKIPPED)
                skipped.messages.append(f"skipped after an environment error in {report.label}")
                reports.append(skipped)
                if on_report is not None:
                    on_report(skipped)
            break
    return reports


def open_store(store: AnyStore | str | os.PathLike[str] | None) -> AnyStore:
    """A store from a store object, a location, or None (``$NEURONC_STORE`` or the user cache).

    Remote locations (s3://, hf://) go through neuronc.remote_store, imported only for them so a
    local store hit stays light.
    """
    from neuronc.store import Store

    if store is not None and not isinstance(store, str | os.PathLike):
        return store  # already a Store or a RemoteStore
    text = "" if store is None else os.fspath(store)
    if "://" in text and not text.startswith("file://"):
        from neuronc.remote_store import open_store as open_any

        remote: AnyStore = open_any(text)
        return remote
    return Store.from_option(text or None)


def _select(specs: Sequence[BuildSpec], only: Sequence[str]) -> list[BuildSpec]:
    """Builds whose config hash starts with one of ``only`` (as `neuronc matrix` prints them).

    Keys are computed from the profile as written (no revision lookup), as `neuronc matrix` does.
    """
    keys = [k.strip().lower() for k in only if k.strip()]
    short = [k for k in keys if len(k) < 6 or not all(c in "0123456789abcdef" for c in k)]
    if short:
        msg = f"--only takes a config hash or a prefix of at least 6 hex digits, got {', '.join(short)}"
        raise InvalidInputError(msg)
    selected: list[BuildSpec] = []
    matched: set[str] = set()
    for spec in specs:
        config = _config_key(spec)
        hits = [k for k in keys if config.hash.startswith(k)]
        if hits:
            selected.append(spec)
            matched.update(hits)
    missing = [k for k in keys if k not in matched]
    if missing:
        msg = f"--only {', '.join(missing)} matches no build of the profiles given"
        raise InvalidInputError(msg, hint="`neuronc matrix PROFILE --format json` lists every build's key")
    return selected


def _new_report(spec: BuildSpec, status: str) -> BuildReport:
    return BuildReport(
        profile=spec.profile_path or "<profile>",
        build_index=spec.build_index,
        status=status,
        model=spec.model.id,
        backend=spec.backend,
        target=spec.target,
        name=spec.name,
        matrix=dict(spec.matrix_values),
    )


# ------------------------------------------------------------------------------------------------
# One build
# ------------------------------------------------------------------------------------------------


def build_one(
    spec: BuildSpec,
    *,
    store: AnyStore | str | os.PathLike[str] | None = None,
    out_dir: Path | None = None,
    out_subdir: bool = False,
    jobs: int | None = None,
    require_hit: bool = False,
    progress: ProgressSink = NULL_PROGRESS,
    log: Callable[[str], None] | None = None,
    availability: Availability | None = None,
) -> BuildReport:
    """Build one BuildSpec into the store (or find it there); never leaves a half-written bundle.

    A NeuroncError is recorded in the returned report (status ``failed`` and its exit code); a
    KeyboardInterrupt removes the staging directory and propagates; any other exception means a
    bug and propagates after the same cleanup. ``availability`` skips asking the backend again.
    """
    report = _new_report(spec, STATUS_FAILED)
    started = time.perf_counter()
    try:
        _run_build(
            spec,
            report,
            open_store(store),
            out_dir,
            out_subdir,
            jobs,
            require_hit,
            progress,
            log or _quiet,
            availability,
        )
    except NeuroncError as exc:
        report.status = STATUS_FAILED
        report.exit_code = exc.exit_code
        report.error = exc.to_json()
    finally:
        report.wall_seconds = time.perf_counter() - started
    return report


def _quiet(message: str) -> None:
    pass


def _run_build(
    spec: BuildSpec,
    report: BuildReport,
    store: AnyStore,
    out_dir: Path | None,
    out_subdir: bool,
    jobs: int | None,
    require_hit: bool,
    progress: ProgressSink,
    log: Callable[[str], None],
    availability: Availability | None,
) -> None:
    from neuronc.backends import get_backend
    from neuronc.keys import toolchain_key, toolchain_label

    stages = _Stages(report, progress, prefix=f"{report.label}: ")
    with stages.stage("plan", "plan", quiet=True):
        backend = get_backend(spec.backend)
        if availability is None:
            availability = backend.availability()
        if not availability.available:
            msg = f"backend '{spec.backend}' cannot compile on this machine: {availability.reason}"
            raise BackendUnavailableError(msg, hint=availability.install_hint)
        versions = dict(availability.versions)
        plan = backend.plan(spec)
        tool_key = toolchain_key(versions)
        report.toolchain_key = tool_key
        report.toolchain_label = toolchain_label(spec.backend, versions)
        revision = resolve_revision(spec)
        config = _config_key(spec, revision)
        report.config_hash = config.hash

    with stages.stage("lookup", "store lookup", quiet=True):
        found = store.lookup(config.hash, tool_key)
    if found is not None:
        _record_hit(report, Path(found))
        _place_out(report, store, out_dir, out_subdir, stages)
        return
    report.nearest = nearest_bundle(store, spec, config, versions)
    if require_hit:
        msg = (
            f"{report.label}: no bundle for config {config.short} with toolchain {report.toolchain_label} in the store"
        )
        raise CacheMissError(msg, details=_nearest_lines(report.nearest), hint="compile without --require-hit")

    if report.nearest is not None:
        for line in _nearest_lines(report.nearest):
            log(f"{report.label}: {line}")
    with stages.stage("preflight", "memory pre-flight", quiet=True):
        _preflight(spec, jobs, log)

    def waiting(holder: str) -> None:
        log(f"{report.label}: waiting for another build of {config.short} ({holder})")

    with store.lock(config.hash, tool_key, on_wait=waiting):
        # Another process may have published the bundle while this one waited for the lock.
        found = store.lookup(config.hash, tool_key)
        if found is not None:
            report.messages.append("built concurrently by another process; reused")
            _record_hit(report, Path(found))
        else:
            _compile_into_store(spec, report, store, backend, plan, config, versions, revision, jobs, progress, stages)
    _place_out(report, store, out_dir, out_subdir, stages)


def _preflight(spec: BuildSpec, jobs: int | None, log: Callable[[str], None]) -> None:
    """The same memory estimate as `neuronc plan`: a build that cannot fit fails (exit 2) before it compiles."""
    from neuronc.plan import load_model_config, preflight

    estimate = preflight(spec, load_model_config(spec), jobs=jobs or default_jobs())
    for warning in estimate.warnings:
        log(f"warning: {warning}")


def _config_key(spec: BuildSpec, revision: str | None = None) -> ConfigKey:
    from neuronc.keys import config_key

    return config_key(spec, resolved_revision=revision)


def _record_hit(report: BuildReport, bundle: Path) -> None:
    from neuronc.bundle import read_manifest

    report.status = STATUS_HIT
    report.exit_code = EXIT_OK
    report.bundle = str(bundle)
    manifest = read_manifest(bundle)
    report.graphs = [dict(g) for g in getattr(manifest, "graphs", [])]


def _compile_into_store(
    spec: BuildSpec,
    report: BuildReport,
    store: AnyStore,
    backend: Backend,
    plan: CompilePlan,
    config: ConfigKey,
    versions: Mapping[str, str | None],
    revision: str | None,
    jobs: int | None,
    progress: ProgressSink,
    stages: _Stages,
) -> None:
    from neuronc.backends.base import CompileJob

    writer = store.writer(
        config.hash, report.toolchain_key, toolchain=versions, backend=spec.backend, model_id=spec.model.id
    )
    staging = Path(writer.path)
    finished = False
    try:
        with stages.stage("resolve", "resolve checkpoint"):
            model_dir, source = resolve_checkpoint(spec, revision)
        weights_dir: Path | None = None
        shards: list[dict[str, Any]] = []
        # A backend that shards in its own format (the Neuron SDKs) says it never reads neuronc's
        # rank shards; writing them would only cost time and disk.
        if spec.weights == "presharded" and getattr(backend, "consumes_rank_shards", True):
            # The splitter draws its own byte-progress bar.
            with stages.stage("split", f"split weights (tp={spec.tp_degree})", quiet=True):
                weights_dir = staging / "weights"
                shards = _split(model_dir, weights_dir, spec, writer, progress)
        with stages.stage("model_files", "copy config and tokenizer"):
            _copy_model_files(model_dir, writer)
            _add_profile(spec, writer)
        job = CompileJob(
            spec=spec,
            plan=plan,
            checkpoint_dir=model_dir,
            artifacts_dir=staging / "artifacts",
            logs_dir=staging / "logs",
            work_dir=writer.scratch_dir,
            weights_dir=weights_dir,
            jobs=jobs or default_jobs(),
            progress=progress,
        )
        job.artifacts_dir.mkdir(parents=True, exist_ok=True)
        job.logs_dir.mkdir(parents=True, exist_ok=True)
        with stages.stage("compile", f"compile {len(plan.graphs)} graph(s) with {spec.backend}", children=True):
            result = _compile(backend, job, report)
        report.graphs = _graph_records(result)
        with stages.stage("publish", "write manifest and publish"):
            fields = _manifest_fields(spec, report, config, versions, source, shards, result)
            bundle = writer.finish(fields)
        finished = True
        report.status = STATUS_BUILT
        report.exit_code = EXIT_OK
        report.bundle = str(bundle)
    except CompileError as exc:
        _keep_logs(exc, staging, config)
        raise
    finally:
        if not finished:
            writer.abort()


def _compile(backend: Backend, job: Any, report: BuildReport) -> CompileResult:
    try:
        return backend.compile(job)
    except NeuroncError:
        raise
    except Exception as exc:
        # A compiler crash is a compile failure of this build, not a bug in the pipeline.
        msg = f"{report.label}: {backend.name} compile failed: {type(exc).__name__}: {exc}"
        raise CompileError(msg) from exc


def _graph_records(result: CompileResult) -> list[dict[str, Any]]:
    return [
        {
            **g.graph.to_json(),
            "artifact": g.artifact,
            "compile_seconds": round(g.compile_seconds, 3),
            "cache_hit": g.cache_hit,
        }
        for g in result.graphs
    ]


def _manifest_fields(
    spec: BuildSpec,
    report: BuildReport,
    config: ConfigKey,
    versions: Mapping[str, str | None],
    source: dict[str, Any],
    shards: list[dict[str, Any]],
    result: CompileResult,
) -> dict[str, Any]:
    """Everything the manifest says about this build; the writer adds files, time and host."""
    from neuronc import __version__

    return {
        "neuronc_version": __version__,
        "backend": spec.backend,
        "target": spec.target,
        "profile": spec.normalized(),
        "config_hash": config.hash,
        "hashed_fields": list(config.fields),
        "hashed_inputs": config.inputs,
        "toolchain": dict(versions),
        "toolchain_key": report.toolchain_key,
        "graphs": report.graphs,
        "shards": shards,
        "weights": source,
        "stages": [s.to_manifest() for s in report.stages],
        "extra": dict(result.extra),
    }


# ------------------------------------------------------------------------------------------------
# Checkpoint: split and model files (resolution lives in neuronc.model_source)
# ------------------------------------------------------------------------------------------------


def _split(
    model_dir: Path, weights_dir: Path, spec: BuildSpec, writer: Any, progress: ProgressSink
) -> list[dict[str, Any]]:
    from neuronc.checkpoint import split_checkpoint

    # hash=True: the manifest records each shard's SHA-256 and the bundle writer adopts it unread.
    result = split_checkpoint(model_dir, weights_dir, spec.tp_degree, dtype=spec.amp, progress=progress, hash=True)
    shards = []
    recorded: set[str] = set()
    for shard in result.shards:
        rel = f"weights/{Path(shard.file).name}"
        writer.adopt(rel, role="weights", sha256=shard.sha256, size=shard.bytes)
        recorded.add(rel)
        shards.append({"rank": shard.rank, "file": rel, "bytes": shard.bytes, "sha256": shard.sha256})
    # Anything else the splitter wrote (index.json) is hashed by the writer.
    for path in sorted(weights_dir.rglob("*")):
        rel = path.relative_to(weights_dir.parent).as_posix()
        if path.is_file() and rel not in recorded:
            writer.adopt(rel, role="weights")
    return shards


def model_files(model_dir: Path) -> list[Path]:
    """The config, generation config and tokenizer files a bundle carries from its checkpoint."""
    found: dict[str, Path] = {}
    for name in MODEL_FILES:
        if (model_dir / name).is_file():
            found[name] = model_dir / name
    for pattern in _MODEL_FILE_PATTERNS:
        for path in model_dir.glob(pattern):
            if path.is_file():
                found.setdefault(path.name, path)
    return [found[name] for name in sorted(found)]


def _copy_model_files(model_dir: Path, writer: Any) -> None:
    for path in model_files(model_dir):
        # Resolve hub-cache symlinks: the bundle carries real files.
        writer.add_file(f"model/{path.name}", role="model", source_path=path.resolve())


def _add_profile(spec: BuildSpec, writer: Any) -> None:
    if spec.profile_path and Path(spec.profile_path).is_file():
        writer.add_file("profile.yaml", role="profile", source_path=Path(spec.profile_path))


# ------------------------------------------------------------------------------------------------
# Failures: keep the logs, show their tail
# ------------------------------------------------------------------------------------------------


def failed_logs_root() -> Path:
    """Where logs of failed builds are kept after their staging directory is removed."""
    from neuronc.locations import user_cache_dir

    return user_cache_dir() / "failed-builds"


def _keep_logs(exc: CompileError, staging: Path, config: ConfigKey) -> None:
    """Move the staging logs somewhere that survives cleanup and add the log tail to the error."""
    logs = staging / "logs"
    kept: Path | None = None
    if logs.is_dir() and any(logs.iterdir()):
        kept = failed_logs_root() / f"{config.short}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(logs, kept)
        except OSError:
            kept = None
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
    if kept is not None and exc.hint is None:
        exc.hint = f"compiler logs kept in {kept}"


# ------------------------------------------------------------------------------------------------
# Nearest bundle on a miss
# ------------------------------------------------------------------------------------------------


def nearest_bundle(
    store: AnyStore, spec: BuildSpec, config: ConfigKey, versions: Mapping[str, str | None]
) -> dict[str, Any] | None:
    """The store's bundle of the same model and backend with the fewest differing hashed fields."""
    from neuronc.keys import diff_inputs

    best: tuple[tuple[int, int, str], dict[str, Any]] | None = None
    for entry in store.list():
        manifest = entry.manifest
        if manifest.backend != spec.backend or manifest.model_id != spec.model.id:
            continue
        differences = diff_inputs(manifest.hashed_inputs, config.inputs)
        toolchain = {
            name: {"a": manifest.toolchain.get(name), "b": versions.get(name)}
            for name in dict.fromkeys([*manifest.toolchain, *versions])
            if manifest.toolchain.get(name) != versions.get(name)
        }
        record = {
            "config_hash": manifest.config_hash,
            "toolchain_key": manifest.toolchain_key,
            "bundle": str(entry.path),
            "differences": differences,
            "toolchain_differences": toolchain,
        }
        rank = (len(differences), len(toolchain), manifest.config_hash)
        if best is None or rank < best[0]:
            best = (rank, record)
    return best[1] if best else None


def _nearest_lines(nearest: dict[str, Any] | None) -> list[str]:
    """'nearest bundle abc123: sequence.context_buckets [128] → [128, 256]' lines for people."""
    if not nearest:
        return []
    from neuronc.keys import canonical_json

    lines = [f"nearest bundle in the store: {nearest['config_hash'][:12]} ({nearest['bundle']})"]
    for d in nearest["differences"]:
        lines.append(f"  {d['field']}: {_short_json(canonical_json(d['a']))} → {_short_json(canonical_json(d['b']))}")
    for name, change in nearest.get("toolchain_differences", {}).items():
        lines.append(f"  toolchain {name}: {change['a']} → {change['b']}")
    if not nearest["differences"] and not nearest.get("toolchain_differences"):
        lines.append("  same hashed inputs; different toolchain key")
    return lines


def nearest_lines(nearest: dict[str, Any] | None) -> list[str]:
    """Public form of the nearest-bundle explanation (the CLI prints it on a miss)."""
    return _nearest_lines(nearest)


def _short_json(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------
# --out: a copy of the bundle where the user wants it
# ------------------------------------------------------------------------------------------------


def _place_out(report: BuildReport, store: AnyStore, out_dir: Path | None, subdir: bool, stages: _Stages) -> None:
    if out_dir is None or report.bundle is None:
        return
    bundle = Path(report.bundle)
    dest = out_dir / bundle_dirname(report) if subdir else out_dir
    with stages.stage("out", f"copy bundle to {dest}", quiet=True):
        copy_bundle(bundle, dest)
    report.out = str(dest)


def bundle_dirname(report: BuildReport) -> str:
    """``<model-name>-b<batch>-<hash12>``: a readable, unique directory name for ``--out`` runs."""
    model = report.model.rstrip("/").split("/")[-1] or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    suffix = f"-{report.build_index}" if report.matrix else ""
    return f"{safe}{suffix}-{(report.config_hash or 'unknown')[:12]}"


def copy_bundle(bundle: Path, dest: Path) -> None:
    """Copy a published bundle to ``dest`` atomically; replace an older bundle, never other data."""
    dest = dest.absolute()
    if dest.exists():
        if not dest.is_dir():
            msg = f"--out {dest}: exists and is not a directory"
            raise InvalidInputError(msg)
        if any(dest.iterdir()) and not (dest / "manifest.json").is_file():
            msg = f"--out {dest}: directory is not empty and is not a bundle; refusing to overwrite it"
            raise InvalidInputError(msg, hint="choose an empty or new directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    old: Path | None = None
    try:
        shutil.copytree(bundle, tmp, dirs_exist_ok=True, symlinks=True)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not dest.exists():
            os.replace(old, dest)
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


__all__ = [
    "STATUS_BUILT",
    "STATUS_FAILED",
    "STATUS_HIT",
    "STATUS_SKIPPED",
    "BuildReport",
    "StageReport",
    "build_one",
    "check_backends",
    "compile_profiles",
    "copy_bundle",
    "default_jobs",
    "load_builds",
    "model_files",
    "nearest_lines",
    "overall_exit_code",
    "resolve_checkpoint",
    "resolve_revision",
    "run_report",
]
