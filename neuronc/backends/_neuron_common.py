"""What the four Neuron backends share: availability, the per-build environment, isolated compiles.

Nothing here imports torch or the Neuron SDK. A Neuron compile runs in a child Python process
(``python -m neuronc.backends._neuron_worker``) whose working directory is the build's work
directory, whose environment is set for that build only (NEURON_CC_FLAGS, NEURON_COMPILE_CACHE_URL,
BASE_COMPILE_WORK_DIR, NEURON_PLATFORM_TARGET_OVERRIDE on hosts without a Neuron device) and whose
stdout and stderr, which is where neuronx-cc writes, go to ``logs/compile.log`` in the bundle.
Two builds in one neuronc process therefore never see each other's environment, and a compiler
crash cannot take neuronc down with it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends.base import (
    BackendBase,
    CompiledGraph,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    SpecProblem,
    distribution_version,
    module_present,
)
from neuronc.errors import BackendUnavailableError, CompileError, InvalidInputError, log_tail
from neuronc.model.files import MODEL_FILES, local_model_dir

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# Import names of the distributions the Neuron backends use (reference/neuron-apis.md §6).
IMPORT_NAMES: dict[str, str] = {
    "neuronx-cc": "neuronxcc",
    "torch-neuronx": "torch_neuronx",
    "libneuronxla": "libneuronxla",
    "neuronx-distributed": "neuronx_distributed",
    "neuronx-distributed-inference": "neuronx_distributed_inference",
    "transformers-neuronx": "transformers_neuronx",
    "optimum-neuron": "optimum.neuron",
    "torch": "torch",
    "transformers": "transformers",
}

# PyPI holds placeholders for the Neuron SDK packages; the real wheels come from the AWS Neuron
# repository. torch-neuronx 1.0 on PyPI raises ImportError("WRONG PACKAGE ..."); the others are
# the only versions PyPI lists and none of them is a Neuron SDK release (reference §0).
PYPI_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "torch-neuronx": frozenset({"1.0"}),
    "neuronx-cc": frozenset({"1.0.post1"}),
    "libneuronxla": frozenset({"1.0"}),
    "neuronx-distributed": frozenset({"0.1"}),
    "neuronx-distributed-inference": frozenset({"0.1.0"}),
    "transformers-neuronx": frozenset({"0.1"}),
}

NEURON_EXTRA_INDEX = "https://pip.repos.neuron.amazonaws.com"

# neuronx-cc's compile target for each profile target. inf2 and trn1 share the NeuronCore-v2
# architecture; optimum-neuron and torch-neuronx both compile inf2 as trn1 (reference §3.1, §4.1).
PLATFORM_TARGET: dict[str, str] = {"inf2": "trn1", "trn1": "trn1", "trn2": "trn2"}

# The persistent compile cache's default location (libneuronxla, reference §3.4).
DEFAULT_COMPILE_CACHE = "/var/tmp/neuron-compile-cache"

# Flags that choose where the persistent cache lives; libneuronxla consumes them, neuronx-cc never sees them.
_CACHE_FLAGS = ("--cache_dir", "--no_cache", "--no-cache", "--retry_failed_compilation")

COMPILE_LOG = "compile.log"
_LOGGED_ENV = frozenset({"BASE_COMPILE_WORK_DIR", "TMPDIR", "PYTHONPATH"})
# Where a load snippet stored in a manifest says the bundle is; `inspect` shows it as written.
BUNDLE_PLACEHOLDER = "/path/to/this/bundle"
_TAIL_LINES = 30


def neuron_device_present(proc_devices: Path = Path("/proc/devices"), dev: Path = Path("/dev")) -> bool:
    """Whether this host has a Neuron device: /dev/neuron0, or a ``neuron`` line in /proc/devices."""
    if (dev / "neuron0").exists():
        return True
    try:
        text = proc_devices.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.split()[-1:] == ["neuron"] for line in text.splitlines())


def platform_target(target: str) -> str:
    """The neuronx-cc / NEURON_PLATFORM_TARGET_OVERRIDE value for a profile target."""
    return PLATFORM_TARGET[target]


def logical_nc_config(spec: BuildSpec) -> int:
    """Logical NeuronCore size: the profile option, else 2 on trn2 and 1 elsewhere (as NxDI decides)."""
    value = spec.options.get("logical_nc_config")
    if value is None:
        return 2 if spec.target == "trn2" else 1
    return int(value)


def split_cache_flags(flags: Iterable[str]) -> tuple[list[str], list[str]]:
    """Separate compiler flags from the cache-location flags libneuronxla consumes."""
    compiler: list[str] = []
    cache: list[str] = []
    for flag in flags:
        (cache if flag.startswith(_CACHE_FLAGS) else compiler).append(flag)
    return compiler, cache


def has_flag(flags: Sequence[str], *names: str) -> bool:
    """Whether ``flags`` sets any of ``names`` (as ``--name``, ``--name=value`` or ``--name value``)."""
    return any(f == n or f.startswith(n + "=") for f in flags for n in names)


def build_env(
    spec: BuildSpec,
    job_env: Mapping[str, str],
    work_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    device_present: bool | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables one Neuron build sets for its compile (on top of the inherited ones).

    NEURON_CC_FLAGS carries the effective compiler flags (the profile's, then those already in
    NEURON_CC_FLAGS) plus any cache-location flags the user had there. NEURON_COMPILE_CACHE_URL is
    the user's cache (or the SDK default) so compiles are reused across builds; BASE_COMPILE_WORK_DIR
    is private to this build because NxD wipes it on every trace; TMPDIR keeps compiler scratch files
    inside the work directory. On a host without a Neuron device NEURON_PLATFORM_TARGET_OVERRIDE
    tells the SDK which instance family to compile for.
    """
    from neuronc.keys import effective_compiler_flags

    env = os.environ if environ is None else environ
    flags = effective_compiler_flags(spec, env)
    _, cache_flags = split_cache_flags(shlex.split(env.get("NEURON_CC_FLAGS", "")))
    result: dict[str, str] = {
        "NEURON_CC_FLAGS": shlex.join([*flags, *cache_flags]),
        "NEURON_COMPILE_CACHE_URL": job_env.get("NEURON_COMPILE_CACHE_URL")
        or env.get("NEURON_COMPILE_CACHE_URL")
        or DEFAULT_COMPILE_CACHE,
        "BASE_COMPILE_WORK_DIR": str(work_dir / "nxd") + "/",
        "TMPDIR": str(work_dir / "tmp"),
    }
    present = neuron_device_present() if device_present is None else device_present
    if not present:
        result["NEURON_PLATFORM_TARGET_OVERRIDE"] = platform_target(spec.target)
    result.update(extra or {})
    result.update(job_env)
    return result


