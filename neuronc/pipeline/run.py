"""Running one build (a ``Build``: spec and backend) through the stages; ``compile.py`` runs every
build of every profile through an executor that calls ``build_one``.

``build_one`` resolves the build once (``resolve_build``, a ``ResolvedBuild`` every stage receives),
looks it up, and on a miss compiles it under the key's lock; it returns a ``BuildReport`` assembled
from what the stages returned. What stays the same for every build of a run is one frozen
``BuildOptions``; messages for people go to the run's context-scoped sink (``neuronc.pipeline.messages``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.backends.base import Availability
from neuronc.build import Build
from neuronc.errors import BackendUnavailableError, CacheMissError, InvalidInputError, NeuroncError
from neuronc.pipeline.context import ResolvedBuild, resolve_build
from neuronc.pipeline.identity import BuildIdentity
from neuronc.pipeline.messages import say
from neuronc.pipeline.report import BuildReport, BuildStatus, NearestBundle, hit_graphs
from neuronc.pipeline.timing import StageClock
from neuronc.progress import NULL_PROGRESS, ProgressSink
from neuronc.resources import WorkPool, default_compile_jobs
from neuronc.spec import BuildSpec
from neuronc.store import BundleStore

if TYPE_CHECKING:
    from neuronc.bundle import Graph
    from neuronc.bundle.signing_material import Signer


@dataclass(frozen=True)
class BuildOptions:
    """What every build of a run shares."""

    # Graphs compiled in parallel.
    jobs: int = field(default_factory=default_compile_jobs)
    # Never compile: a build not in the store fails with exit 6.
    require_hit: bool = False
    # Where stage and graph progress goes.
    progress: ProgressSink = NULL_PROGRESS
    # Also place each bundle here (``--out``); in a sub-directory per bundle with ``out_subdir``.
    out_dir: Path | None = None
    out_subdir: bool = False
    # Worker slots shared by the builds of a matrix compiled in this process (``neuronc.pipeline.local``).
    pool: WorkPool | None = None
    # Sign what the run built (``neuronc.pipeline.sign``), in the process that drives the run, after
    # every build has ended; None: sign nothing. Never sent to a Ray node.
    signer: Signer | None = None


@dataclass(frozen=True)
class Outcome:
    """What a build's lookup or compile produced (the report's result fields)."""

    status: BuildStatus
    bundle: Path
    graphs: list[Graph]
    messages: tuple[str, ...] = ()
    # A rebind: the stored bundle the graphs came from.
    rebound_from: dict[str, str] | None = None


def check_backends(builds: Iterable[Build]) -> dict[str, Availability]:
    """Each backend's availability; raise BackendUnavailableError (exit 5) naming every one that cannot run."""
    problems: list[str] = []
    hints: list[str] = []
    found: dict[str, Availability] = {}
    backends = {build.spec.backend: build.backend for build in builds}
    for name in sorted(backends):
        availability = found[name] = backends[name].toolchain.availability()
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


def select_builds(builds: Sequence[Build], only: Sequence[str], commit: str | None = None) -> list[ResolvedBuild]:
    """The builds whose config hash starts with one of ``only`` (as `neuronc matrix` prints them),
    resolved: the key is worked out as `compile`, `plan` and `matrix` work it out (``commit``: a hub
    model's revision as resolved when the key was printed, the matrix entry's ``revision``).

    A key that matches no build, where a hub model's ref has moved since (its key at an earlier
    commit of the ref is that key), says which ref moved, from which commit to which.
    """
    keys = [k.strip().lower() for k in only if k.strip()]
    short = [k for k in keys if len(k) < 6 or not all(c in "0123456789abcdef" for c in k)]
    if short:
        msg = f"--only takes a config hash or a prefix of at least 6 hex digits, got {', '.join(short)}"
        raise InvalidInputError(msg)
    selected: list[ResolvedBuild] = []
    contexts: list[ResolvedBuild] = []
    matched: set[str] = set()
    for build in builds:
        ctx = resolve_build(build, strict=False, commit=commit)
        contexts.append(ctx)
        hits = [k for k in keys if ctx.config_key is not None and ctx.config_key.hash.startswith(k)]
        if hits:
            selected.append(ctx)
            matched.update(hits)
    missing = [k for k in keys if k not in matched]
    if missing:
        from neuronc.pipeline.moved import moved_refs

        moves = moved_refs(contexts, missing) if commit is None else []
        msg = f"--only {', '.join(missing)} matches no build of the profiles given"
        if moves:
            msg += ": " + "; ".join(move.describe() for move in moves)
            commits = sorted({move.old for move in moves})
            hint = f"pass --revision {commits[0]} (the matrix entry's `revision`) to build that key"
            raise InvalidInputError(msg, details=[m.detail() for m in moves], hint=hint)
        raise InvalidInputError(msg, hint="`neuronc matrix PROFILE --format json` lists every build's key")
    return selected


