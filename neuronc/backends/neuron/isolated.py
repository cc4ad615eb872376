"""A Neuron compile in its own process: ``python -m neuronc.backends.neuron.worker JOB RESULT``.

The child's working directory is the build's work directory, its environment is set for that build
only (``compile_env``), and its stdout and stderr, which is where neuronx-cc writes, go to
``logs/compile.log`` in the bundle. Two builds in one neuronc process therefore never see each
other's environment, and a compiler crash cannot take neuronc down with it. The job and the result
travel as JSON files; progress comes back as JSON lines in an events file.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.backends.base import CompiledGraph, CompileJob, CompilePlan, CompileResult, GraphSpec
from neuronc.backends.neuron.files import collect_compiler_logs
from neuronc.backends.worker import Workers, worker_command, worker_env
from neuronc.errors import CompileError, log_tail
from neuronc.progress import ProgressTask

if TYPE_CHECKING:
    from neuronc.backends.neuron.common import NeuronBackend

COMPILE_LOG = "compile.log"
EVENTS_FILE = "neuronc-events.jsonl"
WORKER_MODULE = "neuronc.backends.neuron.worker"
_LOGGED_ENV = frozenset({"BASE_COMPILE_WORK_DIR", "TMPDIR", "PYTHONPATH"})
_TAIL_LINES = 30


def job_to_json(job: CompileJob, backend: str) -> dict[str, Any]:
    return {
        "backend": backend,
        "spec": job.spec.model_dump(mode="json"),
        "plan": job.plan.to_json(),
        "checkpoint_dir": str(job.checkpoint_dir),
        "artifacts_dir": str(job.artifacts_dir),
        "logs_dir": str(job.logs_dir),
        "work_dir": str(job.work_dir),
        "weights_dir": str(job.weights_dir) if job.weights_dir else None,
        "jobs": job.jobs,
        "env": dict(job.env),
    }


def job_from_json(data: Mapping[str, Any]) -> CompileJob:
    from neuronc.spec import BuildSpec

    plan = data["plan"]
    graphs = tuple(GraphSpec(g["role"], int(g["batch"]), int(g["bucket"])) for g in plan["graphs"])
    return CompileJob(
        spec=BuildSpec.model_validate(data["spec"]),
        plan=CompilePlan(graphs=graphs, weights_layout=plan["weights_layout"], notes=tuple(plan["notes"])),
        checkpoint_dir=Path(data["checkpoint_dir"]),
        artifacts_dir=Path(data["artifacts_dir"]),
        logs_dir=Path(data["logs_dir"]),
        work_dir=Path(data["work_dir"]),
        weights_dir=Path(data["weights_dir"]) if data.get("weights_dir") else None,
        jobs=int(data["jobs"]),
        env=dict(data.get("env") or {}),
    )


def result_to_json(result: CompileResult) -> dict[str, Any]:
    graphs = [
        {
            "graph": g.graph.to_json(),
            "artifact": g.artifact,
            "compile_seconds": g.compile_seconds,
            "cache_hit": g.cache_hit,
        }
        for g in result.graphs
    ]
    return {"graphs": graphs, "extra": result.extra}


def result_from_json(data: Mapping[str, Any]) -> CompileResult:
    graphs = []
    for g in data["graphs"]:
        spec = g["graph"]
        graphs.append(
            CompiledGraph(
                graph=GraphSpec(spec["role"], int(spec["batch"]), int(spec["bucket"])),
                artifact=g["artifact"],
                compile_seconds=float(g["compile_seconds"]),
                cache_hit=bool(g.get("cache_hit", False)),
            )
        )
    return CompileResult(graphs=graphs, extra=dict(data.get("extra") or {}))


class EventSink:
    """A ProgressSink for the child: each advance is one JSON line the parent reads back."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def task(self, description: str, total: float | None = None, unit: str = "") -> _EventTask:
        return _EventTask(self._path, description)


class _EventTask:
    def __init__(self, path: Path, description: str) -> None:
        self._path = path
        self._description = description

    def _emit(self, **event: object) -> None:
        with self._path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"task": self._description, **event}) + "\n")

    def advance(self, amount: float = 1) -> None:
        self._emit(advance=amount)

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        if description:
            self._emit(description=description)

    def done(self, status: str | None = None) -> None:
        pass


