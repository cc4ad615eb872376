"""One vllm-neuron compile: run the plugin's own compile (the vLLM engine in CPU compile mode) and keep
what it wrote.

The checkpoint goes into the bundle first (``artifacts/checkpoint``: safetensors, config and tokenizer,
as the plugin loads them: it shards HF safetensors on load, vllm-neuron
docs/design/framework/checkpoint_loading.md), then ``compile_script.py`` constructs ``vllm.LLM`` with
the build's engine arguments and a staging ``VLLM_CACHE_ROOT``, on this host or in the release's DLC
image. In the container the staging bundle is mounted where the served bundle will be
(``/bundle``), so the engine sees the same checkpoint path at compile and at serve time.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.backends.base import CompileJob, CompileResult
from neuronc.backends.containers import (
    Mount,
    Runtime,
    container_argv,
    pinned_image,
    pull_allowed,
    remove_container,
)
from neuronc.backends.neuron.env import platform_target
from neuronc.backends.neuron.files import copy_checkpoint, even_split
from neuronc.backends.support import Image, Release, pin_mismatches
from neuronc.backends.vllm_neuron.cache import collect
from neuronc.backends.vllm_neuron.engine import (
    CACHE_DIR,
    CHECKPOINT_DIR,
    CONTAINER_BUNDLE,
    engine_cli,
    engine_kwargs,
    logical_nc,
)
from neuronc.backends.vllm_neuron.facts import (
    BLOCKS_OVERRIDE,
    CACHE_ROOT_ENV,
    CPU_COMPILE_ENV,
    FAIL_ON_MISS_ENV,
    KV_SIZING_ENV,
    LNC_ENV,
    PLUGIN_ENV,
    ROUTE_ENV,
    TARGET_ENV,
    env_value_problem,
    plugin_env,
    route_to_set,
    shapes_graphs,
)
from neuronc.backends.vllm_neuron.localfs import local_cache_root
from neuronc.backends.worker import Workers
from neuronc.errors import CompileError, EnvironmentIncompatibleError, InvalidInputError, log_tail

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

COMPILE_LOG = "compile.log"
SCRIPT = "compile_script.py"
CONTAINER_WORK = "/neuronc"
_TAIL_LINES = 30


@dataclass(frozen=True)
class RunnerPlan:
    """Where one build compiles, and with what."""

    kind: str  # host | docker | podman
    release: Release
    plugin: str  # the vllm-neuron version that compiles (names the cache variables)
    runtime: Runtime | None = None
    image: Image | None = None  # the release's image from the support matrix
    reference: str | None = None  # what to run: the image's tag, or NEURONC_VLLM_NEURON_IMAGE

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "release": self.release.version, "plugin": self.plugin}
        if self.reference is not None:
            data["image"] = self.reference
        return data


# Runtime placement on the serving host (which NeuronCores): the host's to choose, never replayed.
PLACEMENT_ENV = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")


def route(plugin: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The compile route: ``VLLM_NEURON_BACKEND`` as set here, else the value neuronc gives it for the
    plugin line (none below 0.29: the variable stays unset, the plugin's own default; facts.route_to_set)."""
    env = os.environ if environ is None else environ
    return env.get(ROUTE_ENV) or route_to_set(plugin)