def build_one(
    build: Build,
    *,
    store: BundleStore | str | os.PathLike[str] | None = None,
    options: BuildOptions | None = None,
    availability: Availability | None = None,
    context: ResolvedBuild | None = None,
    identity: BuildIdentity | None = None,
) -> BuildReport:
    """Build one build into the store (or find it there); never leaves a half-written bundle.

    A NeuroncError is recorded in the returned report (status ``failed``, its exit code, the
    exception itself); a KeyboardInterrupt removes the staging directory and propagates; any other
    exception means a bug and propagates after the same cleanup. ``availability`` and ``context``
    skip asking the backend or resolving the build again. ``identity`` is the build as another
    process selected it (a Ray task's driver): it is resolved at that commit, never again, and a
    build that would get another key here fails with exit 5 naming what differs.
    """
    options = options or BuildOptions()
    spec = build.spec
    resolved_store = open_store(store)
    clock = StageClock(options.progress, prefix=f"{spec.label}: ")
    started = time.perf_counter()
    ctx = context
    nearest: NearestBundle | None = None  # on a miss; reported on a failure too
    outcome: Outcome | None = None
    out: Path | None = None
    error: NeuroncError | None = None
    try:
        if ctx is None:
            with clock.stage("plan", "plan", quiet=True):
                if identity is not None:
                    ctx = identity.resolve(build, availability=availability)
                else:
                    ctx = resolve_build(build, availability=availability)
        with clock.stage("lookup", "store lookup", quiet=True):
            found = resolved_store.lookup(ctx.config.hash, ctx.toolchain_key)
        if found is None:
            from neuronc.pipeline.nearest import nearest_bundle  # what a miss needs loads on a miss

            nearest = nearest_bundle(resolved_store, ctx)
            outcome = _build(ctx, resolved_store, options, clock, nearest)
        else:
            outcome = Outcome(BuildStatus.HIT, Path(found), hit_graphs(Path(found)))
        built = outcome.status in (BuildStatus.BUILT, BuildStatus.REBOUND)
        out = _place_out(spec, ctx, outcome.bundle, options, clock, built=built)
    except NeuroncError as exc:
        error = exc
    return BuildReport.assemble(
        spec,
        status=outcome.status if outcome is not None and error is None else BuildStatus.FAILED,
        config_hash=ctx.config_key.hash if ctx is not None and ctx.config_key is not None else None,
        graphs_key=ctx.config_key.graphs_hash if ctx is not None and ctx.config_key is not None else None,
        weights_key=ctx.config_key.weights_hash if ctx is not None and ctx.config_key is not None else None,
        rebound_from=outcome.rebound_from if outcome is not None and error is None else None,
        toolchain_key=ctx.toolchain_key if ctx is not None else None,
        toolchain_label=ctx.toolchain_label if ctx is not None else None,
        bundle=str(outcome.bundle) if outcome is not None else None,
        out=str(out) if out is not None else None,
        graphs=outcome.graphs if outcome is not None else [],
        stages=clock.stages,
        wall_seconds=time.perf_counter() - started,
        error=error,
        nearest=nearest,
        messages=list(outcome.messages) if outcome is not None else [],
    )