class _EventReplay:
    """Reads the child's events file as it grows and replays the complete lines on a progress task."""

    def __init__(self, path: Path, task: ProgressTask) -> None:
        self._path = path
        self._task = task
        self._offset = 0

    def __call__(self) -> None:
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        complete, newline, _ = chunk.rpartition(b"\n")
        self._offset += len(complete) + len(newline)
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if "advance" in event:
                self._task.advance(float(event["advance"]))
            elif "description" in event:
                self._task.update(description=str(event["description"]))


def run_isolated(backend: NeuronBackend, job: CompileJob, *, python: str | None = None) -> CompileResult:
    """Run ``backend.compile_in_process(job)`` in a child process; raise CompileError with the log tail."""
    for directory in (job.work_dir, job.logs_dir, job.artifacts_dir):
        directory.mkdir(parents=True, exist_ok=True)
    env_vars = backend.compile_env(job)
    Path(env_vars.get("TMPDIR", job.work_dir / "tmp")).mkdir(parents=True, exist_ok=True)
    job_file = job.work_dir / "neuronc-job.json"
    result_file = job.work_dir / "neuronc-result.json"
    events_file = job.work_dir / EVENTS_FILE
    for stale in (result_file, events_file):
        stale.unlink(missing_ok=True)
    job_file.write_text(json.dumps(job_to_json(job, backend.name), indent=2), encoding="utf-8")
    log_path = job.logs_dir / COMPILE_LOG
    child_env = worker_env(os.environ, env_vars)
    cmd = worker_command(WORKER_MODULE, [str(job_file), str(result_file)], python)
    task = job.progress.task(f"{backend.name}: compile {len(job.plan.graphs)} graph(s)", total=len(job.plan.graphs))
    with log_path.open("ab") as log:
        log.write(f"$ {shlex.join(cmd)}\n".encode())
        for key in sorted(env_vars):
            # Values of variables neuronc did not set itself may be secrets: show their names only.
            shown = env_vars[key] if key.startswith("NEURON") or key in _LOGGED_ENV else "<set>"
            log.write(f"  {key}={shown}\n".encode())
        log.flush()
        ended = Workers(job.pool, job.host_compile_bytes).run(
            cmd, env=child_env, cwd=job.work_dir, log=log, poll=_EventReplay(events_file, task)
        )
    collect_compiler_logs(job.work_dir, job.logs_dir)
    outcome: dict[str, Any] = {}
    if result_file.is_file():
        outcome = json.loads(result_file.read_text(encoding="utf-8"))
    error = outcome.get("error")
    if isinstance(error, dict) and error.get("neuronc"):
        task.done("failed")
        raise _neuronc_error(error)
    if ended.returncode != 0 or "result" not in outcome:
        task.done("failed")
        what = f"exit code {ended.returncode}" if ended.returncode else "no result"
        if isinstance(error, dict):
            what = f"{error.get('type')}: {error.get('message')}"
        msg = f"{backend.name} compile failed after {ended.seconds:.0f}s ({what})"
        tail = log_tail(log_path, _TAIL_LINES)
        raise CompileError(
            msg,
            details=[f"last lines of {log_path}:", *(f"  {line}" for line in tail)],
            hint=f"full compiler output: {log_path}",
            log_path=str(log_path),
        )
    task.done()
    result = result_from_json(outcome["result"])
    result.extra.setdefault("compile_wall_seconds", round(ended.seconds, 3))
    return result


def _neuronc_error(error: Mapping[str, Any]) -> Exception:
    """The neuronc error the child raised, rebuilt from its JSON (same class, message, hint, details)."""
    from neuronc import errors

    cls = getattr(errors, str(error.get("class")), errors.NeuroncError)
    if not (isinstance(cls, type) and issubclass(cls, errors.NeuroncError)):
        cls = errors.NeuroncError
    details = [str(d) for d in error.get("details") or []]
    return cls(str(error.get("message")), hint=error.get("hint"), details=details)
