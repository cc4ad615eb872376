"""Running builds: every build of every profile, or one ``BuildSpec``, through the stages."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from neuronc.backends.base import Availability
from neuronc.errors import EXIT_ENVIRONMENT, BackendUnavailableError, CacheMissError, InvalidInputError, NeuroncError
from neuronc.pipeline.context import BuildContext, resolve_build
from neuronc.pipeline.report import BuildReport, BuildStatus, record_hit
from neuronc.pipeline.timing import StageClock
from neuronc.progress import NULL_PROGRESS, ProgressSink
from neuronc.resources import default_jobs
from neuronc.spec import BuildSpec
from neuronc.store import BundleStore

Log = Callable[[str], None]


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


def open_store(store: BundleStore | str | os.PathLike[str] | None) -> BundleStore:
    """A store from a store object, a location (directory, s3://, hf://), or None (the default store)."""
    from neuronc.store import open_store as open_any

    return open_any(store)


def select_builds(specs: Sequence[BuildSpec], only: Sequence[str]) -> list[BuildSpec]:
    """Builds whose config hash starts with one of ``only`` (as `neuronc matrix` prints them).

    Keys are computed from the profile as written (no revision lookup), as `neuronc matrix` does.
    """
    from neuronc.keys import config_key

    keys = [k.strip().lower() for k in only if k.strip()]
    short = [k for k in keys if len(k) < 6 or not all(c in "0123456789abcdef" for c in k)]
    if short:
        msg = f"--only takes a config hash or a prefix of at least 6 hex digits, got {', '.join(short)}"
        raise InvalidInputError(msg)
    selected: list[BuildSpec] = []
    matched: set[str] = set()
    for spec in specs:
        config = config_key(spec)
        hits = [k for k in keys if config.hash.startswith(k)]
        if hits:
            selected.append(spec)
            matched.update(hits)
    missing = [k for k in keys if k not in matched]
    if missing:
        msg = f"--only {', '.join(missing)} matches no build of the profiles given"
        raise InvalidInputError(msg, hint="`neuronc matrix PROFILE --format json` lists every build's key")
    return selected


def compile_profiles(
    paths: Sequence[str | os.PathLike[str]],
    *,
    store: BundleStore | str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    require_hit: bool = False,
    progress: ProgressSink = NULL_PROGRESS,
    on_report: Callable[[BuildReport], None] | None = None,
    log: Log | None = None,
) -> list[BuildReport]:
    """Compile every build of every profile; return one report per build.

    Args:
        paths: profile YAML files; every one is loaded and validated before any work starts.
        store: a store object, a location (directory, s3://, hf://), or None for the default store.
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
    from neuronc.profile import load_builds

    specs = load_builds(paths)
    if not specs:
        raise InvalidInputError("no builds to compile")
    selected = select_builds(specs, only) if only else specs
    availabilities = check_backends(selected)  # only the builds that will run must be able to run here
    resolved_store = open_store(store)
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
                skipped = BuildReport.for_spec(rest, BuildStatus.SKIPPED)
                skipped.messages.append(f"skipped after an environment error in {report.label}")
                reports.append(skipped)
                if on_report is not None:
                    on_report(skipped)
            break
    return reports


def build_one(
    spec: BuildSpec,
    *,
    store: BundleStore | str | os.PathLike[str] | None = None,
    out_dir: Path | None = None,
    out_subdir: bool = False,
    jobs: int | None = None,
    require_hit: bool = False,
    progress: ProgressSink = NULL_PROGRESS,
    log: Log | None = None,
    availability: Availability | None = None,
) -> BuildReport:
    """Build one BuildSpec into the store (or find it there); never leaves a half-written bundle.

    A NeuroncError is recorded in the returned report (status ``failed``, its exit code, the
    exception itself); a KeyboardInterrupt removes the staging directory and propagates; any other
    exception means a bug and propagates after the same cleanup. ``availability`` skips asking
    the backend again.
    """
    report = BuildReport.for_spec(spec, BuildStatus.FAILED)
    started = time.perf_counter()
    try:
        _run(spec, report, open_store(store), out_dir, out_subdir, jobs, require_hit, progress, log, availability)
    except NeuroncError as exc:
        report.fail(exc)
    finally:
        report.wall_seconds = time.perf_counter() - started
    return report


def _run(
    spec: BuildSpec,
    report: BuildReport,
    store: BundleStore,
    out_dir: Path | None,
    out_subdir: bool,
    jobs: int | None,
    require_hit: bool,
    progress: ProgressSink,
    log: Log | None,
    availability: Availability | None,
) -> None:
    say: Log = log or (lambda message: None)
    clock = StageClock(report, progress, prefix=f"{report.label}: ")
    with clock.stage("plan", "plan", quiet=True):
        ctx = resolve_build(spec, availability)
        report.toolchain_key = ctx.toolchain_key
        report.toolchain_label = ctx.toolchain_label
        report.config_hash = ctx.config.hash
    with clock.stage("lookup", "store lookup", quiet=True):
        found = store.lookup(ctx.config.hash, ctx.toolchain_key)
    if found is None:
        _build(ctx, report, store, jobs or default_jobs(), require_hit, progress, say, clock)
    else:
        record_hit(report, Path(found))
    _place_out(report, out_dir, out_subdir, clock)


def _build(
    ctx: BuildContext,
    report: BuildReport,
    store: BundleStore,
    jobs: int,
    require_hit: bool,
    progress: ProgressSink,
    say: Log,
    clock: StageClock,
) -> None:
    """A miss: say what is nearest, check the build fits, then compile it once under the key's lock."""
    # What a miss needs (the nearest bundle, the stages that compile) loads only on a miss.
    from neuronc.pipeline.nearest import nearest_bundle, nearest_lines
    from neuronc.pipeline.stages import compile_into_store, preflight

    report.nearest = nearest_bundle(store, ctx)
    if require_hit:
        msg = f"{ctx.label}: no bundle for config {ctx.config.short} with toolchain {ctx.toolchain_label} in the store"
        raise CacheMissError(msg, details=nearest_lines(report.nearest), hint="compile without --require-hit")
    for line in nearest_lines(report.nearest):
        say(f"{ctx.label}: {line}")
    with clock.stage("preflight", "memory pre-flight", quiet=True):
        preflight(ctx, jobs, say)
        # A missing bucket or a read-only store fails now (exit 5), not after an hour of compiling.
        store.ensure_writable()

    def waiting(holder: str) -> None:
        say(f"{ctx.label}: waiting for another build of {ctx.config.short} ({holder})")

    with store.lock(ctx.config.hash, ctx.toolchain_key, on_wait=waiting):
        # Another process may have published the bundle while this one waited for the lock.
        found = store.lookup(ctx.config.hash, ctx.toolchain_key)
        if found is not None:
            report.messages.append("built concurrently by another process; reused")
            record_hit(report, Path(found))
        else:
            compile_into_store(ctx, report, store, jobs, progress, clock)


def _place_out(report: BuildReport, out_dir: Path | None, subdir: bool, clock: StageClock) -> None:
    if out_dir is None or report.bundle is None:
        return
    from neuronc.pipeline.out import bundle_dirname, copy_bundle

    dest = out_dir / bundle_dirname(report) if subdir else out_dir
    with clock.stage("out", f"copy bundle to {dest}", quiet=True):
        copy_bundle(Path(report.bundle), dest)
    report.out = str(dest)
