"""What runs on a node of the Ray cluster: one build, through the same ``build_one`` a local compile runs.

The task builds what the driver resolved (``BuildIdentity``: the commit, the key, the toolchain): it
never resolves the model's revision again, and a node whose toolchain or environment would give
another key fails that build (exit 5, naming what differs) rather than publish a key the driver never
selected. It looks the key up in the shared store and on a miss compiles and publishes it there. It
sends what happens to the driver through a Ray queue (started on which node, messages for people)
and returns the report as JSON, which the driver turns back into a ``BuildReport`` (``report_from_worker``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from neuronc.errors import CompileError, NeuroncError
from neuronc.pipeline.identity import BuildIdentity
from neuronc.pipeline.report import BuildReport, BuildStatus, NearestBundle, StageReport
from neuronc.resources import WorkPool
from neuronc.spec import BuildSpec

# How often the task's thread looks up from waiting for the build (a cancel arrives in between), and
# how long a cancelled build gets to stop its workers and remove its staging directory.
_STEP_SECONDS = 0.2
_CANCEL_SECONDS = 20.0
# How long a task waits for the driver's event log to have its "started" event (best effort).
_ANNOUNCE_SECONDS = 10.0


class EventLog:
    """What the tasks of a run tell the driver (a Ray actor: ``ray.remote(EventLog)``).

    Tasks call ``put.remote(event)`` and never wait for it: a task blocked in ``ray.get`` gives its
    CPUs back to Ray, which would then start another build on the same node. The driver reads what
    it has not seen yet (``since(seen)``); the log keeps every event, so a read the driver gave up
    waiting for loses nothing (a run's events are a few per build).
    """

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []

    def put(self, event: dict[str, Any]) -> None:
        self._events.append(event)

    def since(self, seen: int) -> list[dict[str, Any]]:
        return self._events[seen:]


def _announce(events: Any, event: dict[str, Any]) -> None:
    """Put the attempt's "started" event and see it arrive before the build begins.

    A node can die moments after the build starts; an event still queued on it dies too, and the
    driver would not know this attempt ever ran (its report names the attempts it lost). The wait is
    polled with ``ray.wait(timeout=0)`` and a sleep, not a blocking ``ray.get``: a task blocked in Ray
    gives its CPUs back, and Ray may start another build on this node meanwhile.
    """
    import time

    import ray

    try:
        ref = events.put.remote(event)
        deadline = time.monotonic() + _ANNOUNCE_SECONDS
        while time.monotonic() < deadline:
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                return
            time.sleep(0.05)
    except Exception:  # the driver's event log is gone: the build goes on without progress
        return


def run_build(payload: Mapping[str, Any], events: Any) -> dict[str, Any]:
    """Build ``payload['spec']`` into the store at ``payload['store']`` on this node (a Ray task body)."""
    import ray

    from neuronc.build import Build
    from neuronc.pipeline.messages import logging_to
    from neuronc.pipeline.run import BuildOptions, build_one

    node = ray.get_runtime_context().get_node_id()
    index = int(payload["index"])

    def emit(kind: str, **fields: Any) -> None:
        try:
            events.put.remote({"index": index, "event": kind, "node": node, **fields})
        except Exception:  # the driver's event log is gone: the build goes on without progress
            pass

    _announce(
        events, {"index": index, "event": "started", "node": node, "pid": os.getpid(), "host": socket.gethostname()}
    )
    # A process boundary: the spec arrives as JSON and becomes a Build here, once.
    build = Build.received(BuildSpec.model_validate(payload["spec"]))
    identity = BuildIdentity.from_json(payload["identity"])
    jobs = int(payload["jobs"])
    # The pool lets a cancel reach the build's worker processes (Ray reserved the memory already).
    pool = WorkPool(jobs)
    options = BuildOptions(jobs=jobs, require_hit=bool(payload["require_hit"]), pool=pool)
    outcome: dict[str, Any] = {}

    finished = threading.Event()

    def body() -> None:
        try:
            with logging_to(lambda message: emit("say", message=message)):
                outcome["report"] = build_one(build, store=str(payload["store"]), options=options, identity=identity)
        except BaseException as exc:  # handed to the task's thread, which raises it
            outcome["raised"] = exc
        finally:
            finished.set()

    # The build runs in a thread of its own while this one waits in short steps: ray.cancel raises
    # KeyboardInterrupt in this thread only when it runs Python code, never while it is blocked in a
    # wait. On a cancel the pool stops the build's workers and the build removes its staging directory.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(body,), name="neuronc-build", daemon=True)
    thread.start()
    follow_build(finished, pool)
    if "raised" in outcome:
        raise outcome["raised"]
    report: BuildReport = outcome["report"]
    return {"node": node, "host": socket.gethostname(), "report": report.to_json()}


def follow_build(finished: threading.Event, pool: WorkPool) -> None:
    """Wait for the build thread to set ``finished``; on a cancel, stop it and wait for its cleanup.

    ray.cancel raises KeyboardInterrupt in this (the main) thread. The wait is on an Event, not
    Thread.join: on CPython before 3.13 a KeyboardInterrupt that lands in Thread.join releases the
    running thread's state lock and marks it stopped, so a later join returns at once; the task then
    ended while the build still ran, the driver exited, and Ray killed this worker before the build
    removed its staging directory. After the first cancel, further ones are ignored until the build
    has cleaned up (or ``_CANCEL_SECONDS`` passed; the driver's forced cancel after its grace period
    is the outer bound); then the KeyboardInterrupt goes on.
    """
    try:
        while not finished.wait(_STEP_SECONDS):
            pass
    except KeyboardInterrupt:
        with _interrupts_ignored():
            pool.cancel()
            finished.wait(_CANCEL_SECONDS)
        raise


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT ignored in the main thread (Ray's cancel is ``_thread.interrupt_main``, which does nothing then)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _error_classes(base: type[NeuroncError]) -> dict[str, type[NeuroncError]]:
    found = {base.kind: base}
    for sub in base.__subclasses__():
        for kind, cls in _error_classes(sub).items():
            found.setdefault(kind, cls)
    return found


def error_from_json(data: Mapping[str, Any], where: str) -> NeuroncError:
    """The error a node reported (its class by ``kind``), naming the node it happened on."""
    cls = _error_classes(NeuroncError).get(str(data.get("error")), NeuroncError)
    message = f"{data.get('message')} (on Ray node {where})"
    hint = data.get("hint")
    details = [str(d) for d in data.get("details") or []]
    if issubclass(cls, CompileError):
        log_path = data.get("log_path")
        if log_path:
            hint = f"{hint}; the log is on that node" if hint else f"compiler log on that node: {log_path}"
        return cls(message, hint=hint, details=details, log_path=log_path)
    return cls(message, hint=hint, details=details)


def report_from_worker(spec: BuildSpec, data: Mapping[str, Any], where: str) -> BuildReport:
    """The driver's ``BuildReport`` of a build a node ran (``spec`` as the driver loaded it)."""
    from neuronc.bundle import Graph

    raw = data["report"]
    nearest = raw.get("nearest")
    fields: dict[str, Any] = {
        "config_hash": raw.get("config_hash"),
        "graphs_key": raw.get("graphs_key"),
        "weights_key": raw.get("weights_key"),
        "rebound_from": raw.get("rebound_from"),
        "toolchain_key": raw.get("toolchain_key"),
        "toolchain_label": raw.get("toolchain_label"),
        "bundle": raw.get("bundle"),
        "graphs": [Graph.model_validate(g) for g in raw.get("graphs") or []],
        "stages": [
            StageReport(s["name"], float(s["wall_seconds"]), s.get("peak_rss_bytes"), s.get("children_peak_rss_bytes"))
            for s in raw.get("stages") or []
        ],
        "wall_seconds": float(raw.get("wall_seconds") or 0.0),
        "nearest": NearestBundle(**nearest) if nearest else None,
        "messages": [*list(raw.get("messages") or []), f"ran on Ray node {where}"],
    }
    if raw.get("error"):
        error = error_from_json(raw["error"], where)
        return BuildReport.assemble(spec, status=BuildStatus.FAILED, error=error, **fields)
    return BuildReport.for_spec(spec, BuildStatus(raw["status"]), exit_code=int(raw.get("exit_code") or 0), **fields)


__all__ = ["EventLog", "error_from_json", "follow_build", "report_from_worker", "run_build"]