def link_or_copy(src: Path, dst: Path) -> None:
    """Put ``src``'s bytes at ``dst`` as a regular file: a hard link when possible, else a copy.

    Hub-cache files are symlinks to blobs, so the link is made to the resolved file; bundles hold
    regular files only.
    """
    real = src.resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(real, dst)
    except OSError:
        shutil.copy2(real, dst)


def checkpoint_weight_files(checkpoint_dir: Path) -> list[Path]:
    """The safetensors files of a Hugging Face checkpoint (and their index), sorted."""
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        msg = f"{checkpoint_dir}: no *.safetensors weights found"
        raise InvalidInputError(msg, hint="Neuron backends read safetensors checkpoints")
    files += sorted(checkpoint_dir.glob("*.safetensors.index.json"))
    return files


def copy_checkpoint(checkpoint_dir: Path, dest: Path, *, with_config: bool = True) -> list[str]:
    """Place a checkpoint's safetensors (and config/tokenizer files) in ``dest``; returns the names."""
    names: list[str] = []
    for path in checkpoint_weight_files(checkpoint_dir):
        link_or_copy(path, dest / path.name)
        names.append(path.name)
    if with_config:
        names += copy_tokenizer_files(checkpoint_dir, dest)
    return names


def copy_tokenizer_files(checkpoint_dir: Path, dest: Path) -> list[str]:
    """Copy config, generation config and tokenizer files that exist in the checkpoint into ``dest``."""
    names = []
    for name in MODEL_FILES:
        src = checkpoint_dir / name
        if src.is_file() and not (dest / name).exists():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src.resolve(), dest / name)
            names.append(name)
    return names


def read_model_config(checkpoint_dir: Path) -> dict[str, Any]:
    """The checkpoint's config.json (its text config for multimodal wrappers)."""
    path = checkpoint_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"{checkpoint_dir}: no config.json"
        raise InvalidInputError(msg) from None
    except ValueError as exc:
        msg = f"{path}: not valid JSON ({exc})"
        raise InvalidInputError(msg) from None
    if not isinstance(data, dict):
        msg = f"{path}: expected a JSON object"
        raise InvalidInputError(msg)
    return data


def model_type_of(checkpoint_dir: Path) -> str:
    config = read_model_config(checkpoint_dir)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        msg = f"{checkpoint_dir / 'config.json'}: no model_type"
        raise InvalidInputError(msg)
    return model_type


def hub_revision_of(checkpoint_dir: Path, spec: BuildSpec) -> str | None:
    """The commit a hub snapshot directory was downloaded at (``.../snapshots/<sha>``), else the profile's."""
    if checkpoint_dir.parent.name == "snapshots" and len(checkpoint_dir.name) == 40:
        return checkpoint_dir.name
    return spec.model.revision