def _build(
    ctx: ResolvedBuild,
    store: BundleStore,
    options: BuildOptions,
    clock: StageClock,
    nearest: NearestBundle | None,
) -> Outcome:
    """A miss: say what is nearest, check the build fits, then compile it once under the key's lock."""
    # What a miss needs (the stages that compile) loads only on a miss.
    from neuronc.pipeline.nearest import nearest_lines
    from neuronc.pipeline.stages import compile_into_store, preflight

    if options.require_hit:
        msg = f"{ctx.label}: no bundle for config {ctx.config.short} with toolchain {ctx.toolchain_label} in the store"
        raise CacheMissError(msg, details=nearest_lines(nearest), hint="compile without --require-hit")
    for line in nearest_lines(nearest):
        say(f"{ctx.label}: {line}")
    rebound = _rebind(ctx, store, options, clock)
    if rebound is not None:
        return rebound
    with clock.stage("preflight", "memory pre-flight", quiet=True):
        estimate = preflight(ctx, options.jobs)
        # A missing bucket or a read-only store fails now (exit 5), not after an hour of compiling.
        store.ensure_writable()

    def waiting(holder: str) -> None:
        say(f"{ctx.label}: waiting for another build of {ctx.config.short} ({holder})")

    with store.lock(ctx.config.hash, ctx.toolchain_key, on_wait=waiting):
        # Another process may have published the bundle while this one waited for the lock.
        found = store.lookup(ctx.config.hash, ctx.toolchain_key)
        if found is not None:
            return Outcome(
                BuildStatus.HIT,
                Path(found),
                hit_graphs(Path(found)),
                ("built concurrently by another process; reused",),
            )
        built = compile_into_store(ctx, store, options, clock, estimate)
    if built.lost_race:
        # Another host published this key first: its bundle is the one in the store, and the one
        # this build uses (the local copy was replaced by it).
        message = built.message or f"another publisher stored {ctx.config.short} first"
        return Outcome(BuildStatus.HIT, built.bundle, hit_graphs(built.bundle), (message,))
    return Outcome(BuildStatus.BUILT, built.bundle, built.graphs)


def _rebind(ctx: ResolvedBuild, store: BundleStore, options: BuildOptions, clock: StageClock) -> Outcome | None:
    """The graphs from a stored bundle with this build's graphs key, and only this build's weights staged;
    None when the store holds no such bundle, the backend's graphs may hold the weights, or the weights
    do not fit the stored graphs (then the build compiles)."""
    from neuronc.pipeline.rebind import graphs_source, rebind_into_store

    with clock.stage("lookup", "graphs lookup", quiet=True):
        entry = graphs_source(store, ctx)
    if entry is None:
        return None
    source = entry.manifest.config_hash[:12]
    say(f"{ctx.label}: graphs {ctx.config.graphs_hash[:12]} are in the store (bundle {source}): rebind")
    store.ensure_writable()

    def waiting(holder: str) -> None:
        say(f"{ctx.label}: waiting for another build of {ctx.config.short} ({holder})")

    with store.lock(ctx.config.hash, ctx.toolchain_key, on_wait=waiting):
        found = store.lookup(ctx.config.hash, ctx.toolchain_key)
        if found is not None:
            reused = ("built concurrently by another process; reused",)
            return Outcome(BuildStatus.HIT, Path(found), hit_graphs(Path(found)), reused)
        rebound = rebind_into_store(ctx, store, options, clock, entry)
    if rebound is None:
        say(f"{ctx.label}: the weights do not fit the stored graphs (tensor names, shapes or dtypes): compiling")
        return None
    origin = f"graphs from {rebound.source['config_hash'][:12]} ({rebound.source['bundle']}); no graph compiled"
    return Outcome(BuildStatus.REBOUND, rebound.bundle, rebound.graphs, (origin,), rebound.source)


def _place_out(
    spec: BuildSpec, ctx: ResolvedBuild, bundle: Path, options: BuildOptions, clock: StageClock, *, built: bool
) -> Path | None:
    """``--out``: a copy of the bundle. A hit comes out of the store: a required signature is checked first."""
    if options.out_dir is None:
        return None
    from neuronc.pipeline.out import bundle_dirname, place_bundle

    dest = options.out_dir / bundle_dirname(spec, ctx.config.hash) if options.out_subdir else options.out_dir
    with clock.stage("out", f"copy bundle to {dest}", quiet=True):
        place_bundle(bundle, dest, signature_checked=built)
    return dest
