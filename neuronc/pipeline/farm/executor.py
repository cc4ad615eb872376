"""The Ray executor: each build of a run is one Ray task, placed by what the pre-flight says it needs.

Before anything is submitted the driver connects, reads the alive nodes, works out each build's need
(host RAM from the pre-flight for the CPUs it gets, plus ``--ray-resources``), refuses a build that
fits no node, and checks that every node that could run a build sees the store. Then it submits one
task per build (``farm.task.run_build``), follows them (queued, running on which node, hit, built,
failed), and turns each task's result into the same ``BuildReport`` a local compile returns.

A node that dies mid-build has its task retried by Ray on another node (``max_retries``; the lost
attempts are named in the report). Ctrl-C cancels every task (a running one gets KeyboardInterrupt
and removes its staging directory, as a local build does; one still running after the grace period
is killed) and raises KeyboardInterrupt. Two drivers building one key publish one bundle: the store's
per-key lock and conditional publish decide, as they do for two hosts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuronc.build import Build
from neuronc.errors import EnvironmentIncompatibleError, NeuroncError
from neuronc.pipeline.context import ResolvedBuild
from neuronc.pipeline.farm.cluster import (
    Need,
    Node,
    RaySettings,
    build_need,
    check_store_shared,
    cluster_nodes,
    connect,
    fitting,
    import_ray,
    refuse_unplaceable,
)
from neuronc.pipeline.farm.task import EventLog, report_from_worker, run_build
from neuronc.pipeline.identity import BuildIdentity
from neuronc.pipeline.local import BuildBatch, OnReport
from neuronc.pipeline.messages import say
from neuronc.pipeline.report import BuildReport, BuildStatus
from neuronc.pipeline.run import BuildOptions, open_store
from neuronc.progress import ProgressTask
from neuronc.spec import BuildSpec
from neuronc.store import BundleStore

# How often the driver looks at its tasks and their events (seconds).
_POLL_SECONDS = 0.5
_EVENT_TIMEOUT = 30.0


@dataclasses.dataclass
class RayExecutor:
    """Builds as Ray tasks on the cluster at ``settings.address`` (or $RAY_ADDRESS)."""

    settings: RaySettings = dataclasses.field(default_factory=RaySettings)
    name: str = "ray"

    def run(self, batch: BuildBatch) -> list[BuildReport]:
        builds, contexts, options, on_report = batch.builds, batch.contexts, batch.options, batch.on_report
        ray = import_ray()
        resolved_store = open_store(batch.store)
        # Each build resolved once, here: the commit, the key and the toolchain it expects travel with its
        # task (``BuildIdentity``); a node builds at that commit and never resolves the revision again.
        resolved = [ctx if ctx is not None else _resolve(build) for build, ctx in zip(builds, contexts, strict=True)]
        for ctx in resolved:
            if ctx.unresolved is not None:  # before anything is submitted: no node may guess the commit
                raise ctx.unresolved
        with _ray_messages_to_stderr():
            # What crosses to a node: the spec (as JSON) and its identity; the node rebuilds the Build.
            specs = [ctx.spec for ctx in resolved]
            return self._run(ray, specs, resolved, resolved_store, options, on_report)

    def _run(
        self,
        ray: Any,
        specs: Sequence[BuildSpec],
        resolved: Sequence[ResolvedBuild],
        resolved_store: BundleStore,
        options: BuildOptions,
        on_report: OnReport,
    ) -> list[BuildReport]:
        connected = connect(self.settings)
        try:
            nodes = cluster_nodes()
            needs = [build_need(ctx, self.settings, nodes) for ctx in resolved]
            refuse_unplaceable(needs, nodes)
            for need in needs:
                if need.unknown:
                    say(f"{need.label}: host memory unknown ({need.unknown}); placed by CPUs and resources only")
            usable = [n for n in nodes if any(n.fits(need) for need in needs)]
            check_store_shared(resolved_store, usable, shared=self.settings.shared_store)
            identities = [BuildIdentity.of(ctx).to_json() for ctx in resolved]
            farm = _Farm(ray, specs, needs, resolved_store, options, self.settings, on_report, nodes, identities)
            return farm.run()
        finally:
            if connected:
                ray.shutdown()


def _resolve(build: Build) -> ResolvedBuild:
    from neuronc.pipeline.context import resolve_build

    return resolve_build(build, strict=False)


def placement(
    contexts: Sequence[ResolvedBuild], settings: RaySettings
) -> tuple[list[Node], list[tuple[Need, list[Node]]]]:
    """`neuronc plan --executor ray`: the cluster's nodes and, for each build, its need and the nodes it fits."""
    ray = import_ray()
    with _ray_messages_to_stderr():
        connected = connect(settings)
        try:
            nodes = cluster_nodes()
            needs = [build_need(ctx, settings, nodes) for ctx in contexts]
            return nodes, [(need, fitting(need, nodes)) for need in needs]
        finally:
            if connected:
                ray.shutdown()