def recorded_env(plugin: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``VLLM_NEURON_*`` / ``NEURON_*`` variable set here that can change what is compiled: the
    manifest records them and the serve lines replay them. Not the ones neuronc sets for the compile
    itself (CPU compile, target, LNC, route), the no-compile switches (the server sets them), nor any
    that shapes no graph (``facts.shapes_graphs``: cache switches and locations, timeouts, worker
    counts, the runtime's settings and core placement). A value no serving file can carry is refused
    (exit 2)."""
    env = os.environ if environ is None else environ
    names = plugin_env(plugin)
    own = {CPU_COMPILE_ENV, TARGET_ENV, LNC_ENV, ROUTE_ENV, FAIL_ON_MISS_ENV, names.disable_graph_capture}
    own |= {line.disable_graph_capture for line in PLUGIN_ENV.values()}
    kept = {k: v for k, v in env.items() if shapes_graphs(k) and k not in own}
    for key, value in kept.items():
        problem = env_value_problem(key, value)
        if problem is not None:
            raise InvalidInputError(
                f"{key} in this environment {problem}", hint=f"unset {key} or give it a plain value"
            )
    return dict(sorted(kept.items()))


def compile_env(spec: BuildSpec, plugin: str, cache_root: str, jobs: int) -> dict[str, str]:
    """The variables of the compile: this environment's recorded ones, CPU compile mode for the build's
    target and LNC, the route (when it is set), a staging cache. The parallel compile workers are the
    plugin's to choose (its default 8, "bounded by available CPU and memory": cpu_compilation.md)
    unless this environment sets the line's variable, which is passed on (never recorded: it shapes no
    graph). ``jobs`` is neuronc's own pool size, not the plugin's."""
    del jobs  # the plugin runs its own workers (above)
    names = plugin_env(plugin)
    env = recorded_env(plugin)
    env.update(
        {
            CPU_COMPILE_ENV: "1",
            TARGET_ENV: platform_target(spec.target),
            LNC_ENV: str(logical_nc(spec)),
            CACHE_ROOT_ENV: cache_root,
            # Everything it reads is in the bundle: never the network.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    chosen = route(plugin)
    if chosen:
        env[ROUTE_ENV] = chosen
    workers = os.environ.get(names.parallel_workers)
    if workers and env_value_problem(names.parallel_workers, workers) is None:
        env[names.parallel_workers] = workers
    return env


def kv_sizing_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The KV sizing variables set here: they shape every NEFF, so the server must set them the same."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in KV_SIZING_ENV if name in env}


def _write_log_header(log: Path, cmd: list[str], env: Mapping[str, str]) -> None:
    with log.open("ab") as f:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        for key in sorted(env):
            f.write(f"  {key}={env[key]}\n".encode())


def run_compile(job: CompileJob, plan: RunnerPlan) -> CompileResult:
    """Copy the checkpoint in, run the engine where ``plan`` says, collect the cache into the bundle."""
    for directory in (job.work_dir, job.logs_dir, job.artifacts_dir):
        directory.mkdir(parents=True, exist_ok=True)
    checkpoint = job.artifacts_dir / "checkpoint"
    cache_root, temporary = local_cache_root(job.work_dir)  # before anything is copied or compiled
    try:
        copy_checkpoint(job.checkpoint_dir, checkpoint, with_config=True)
        return _compile_into(job, plan, checkpoint, cache_root)
    finally:
        if temporary:
            shutil.rmtree(cache_root, ignore_errors=True)


def _compile_into(job: CompileJob, plan: RunnerPlan, checkpoint: Path, cache_root: Path) -> CompileResult:
    """Run the engine with ``cache_root`` (on a local filesystem) as its cache; collect it into the bundle."""
    spec = job.spec
    shutil.rmtree(cache_root, ignore_errors=True)
    cache_root.mkdir(parents=True)
    (job.work_dir / "home").mkdir(exist_ok=True)
    script = job.work_dir / SCRIPT
    script.write_text(resources.files(__package__).joinpath(SCRIPT).read_text(encoding="utf-8"), encoding="utf-8")
    job_file, result_file = job.work_dir / "job.json", job.work_dir / "result.json"
    result_file.unlink(missing_ok=True)
    log = job.logs_dir / COMPILE_LOG
    in_container = plan.kind != "host"
    if in_container:
        model_path = f"{CONTAINER_BUNDLE}/{CHECKPOINT_DIR}"
        env = compile_env(spec, plan.plugin, f"{CONTAINER_WORK}/vllm-cache", job.jobs)
        env["HOME"] = f"{CONTAINER_WORK}/home"
    else:
        model_path = str(checkpoint)
        env = compile_env(spec, plan.plugin, str(cache_root), job.jobs)
    kwargs = engine_kwargs(spec, model_path)
    job_file.write_text(json.dumps({"engine_kwargs": kwargs}, indent=2), encoding="utf-8")
    task = job.progress.task(f"vllm-neuron: compile {len(job.plan.graphs)} graph(s)", total=len(job.plan.graphs))
    pinned: str | None = None
    workers = Workers()
    if in_container:
        assert plan.runtime is not None and plan.reference is not None
        pinned = pinned_image(plan.runtime, plan.reference, allow_pull=pull_allowed(), log=log, env=os.environ)
        name = f"neuronc-vllm-neuron-{os.getpid()}-{secrets.token_hex(4)}"
        mounts = [Mount(job.work_dir, CONTAINER_WORK), Mount(checkpoint, model_path, read_only=True)]
        if cache_root != job.work_dir / "vllm-cache":  # staged off a remote work directory
            mounts.append(Mount(cache_root, f"{CONTAINER_WORK}/vllm-cache"))
        command = [
            "python",
            f"{CONTAINER_WORK}/{SCRIPT}",
            f"{CONTAINER_WORK}/job.json",
            f"{CONTAINER_WORK}/result.json",
        ]
        cmd = container_argv(
            plan.runtime,
            pinned,
            command,
            mounts=mounts,
            env=env,
            name=name,
            workdir=CONTAINER_WORK,
            tp_degree=spec.tp_degree,
        )
        _write_log_header(log, cmd, {})
        try:
            with log.open("ab") as out:
                ended = workers.run(cmd, env=dict(os.environ), cwd=job.work_dir, log=out)
        except BaseException:
            remove_container(plan.runtime, name, os.environ)
            raise
    else:
        cmd = [sys.executable, str(script), str(job_file), str(result_file)]
        _write_log_header(log, cmd, env)
        with log.open("ab") as out:
            ended = workers.run(cmd, env={**os.environ, **env}, cwd=job.work_dir, log=out)
    outcome: dict[str, Any] = {}
    if result_file.is_file():
        outcome = json.loads(result_file.read_text(encoding="utf-8"))
    if ended.returncode != 0 or "error" in outcome or "seconds" not in outcome:
        task.done("failed")
        error = outcome.get("error")
        what = f"{error.get('type')}: {error.get('message')}" if isinstance(error, dict) else f"exit {ended.returncode}"
        raise CompileError(
            f"vllm-neuron compile failed after {ended.seconds:.0f}s ({what})",
            details=[f"last lines of {log}:", *(f"  {line}" for line in log_tail(log, _TAIL_LINES))],
            hint=f"full output: {log}",
            log_path=str(log),
        )
    versions = {str(k): (str(v) if v is not None else None) for k, v in dict(outcome.get("versions") or {}).items()}
    if plan.image is not None:
        _check_image_versions(plan, versions)
    blocks = _kv_blocks(outcome, kwargs, log)
    entries = collect(cache_root, job.artifacts_dir / "vllm-cache")
    task.advance(len(job.plan.graphs))
    task.done()
    seconds = float(outcome["seconds"])
    # The server gets the block count the compile sized (or was given): the KV shape is in every graph.
    pinned_kwargs = {**kwargs, BLOCKS_OVERRIDE: blocks}
    recorded_kwargs = {**pinned_kwargs, "model": CHECKPOINT_DIR, "tokenizer": CHECKPOINT_DIR}
    runner = plan.to_json()
    if pinned is not None:
        runner["pinned"] = pinned
        runner["runtime"] = plan.runtime.kind if plan.runtime else None
    extra = {
        "vllm_neuron": {
            "release": plan.release.version,
            "plugin": plan.plugin,
            "vllm": versions.get("vllm"),
            "runner": runner,
            "target": str(spec.target),
            "platform_target": platform_target(spec.target),
            "logical_nc_config": logical_nc(spec),
            "checkpoint": CHECKPOINT_DIR,
            "cache_root": CACHE_DIR,
            "cache_keys": [e.key for e in entries],
            "cache_entries": [e.to_json() for e in entries],
            "engine_kwargs": recorded_kwargs,
            "engine_args": engine_cli(pinned_kwargs),
            "kv_sizing_env": kv_sizing_env(),
            "route": env.get(ROUTE_ENV),
            "num_gpu_blocks": blocks,
            "compile_env": recorded_env(plan.plugin),
            "versions_in_runner": versions,
            "python": outcome["python"] if isinstance(outcome.get("python"), str) else None,
        },
        "timing": "the engine compiles every bucket in one warm-up; per-graph seconds are its total split evenly",
    }
    return CompileResult(graphs=even_split(job.plan.graphs, CACHE_DIR, seconds), extra=extra)


def _kv_blocks(outcome: Mapping[str, Any], kwargs: Mapping[str, Any], log: Path) -> int:
    """The KV block count the engine reported: the override when the profile gave one (it must be that)."""
    blocks = outcome.get("num_gpu_blocks")
    given = kwargs.get(BLOCKS_OVERRIDE)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise CompileError(
            "the vllm-neuron engine reported no KV block count (vllm_config.cache_config.num_gpu_blocks)",
            hint=f"set options.num_gpu_blocks_override in the profile to pin it; the compile log is {log}",
            log_path=str(log),
        )
    if given is not None and blocks != given:
        msg = f"the engine sized {blocks} KV blocks although num_gpu_blocks_override was {given}"
        raise CompileError(msg, hint=f"see {log}", log_path=str(log))
    return blocks


def _check_image_versions(plan: RunnerPlan, found: Mapping[str, str | None]) -> None:
    """The image must ship the versions the support matrix records for it (the toolchain key says so)."""
    assert plan.image is not None
    # What the DLC pins (neuronx-cc, NKI, libtorch-neuronx-lite); vLLM, vllm-neuron and torch are recorded.
    wrong = [
        f"{name}: expected {version}, the image has {have or 'none'}"
        for name, version, have in pin_mismatches(plan.image, found, strict=False)
    ]
    if wrong:
        msg = f"{plan.reference} does not hold the versions of Neuron SDK {plan.release.version}'s image"
        raise EnvironmentIncompatibleError(msg, details=wrong, hint="use the release's own image (unset the override)")


__all__ = [
    "COMPILE_LOG",
    "PLACEMENT_ENV",
    "RunnerPlan",
    "compile_env",
    "kv_sizing_env",
    "recorded_env",
    "route",
    "run_compile",
]