def is_hub_id(spec: BuildSpec) -> bool:
    """Whether the profile names a Hub repository rather than a local directory."""

    base = Path(spec.profile_path).parent if spec.profile_path else None
    return local_model_dir(spec.model.id, base) is None


def check_options(spec: BuildSpec, allowed: Mapping[str, str]) -> None:
    """Reject backend options this backend does not read (a typo would otherwise be silently ignored)."""
    import difflib

    problems = []
    for key in spec.options:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            problems.append(f"options.{key}: not an option of the '{spec.backend}' backend.{hint}")
    if problems:
        known = "; ".join(f"{k}: {v}" for k, v in allowed.items()) or "none"
        msg = f"{spec.name or spec.model.id}: unknown backend option(s) for '{spec.backend}'"
        raise InvalidInputError(msg, details=problems, hint=f"options it reads: {known}")


def even_split(graphs: Sequence[GraphSpec], artifact: str, seconds: float) -> list[CompiledGraph]:
    """Per-graph records when one SDK call compiled every graph into one artifact."""
    each = seconds / max(1, len(graphs))
    return [CompiledGraph(graph=g, artifact=artifact, compile_seconds=each) for g in graphs]


def bundle_rel(job: CompileJob, path: Path) -> str:
    """A path inside the bundle, relative to the bundle root (the artifacts directory's parent)."""
    return path.relative_to(job.artifacts_dir.parent).as_posix()


def collect_compiler_logs(work_dir: Path, logs_dir: Path) -> list[Path]:
    """Copy neuronx-cc's per-graph logs out of the work directory into the bundle's logs."""
    copied = []
    for log in sorted(work_dir.rglob("log-neuron-cc.txt")):
        rel = log.relative_to(work_dir)
        dest = logs_dir / "neuronx-cc" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, dest)
        copied.append(dest)
    return copied


def bundle_line(bundle_dir: str) -> str:
    """The first line of every load snippet: the bundle directory, the one thing a user edits."""
    comment = "  # this bundle's directory" if bundle_dir == BUNDLE_PLACEHOLDER else ""
    return f"bundle = {json.dumps(str(bundle_dir))}{comment}"