def _ray_messages_to_stderr() -> contextlib.AbstractContextManager[Any]:
    """While connected, Ray prints the cluster's messages for people ("Raylet is terminated", a task's
    error) on sys.stdout from a thread of its own; stdout is for the one JSON document: send them to stderr."""
    return contextlib.redirect_stdout(sys.stderr)


class _Farm:
    """One run's tasks on the cluster, followed until each has a report."""

    def __init__(
        self,
        ray: Any,
        specs: Sequence[BuildSpec],
        needs: Sequence[Need],
        store: BundleStore,
        options: BuildOptions,
        settings: RaySettings,
        on_report: OnReport,
        nodes: Sequence[Node],
        identities: Sequence[dict[str, Any]],
    ) -> None:
        self.ray = ray
        self.specs = specs
        self.needs = needs
        self.store = store
        self.options = options
        self.settings = settings
        self.on_report = on_report
        self.names = {n.node_id: n.name for n in nodes}
        self.attempts: dict[int, list[str]] = {i: [] for i in range(len(specs))}
        self.tasks: dict[int, ProgressTask] = {}
        self.finished: set[int] = set()
        self.seen = 0  # how many of the event log's events were read
        # Each build as the driver resolved it (``BuildIdentity.to_json``), sent with its task.
        self.identities = identities

    def node_name(self, node_id: str) -> str:
        if node_id not in self.names:
            self.names.update({n.node_id: n.name for n in cluster_nodes()})
        return self.names.get(node_id, node_id[:8])

    def run(self) -> list[BuildReport]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        # On the driver's own node where it can: a build node that dies must not take the log with it.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        events = ray.remote(EventLog).options(num_cpus=0, scheduling_strategy=here).remote()
        remote = ray.remote(run_build)
        refs: dict[Any, int] = {}
        try:
            for index, (spec, need) in enumerate(zip(self.specs, self.needs, strict=True)):
                payload = {
                    "index": index,
                    "spec": _for_nodes(spec).model_dump(mode="json"),
                    "store": self.store.location,
                    "jobs": need.cpus,
                    "require_hit": self.options.require_hit,
                    "identity": self.identities[index],
                }
                task_options = need.ray_options()
                ref = remote.options(
                    **task_options,
                    max_retries=self.settings.max_retries,
                    retry_exceptions=False,
                    name=f"neuronc {spec.label}",
                ).remote(payload, events)
                refs[ref] = index
                self.tasks[index] = self.options.progress.task(f"{spec.label}")
                say(f"{spec.label}: queued on the Ray cluster (needs {need.describe()})")
            reports: list[BuildReport | None] = [None] * len(self.specs)
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=_POLL_SECONDS)
                self._drain(events)
                for ref in done:
                    index = refs[ref]
                    self._drain(events)
                    report = self._finish(index, ref)
                    reports[index] = report
                    self.on_report(report)
            return [r for r in reports if r is not None]
        except BaseException:
            self._cancel([ref for ref in refs if not _ready(ray, ref)])
            raise
        finally:
            ray.kill(events)

    def _drain(self, events: Any) -> None:
        try:
            batch = self.ray.get(events.since.remote(self.seen), timeout=_EVENT_TIMEOUT)
        except Exception:  # progress is best effort (the next read gets what this one missed)
            return
        self.seen += len(batch)
        for event in batch:
            index = int(event["index"])
            if index in self.finished:
                continue  # an event that arrived after the build's result
            label = self.specs[index].label
            where = self.node_name(str(event["node"]))
            if event["event"] == "started":
                tried = self.attempts[index]
                if tried:
                    attempt = len(tried) + 1
                    say(
                        f"{label}: the attempt on Ray node {tried[-1]} was lost (its node or worker died); "
                        f"retrying on {where} (attempt {attempt} of {self.settings.max_retries + 1})"
                    )
                tried.append(where)
                self.tasks[index].update(description=f"{label}: running on {where}")
                say(f"{label}: running on Ray node {where}")
            elif event["event"] == "say":
                say(f"{event['message']} [on {where}]")

    def _finish(self, index: int, ref: Any) -> BuildReport:
        self.finished.add(index)
        spec = self.specs[index]
        tried = self.attempts[index]
        try:
            data = self.ray.get(ref)
        except self.ray.exceptions.TaskCancelledError:
            raise KeyboardInterrupt from None
        except self.ray.exceptions.RayError as exc:
            report = BuildReport.assemble(spec, status=BuildStatus.FAILED, error=self._task_error(spec, exc))
        else:
            where = self.node_name(str(data["node"]))
            if not tried or tried[-1] != where:
                tried.append(where)  # its "started" event may reach the log after the result
            report = report_from_worker(spec, data, where)
            if report.ok:
                report = self._place(spec, report)
        lost = tried[:-1] if report.ok or len(tried) > self.settings.max_retries else tried
        if lost:
            report.messages.append(f"retried after losing the attempt on Ray node(s) {', '.join(lost)}")
        status = str(report.status) if report.ok else f"failed (exit {report.exit_code})"
        if tried:
            self.tasks[index].update(description=f"{spec.label} on {tried[-1]}")
        self.tasks[index].done(status)
        return report

    def _task_error(self, spec: BuildSpec, exc: Exception) -> NeuroncError:
        """A task that ended without a report: its nodes died (every attempt) or it could not start there."""
        tried = self.attempts[spec_index(self.specs, spec)]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f" on Ray node(s) {', '.join(tried)}" if tried else ""
        cause = getattr(exc, "cause", None)
        if isinstance(exc, self.ray.exceptions.RayTaskError) and not isinstance(cause, ImportError):
            # The build's own code raised something that is not a NeuroncError: a bug, exit 1.
            return NeuroncError(f"{spec.label}: the build's task failed{where}: {type(cause).__name__}: {cause}")
        msg = f"{spec.label}: the build's task ended without a result{where}: {type(exc).__name__}: {first}"
        hint = (
            "a node that dies is retried on another (--ray-retries); a node must have neuronc and the backend's "
            "SDK (--ray-runtime-env or the cluster's image)"
        )
        return EnvironmentIncompatibleError(msg, details=[f"attempts: {len(tried)}"], hint=hint)

    def _place(self, spec: BuildSpec, report: BuildReport) -> BuildReport:
        """Name the bundle as the store does (a node's local cache path means nothing here); --out copies it."""
        assert report.config_hash is not None and report.toolchain_key is not None
        try:
            located = self.store.locate(report.config_hash, report.toolchain_key)
            if located is not None:
                report.bundle = located
            if self.options.out_dir is not None:
                from neuronc.pipeline.out import bundle_dirname, place_bundle

                local = self.store.lookup(report.config_hash, report.toolchain_key)
                if local is None:
                    msg = f"{spec.label}: the store has no bundle for the build a node made"
                    raise EnvironmentIncompatibleError(msg)
                dest = self.options.out_dir
                if self.options.out_subdir:
                    dest = dest / bundle_dirname(spec, report.config_hash)
                place_bundle(local, dest)
                report.out = str(dest)
        except NeuroncError as exc:
            fields = {k: getattr(report, k) for k in ("config_hash", "toolchain_key", "toolchain_label", "bundle")}
            return BuildReport.assemble(spec, status=BuildStatus.FAILED, error=exc, messages=report.messages, **fields)
        return report

    def _cancel(self, pending: list[Any]) -> None:
        """Ctrl-C: each task gets KeyboardInterrupt (it cleans up as a local build does); after the
        grace period what still runs is killed. Nothing is published half-written either way."""
        if not pending:
            return
        say(f"interrupted: cancelling {len(pending)} build(s) on the Ray cluster")
        for ref in pending:
            self.ray.cancel(ref, force=False)
        _, still = self.ray.wait(pending, num_returns=len(pending), timeout=self.settings.cancel_grace_seconds)
        for ref in still:
            self.ray.cancel(ref, force=True)


def spec_index(specs: Sequence[BuildSpec], spec: BuildSpec) -> int:
    return next(i for i, s in enumerate(specs) if s is spec)


def _ready(ray: Any, ref: Any) -> bool:
    done, _ = ray.wait([ref], timeout=0)
    return bool(done)


def _for_nodes(spec: BuildSpec) -> BuildSpec:
    """The spec as a node needs it: the profile's path absolute (a model directory relative to the
    profile is found from it, on a file system every node mounts)."""
    if not spec.profile_path:
        return spec
    return spec.model_copy(update={"profile_path": str(Path(spec.profile_path).resolve())})


__all__ = ["RayExecutor", "placement"]
