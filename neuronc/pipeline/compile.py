"""The pipeline's entry point: ``compile_profiles`` loads every profile, selects the builds and hands
them to an executor (``LocalExecutor`` by default, ``farm.RayExecutor`` on a cluster).

It sits above both ``run`` (one build) and ``local`` (the executor that runs builds in this
process), which therefore never import each other's callers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.errors import InvalidInputError
from neuronc.pipeline.context import ResolvedBuild, resolve_build
from neuronc.pipeline.local import BuildBatch, Executor, LocalExecutor
from neuronc.pipeline.messages import Log, logging_to
from neuronc.pipeline.report import BuildReport
from neuronc.pipeline.run import BuildOptions, open_store, select_builds
from neuronc.progress import NULL_PROGRESS, ProgressSink
from neuronc.resources import default_compile_jobs
from neuronc.store import BundleStore

if TYPE_CHECKING:
    from neuronc.bundle.signing_material import Signer


def compile_profiles(
    paths: Sequence[str | os.PathLike[str]],
    *,
    store: BundleStore | str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    revision: str | None = None,
    require_hit: bool = False,
    progress: ProgressSink = NULL_PROGRESS,
    on_report: Callable[[BuildReport], None] | None = None,
    log: Log | None = None,
    executor: Executor | None = None,
    signer: Signer | None = None,
) -> list[BuildReport]:
    """Compile every build of every profile; return one report per build.

    Args:
        paths: profile YAML files, or directories of them (their *.yaml and *.yml files); every one
            is loaded and validated before any work starts.
        store: a store object, a location (directory, s3://, hf://), or None for the default store.
        out_dir: also place the bundle here (the bundle itself for a single build; one
            sub-directory per bundle when the run has several).
        jobs: graphs compiled in parallel (default: ``default_compile_jobs()``, the cores plus one or two).
        only: build only the builds whose config hash starts with one of these keys.
        revision: the commit every hub model's revision resolves to (a matrix entry's ``revision``):
            the builds are keyed and built at it, whatever the revision points at now.
        require_hit: never compile; a build that is not in the store fails with exit 6.
        progress: where stage and graph progress goes.
        on_report: called with each report as soon as its build ends.
        log: called with messages for people (why a lookup missed, waiting for a lock).
        executor: where the builds run: this process (``LocalExecutor``, the default: the graphs of
            all builds share one pool of ``jobs`` workers within the host memory the pre-flight's
            estimates allow) or a Ray cluster (``neuronc.pipeline.farm.RayExecutor``).
        signer: sign each bundle the run built once every build has ended (the signing stage,
            ``neuronc.pipeline.sign``; ``BuildReport.signature`` says what it did to each); a store
            hit keeps its own signature only where it verifies as this signer's.

    Raises:
        ProfileError: a profile is invalid (exit 2), before anything is built.
        BackendUnavailableError: a backend cannot run here (exit 5), before anything is built
            (on a Ray cluster: that build fails, naming the node).
        InvalidInputError: ``only`` matches no build.
        KeyboardInterrupt: after the running build's staging directory is removed.
    """
    from neuronc.profile import expand_profile_paths, load_builds

    commit = _commit_option(revision)
    builds = load_builds(expand_profile_paths(paths))
    if not builds:
        raise InvalidInputError("no builds to compile")
    with logging_to(log):
        contexts: list[ResolvedBuild | None] = [None] * len(builds)
        if only:
            contexts = list(select_builds(builds, only, commit))
        elif commit is not None:
            contexts = [resolve_build(build, strict=False, commit=commit) for build in builds]
        selected = [c.build for c in contexts if c is not None] if only else list(builds)
        options = BuildOptions(
            jobs=jobs or default_compile_jobs(),
            require_hit=require_hit,
            progress=progress,
            out_dir=Path(out_dir) if out_dir is not None else None,
            out_subdir=len(selected) > 1,
            signer=signer,
        )
        if executor is None:
            executor = LocalExecutor()
        reports = executor.run(BuildBatch(selected, contexts, store, options, on_report or _ignore))
        if options.signer is not None:
            from neuronc.pipeline.sign import sign_built

            sign_built(reports, options.signer, open_store(store))
        return reports


def _ignore(report: BuildReport) -> None:
    pass


def _commit_option(revision: str | None) -> str | None:
    """``--revision``: a 40-hex commit, or empty (a matrix entry of a local model has none)."""
    if revision is None or not revision.strip():
        return None
    from neuronc.model.hfcache import COMMIT_RE

    commit = revision.strip().lower()
    if not COMMIT_RE.fullmatch(commit):
        msg = f"--revision takes the 40-hex commit a matrix entry names (its `revision`), got {revision!r}"
        raise InvalidInputError(msg, hint="`neuronc matrix PROFILE --format json` lists each build's revision")
    return commit