def read_manifest(bundle_dir: str | Path) -> dict[str, Any]:
    """A bundle's manifest.json as a dict ({} when missing or unreadable); for load snippets only."""
    try:
        data = json.loads((Path(bundle_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def backend_extra(bundle_dir: str | Path, key: str) -> dict[str, Any]:
    """``manifest.extra[key]`` of a bundle, or {}."""
    value = (read_manifest(bundle_dir).get("extra") or {}).get(key)
    return value if isinstance(value, dict) else {}


# ------------------------------------------------------------------------------------------------
# Job (de)serialisation for the child process
# ------------------------------------------------------------------------------------------------


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
    return {
        "graphs": [
            {
                "graph": g.graph.to_json(),
                "artifact": g.artifact,
                "compile_seconds": g.compile_seconds,
                "cache_hit": g.cache_hit,
            }
            for g in result.graphs
        ],
        "extra": result.extra,
    }


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


# ------------------------------------------------------------------------------------------------
# The shared backend base
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileEnvironment:
    """What a compile ran with, recorded in the manifest's ``extra``."""

    env: dict[str, str]
    device_present: bool

    def to_json(self) -> dict[str, Any]:
        keep = (
            "NEURON_CC_FLAGS",
            "NEURON_COMPILE_CACHE_URL",
            "NEURON_PLATFORM_TARGET_OVERRIDE",
            "NEURON_LOGICAL_NC_CONFIG",
        )
        return {
            "env": {k: self.env[k] for k in keep if k in self.env},
            "neuron_device_present": self.device_present,
        }


class NeuronBackend(BackendBase):
    """A backend whose compile calls the Neuron SDK in an isolated child process."""

    # Neuron backends shard (or not) in their own format; neuronc's rank shards in weights/ are not
    # read by any of them, so the pipeline need not write them.
    consumes_rank_shards: ClassVar[bool] = False
    # Backend options this backend reads, with a one-line description each.
    options_help: ClassVar[dict[str, str]] = {}

    def missing_reason(self, package: str, version: str | None) -> str | None:
        # The Neuron SDK's PyPI names are placeholders that install but cannot run.
        module = IMPORT_NAMES.get(package, package.replace("-", "_"))
        if version is None:
            return package
        if version in PYPI_PLACEHOLDERS.get(package, ()):
            return f"{package} (found {version}, the PyPI placeholder)"
        if not module_present(module):
            return f"{package} (metadata says {version}, but module '{module}' is not importable)"
        return None

    def toolchain_versions(self) -> dict[str, str | None]:
        versions = super().toolchain_versions()
        for package in self.packages:
            if versions.get(package) is None:
                versions[package] = distribution_version(package)
        return versions

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        """The problems ``check_spec_or_raise`` finds, for the profile loader to place."""
        try:
            self.check_spec_or_raise(spec)
        except InvalidInputError as exc:
            return [SpecProblem(("options",), line) for line in (exc.details or [exc.message])]
        return ()

    def check_spec_or_raise(self, spec: BuildSpec) -> None:
        """Backend-specific checks of a spec that the profile schema cannot express."""
        check_options(spec, self.options_help)

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.check_spec_or_raise(spec)
        return super().plan(spec)

    def compile(self, job: CompileJob) -> CompileResult:
        """Check availability, then compile in a child process with this build's environment."""
        availability = self.availability()
        if not availability.available:
            msg = f"backend '{self.name}' cannot compile here: {availability.reason}"
            raise BackendUnavailableError(msg, hint=availability.install_hint)
        self.check_spec_or_raise(job.spec)
        return run_isolated(self, job)

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        """The environment of this build's compile; backends add their own variables."""
        return build_env(job.spec, job.env, job.work_dir)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        """Run the SDK calls in this process (the child calls this; tests call it with SDK doubles)."""
        raise NotImplementedError


def run_isolated(backend: NeuronBackend, job: CompileJob, *, python: str | None = None) -> CompileResult:
    """Run ``backend.compile_in_process(job)`` in a child process; raise CompileError with the log tail."""
    from neuronc import errors

    job.work_dir.mkdir(parents=True, exist_ok=True)
    job.logs_dir.mkdir(parents=True, exist_ok=True)
    job.artifacts_dir.mkdir(parents=True, exist_ok=True)
    env_vars = backend.compile_env(job)
    Path(env_vars.get("TMPDIR", job.work_dir / "tmp")).mkdir(parents=True, exist_ok=True)
    job_file = job.work_dir / "neuronc-job.json"
    result_file = job.work_dir / "neuronc-result.json"
    events_file = job.work_dir / "neuronc-events.jsonl"
    for stale in (result_file, events_file):
        stale.unlink(missing_ok=True)
    job_file.write_text(json.dumps(job_to_json(job, backend.name), indent=2), encoding="utf-8")
    log_path = job.logs_dir / COMPILE_LOG
    child_env = {**os.environ, **env_vars}
    # The child must import this neuronc, even from a source tree that was never installed.
    package_root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH", "")) if p)
    child_env["PYTHONUNBUFFERED"] = "1"
    cmd = [python or sys.executable, "-m", "neuronc.backends._neuron_worker", str(job_file), str(result_file)]
    task = job.progress.task(f"{backend.name}: compile {len(job.plan.graphs)} graph(s)", total=len(job.plan.graphs))
    start = time.monotonic()
    with log_path.open("ab") as log:
        log.write(f"$ {shlex.join(cmd)}\n".encode())
        for key in sorted(env_vars):
            # Values of variables neuronc did not set itself may be secrets: show their names only.
            shown = env_vars[key] if key.startswith("NEURON") or key in _LOGGED_ENV else "<set>"
            log.write(f"  {key}={shown}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=job.work_dir, env=child_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        offset = 0
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    code = None
                offset = _replay_events(events_file, offset, task)
                if code is not None:
                    break
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    seconds = time.monotonic() - start
    collect_compiler_logs(job.work_dir, job.logs_dir)
    outcome: dict[str, Any] = {}
    if result_file.is_file():
        outcome = json.loads(result_file.read_text(encoding="utf-8"))
    error = outcome.get("error")
    if isinstance(error, dict) and error.get("neuronc"):
        task.done("failed")
        cls = getattr(errors, str(error.get("class")), errors.NeuroncError)
        if not (isinstance(cls, type) and issubclass(cls, errors.NeuroncError)):
            cls = errors.NeuroncError
        raise cls(str(error.get("message")), hint=error.get("hint"), details=list(error.get("details") or []))
    if code != 0 or "result" not in outcome:
        task.done("failed")
        what = f"exit code {code}" if code else "no result"
        if isinstance(error, dict):
            what = f"{error.get('type')}: {error.get('message')}"
        msg = f"{backend.name} compile failed after {seconds:.0f}s ({what})"
        tail = log_tail(log_path, _TAIL_LINES)
        raise CompileError(
            msg,
            details=[f"last lines of {log_path}:", *(f"  {line}" for line in tail)],
            hint=f"full compiler output: {log_path}",
            log_path=str(log_path),
        )
    task.done()
    result = result_from_json(outcome["result"])
    result.extra.setdefault("compile_wall_seconds", round(seconds, 3))
    return result


def _replay_events(path: Path, offset: int, task: Any) -> int:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return offset
    complete, _, _ = chunk.rpartition(b"\n")
    for line in complete.decode("utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if "advance" in event:
            task.advance(float(event["advance"]))
        elif "description" in event:
            task.update(description=str(event["description"]))
    return offset + len(complete) + (1 if complete else 0)
