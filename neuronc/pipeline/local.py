"""The local executor: the builds of a run in this process, their worker processes in one shared pool.

A matrix does not compile one build after another while a core sits idle: every build runs in its
own thread, and the worker processes of all of them (graph compiles, an SDK's compile process) and
their weight splits take slots of one ``WorkPool``, at most ``jobs`` at once and within the host
memory the pre-flight's estimates allow (what the OS says is available when the run starts, unless
``memory_bytes`` is given). A build's lookup, checkpoint resolution and publish need no slot.

Ctrl-C cancels the pool: waiting workers never start, running ones are killed, and each build's
staging directory is removed (the pipeline's usual cleanup) before KeyboardInterrupt propagates.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from neuronc.build import Build
from neuronc.errors import EXIT_ENVIRONMENT
from neuronc.pipeline.context import ResolvedBuild
from neuronc.pipeline.report import BuildReport, BuildStatus
from neuronc.pipeline.run import BuildOptions, build_one, check_backends, open_store
from neuronc.progress import ProgressSink, ProgressTask
from neuronc.resources import WorkPool, available_memory_bytes
from neuronc.store import BundleStore

OnReport = Callable[[BuildReport], None]


@dataclasses.dataclass(frozen=True)
class BuildBatch:
    """The builds of one run, as ``compile_profiles`` hands them to an executor."""

    builds: Sequence[Build]
    contexts: Sequence[ResolvedBuild | None]  # ``contexts[i]`` is ``builds[i]`` resolved, or None
    store: BundleStore | str | os.PathLike[str] | None
    options: BuildOptions
    on_report: OnReport


class Executor(Protocol):
    """Where the builds of a run are compiled (``neuronc compile --executor``)."""

    name: str

    def run(self, batch: BuildBatch) -> list[BuildReport]:
        """Compile every build of ``batch``: one report each, in order."""
        ...


class _Labelled:
    """A progress sink that names the build on each task: builds of a matrix show side by side."""

    def __init__(self, sink: ProgressSink, label: str) -> None:
        self._sink = sink
        self._prefix = f"{label}: "

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        named = description if description.startswith(self._prefix) else self._prefix + description
        return self._sink.task(named, total, unit)


@dataclasses.dataclass
class LocalExecutor:
    """This process: graphs of all builds share one pool bounded by ``jobs`` and by host memory."""

    # Memory the workers' pre-flight estimates may add up to (None: what the OS says is available).
    memory_bytes: int | None = None
    name: str = "local"
    # The pool of the last run (benchmarks and tests read how many workers ran at once).
    pool: WorkPool | None = dataclasses.field(default=None, init=False)

    def run(self, batch: BuildBatch) -> list[BuildReport]:
        builds, contexts, options, on_report = batch.builds, batch.contexts, batch.options, batch.on_report
        availabilities = check_backends(builds)  # only the builds that will run must be able to run here
        resolved_store = open_store(batch.store)
        budget = self.memory_bytes if self.memory_bytes is not None else available_memory_bytes()
        pool = self.pool = WorkPool(options.jobs, budget)
        options = dataclasses.replace(options, pool=pool)
        environment_failed = threading.Event()
        failed_label: list[str] = []

        def one(build: Build, ctx: ResolvedBuild | None) -> BuildReport:
            spec = build.spec
            if environment_failed.is_set():
                # The same environment would fail this build too: say so instead of trying.
                message = f"skipped after an environment error in {failed_label[0]}"
                return BuildReport.for_spec(spec, BuildStatus.SKIPPED, messages=[message])
            mine = options
            if len(builds) > 1:
                mine = dataclasses.replace(options, progress=_Labelled(options.progress, spec.label))
            report = build_one(
                build, store=resolved_store, options=mine, availability=availabilities.get(spec.backend), context=ctx
            )
            if report.exit_code == EXIT_ENVIRONMENT and not environment_failed.is_set():
                failed_label.append(report.label)
                environment_failed.set()
            return report

        if len(builds) == 1:
            report = one(builds[0], contexts[0])
            on_report(report)
            return [report]
        reports: list[BuildReport | None] = [None] * len(builds)
        # Builds wait for slots in the pool, not for each other: enough of them run to keep it busy.
        threads = min(len(builds), 2 * pool.slots)
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="neuronc-build")
        try:
            # Each build runs in a copy of this context: the run's message sink (``say``) reaches it.
            futures = {
                executor.submit(contextvars.copy_context().run, one, build, ctx): index
                for index, (build, ctx) in enumerate(zip(builds, contexts, strict=True))
            }
            for future in concurrent.futures.as_completed(futures):
                report = future.result()
                reports[futures[future]] = report
                on_report(report)
        except BaseException:
            pool.cancel()
            raise
        finally:
            # After an interrupt: the builds see the cancelled pool, clean up and end before we do.
            executor.shutdown(wait=True, cancel_futures=True)
        return [r for r in reports if r is not None]


__all__ = ["BuildBatch", "Executor", "LocalExecutor", "OnReport"]
