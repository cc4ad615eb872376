"""The embedded default backend: torch.export + AOTInductor on CPU.

Graphs (see docs/inductor.md): one context-encoding graph per (batch, context bucket) and one
token-generation graph per (batch, token bucket), where a token bucket is a KV-length window of a
static cache allocated at ``max_length``; the profile's default token buckets are ``[max_length]``,
so by default there is exactly one token-generation graph. Each graph is exported and compiled by
AOTInductor in a worker process (``inductor.build``: up to ``--jobs`` of them, each compiling
several graphs in turn), into a weightless ``.pt2`` (``package_constants_in_so=False``); the
runtime binds one shared copy of the bundle's weights to every graph.

Every graph has a cache key, and compiled graphs are kept in a graph cache (``inductor.cache``):
a build reuses every graph whose key it has seen, so changing one bucket recompiles one graph.

Importing this module is cheap: torch and transformers are imported by the worker process
(``neuronc.backends.inductor.worker``) and by the runtime, never here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from neuronc.backends.base import (
    GIB,
    ROLE_CONTEXT,
    ROLE_TOKEN,
    BackendBase,
    CompiledGraph,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    HostRamModel,
    SpecProblem,
)
from neuronc.backends.inductor import cache
from neuronc.backends.inductor.build import Pending, build_all
from neuronc.backends.inductor.format import (
    GRAPH_FORMAT,
    INDEX_NAME,
    SUPPORTED_MODEL_TYPES,
    TRUST_CPU_FLAGS_ENV,
    cpu_isa,
    graph_files,
    missing_constants,
    weight_files,
    weight_shapes,
)
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.errors import CheckpointError, CompileError, InvalidInputError
from neuronc.keys import CompilerFlagsMode
from neuronc.spec import ServingStack, StrictModel

if TYPE_CHECKING:
    from neuronc.backends.bucket_rules import BucketRules
    from neuronc.backends.inductor.runner import InductorRunner
    from neuronc.spec import BuildSpec

__all__ = ["GRAPH_FORMAT", "INDEX_NAME", "InductorBackend", "InductorOptions"]

_LOG_TAIL_LINES = 40
_WORKER_MODULE = "neuronc.backends.inductor.worker"


class InductorOptions(StrictModel):
    """``options:`` of the inductor backend."""

    inductor_config: dict[str, Any] = Field(
        default_factory=dict, description="torch._inductor.config names and values for AOTInductor"
    )


class InductorBackend(BackendBase):
    name: ClassVar[str] = "inductor"
    # AOTInductor packages each graph with package_constants_in_so=False (inductor.graphs): the .pt2 holds
    # no parameter, and the runtime binds the bundle's weights/ to every graph (torch
    # torch/_inductor/config.py aot_inductor.package_constants_in_so; torch/_inductor/package/package.py
    # load_package(..., load_weights_from_disk) and AOTICompiledModel.load_constants). What the graphs own
    # are non-persistent buffers (rotary tables) computed from config.json, which the graphs key covers.
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        False,
        "torch._inductor.config.aot_inductor.package_constants_in_so=False; "
        "torch._inductor.package.load_package + AOTICompiledModel.load_constants",
    )
    # Inductor takes no compiler flags (its knobs are options.inductor_config).
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.NONE
    # A 254M-parameter fp32 model (1.0 GB) peaked at 3.5 GB per graph process (measured when this backend
    # was written; docs/inductor.md, "Limits").
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        int(0.5 * GIB), 0.0, int(1.5 * GIB), True, "each graph process loads the model and binds 2× its weights"
    )
    toolchain_package: ClassVar[str | None] = "torch"
    can_run: ClassVar[bool] = True
    # `neuronc serve` (neuronc.serve: continuous batching over the runner ``load`` returns; `deploy --for neuronc`).
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = (ServingStack.neuronc,)
    # This process only loads graphs: torch need not probe the CPU's ISA by compiling test programs.
    process_env: ClassVar[Mapping[str, str]] = TRUST_CPU_FLAGS_ENV
    options_model: ClassVar[type[BaseModel] | None] = InductorOptions
    description: ClassVar[str] = "embedded CPU backend: torch.export + AOTInductor, one graph per bucket"
    targets: ClassVar[frozenset[str]] = frozenset({"cpu"})
    amp: ClassVar[frozenset[str]] = frozenset({"fp32", "bf16"})
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded"})
    packages: ClassVar[tuple[str, ...]] = ("torch", "transformers", "safetensors")
    required: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    install_hint: ClassVar[str | None] = "pip install torch==2.13.0 && pip install 'neuronc[cpu]'"

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        return frozenset({1})

    def tp_degree_problem(self, tp: int, target: str, degrees: Collection[int]) -> str:
        from neuronc.backends import backend_names

        others = [n for n in backend_names() if n != self.name]
        return f"the inductor backend runs tp_degree 1 only; use one of {', '.join(others)} for tensor parallelism"

    def bucket_rules(self, spec: BuildSpec) -> BucketRules:
        """Context buckets: any length up to max_context_length. Token buckets: any length, and
        ``plan`` always adds max_length (so every position can be generated): it is the largest."""
        from neuronc.backends.bucket_rules import BucketRule, BucketRules

        seq = spec.sequence
        token = BucketRule(
            seq.max_length,
            largest=seq.max_length,
            source="the largest is always max_length (the inductor plan adds it)",
        )
        return BucketRules(BucketRule(seq.max_context_length), token)

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        """What compile would refuse, found at validate time (no torch imported)."""
        from neuronc.backends.inductor.options import inductor_config_problems
        from neuronc.model.files import find_model_config

        if spec.tp_degree != 1:
            return [SpecProblem(("tp_degree",), f"the inductor backend runs tp_degree 1 only, got {spec.tp_degree}")]
        problems: list[SpecProblem] = []
        base = Path(spec.profile_path).parent if spec.profile_path else None
        model_type = (find_model_config(spec.model.id, spec.model.revision, base) or {}).get("model_type")
        if isinstance(model_type, str) and model_type not in SUPPORTED_MODEL_TYPES:
            supported = ", ".join(SUPPORTED_MODEL_TYPES)
            message = f"model_type '{model_type}' is not supported by the inductor backend (supported: {supported})"
            problems.append(SpecProblem(("model", "id"), message))
        config = spec.options.get("inductor_config") or {}
        for key, message in inductor_config_problems(config):
            problems.append(SpecProblem(("options", "inductor_config", key), message))
        return problems

    def toolchain_versions(self) -> dict[str, str | None]:
        versions = super().toolchain_versions()
        versions["cpu_isa"] = cpu_isa()
        # The calling convention of the compiled graphs: a bundle of another format cannot run here.
        versions["inductor_graph_format"] = str(GRAPH_FORMAT)
        return versions

    # -- plan ------------------------------------------------------------------------------------
    def plan(self, spec: BuildSpec) -> CompilePlan:
        """One CTE per context bucket, one TKG per token bucket (the largest always ``max_length``)."""
        self.ensure_valid(spec)
        seq = spec.sequence
        notes = [
            "token buckets are KV-length windows of one static cache of max_length positions; "
            "graphs share the cache and one copy of the weights",
        ]
        token_buckets = sorted(set(seq.token_buckets))
        if token_buckets[-1] < seq.max_length:
            token_buckets.append(seq.max_length)
            notes.append(f"added token bucket {seq.max_length} (max_length) so every position can be generated")
        graphs = [GraphSpec(ROLE_CONTEXT, spec.batch_size, b) for b in seq.context_buckets]
        graphs += [GraphSpec(ROLE_TOKEN, spec.batch_size, b) for b in token_buckets]
        return CompilePlan(
            graphs=tuple(graphs),
            weights_layout="1 rank shard in weights/ (the full state dict), bound to every graph when loaded",
            notes=tuple(notes),
        )

    # -- compile ---------------------------------------------------------------------------------
    def compile(self, job: CompileJob) -> CompileResult:
        """Compile every graph of ``job.plan`` (cache hits copied, misses built in parallel processes)."""
        spec = job.spec
        self.ensure_valid(spec)
        model_config = _model_config(job.checkpoint_dir)
        inductor_config = dict(spec.options.get("inductor_config") or {})
        toolchain = self.toolchain_versions()
        cache_root = cache.graph_cache_dir(job.env)
        max_length = spec.sequence.max_length
        job.artifacts_dir.mkdir(parents=True, exist_ok=True)
        job.logs_dir.mkdir(parents=True, exist_ok=True)

        keys = {
            g: cache.graph_cache_key(
                g,
                max_length=max_length,
                dtype=spec.dtype,
                model_config=model_config,
                toolchain=toolchain,
                inductor_config=inductor_config,
            )
            for g in job.plan.graphs
        }
        results: dict[GraphSpec, CompiledGraph] = {}
        metas: dict[GraphSpec, dict[str, Any]] = {}
        pending: list[Pending] = []
        for graph in job.plan.graphs:
            key = keys[graph]
            started = time.perf_counter()
            entry = cache.entry_dir(cache_root, key) if cache_root is not None else None
            meta = cache.cached_entry(entry, graph.name, key) if entry is not None else None
            if entry is not None and meta is not None:
                cache.install(entry, graph.name, job.artifacts_dir, job.logs_dir, cache_hit=True, key=key)
                seconds = time.perf_counter() - started
                results[graph] = CompiledGraph(graph, f"artifacts/{graph.name}.pt2", seconds, cache_hit=True)
                metas[graph] = meta
                job.progress.task(f"graph {graph.name}").done("cached")
                continue
            out_dir = (
                cache.new_tmp_dir(cache_root, key) if cache_root is not None else job.work_dir / "graphs" / graph.name
            )
            pending.append(Pending(graph, key, out_dir, out_dir / f"{graph.name}.log"))

        if pending:
            if cache_root is not None:
                cache.sweep_tmp(cache_root / "tmp")
            built = build_all(job, pending, inductor_config, max_length, cache_root)
            for item in pending:
                meta, seconds, entry = built[item.graph]
                cache.install(entry, item.graph.name, job.artifacts_dir, job.logs_dir, cache_hit=False, key=item.key)
                results[item.graph] = CompiledGraph(item.graph, f"artifacts/{item.graph.name}.pt2", seconds)
                metas[item.graph] = meta

        ordered = [results[g] for g in job.plan.graphs]
        _check_weights(job, [metas[g] for g in job.plan.graphs])
        index = _write_index(job, ordered, metas, keys, toolchain, model_config)
        return CompileResult(
            graphs=ordered,
            extra={
                "inductor": {
                    "index": f"artifacts/{INDEX_NAME}",
                    "graph_cache": str(cache_root) if cache_root is not None else None,
                    "cpu_isa": toolchain.get("cpu_isa"),
                    "graphs": {
                        g["name"]: {k: g[k] for k in ("cache_key", "export_seconds", "aoti_seconds", "built_seconds")}
                        for g in index["graphs"]
                    },
                }
            },
        )

    # -- run -------------------------------------------------------------------------------------
    def load(self, bundle_dir: str | os.PathLike[str], *, warmup: bool = True) -> InductorRunner:
        """Load a bundle for generation (imports torch); see ``inductor.runtime.load``."""
        from neuronc.backends.inductor.runtime import load

        return load(bundle_dir, warmup=warmup)

    def reference_model(self, bundle_dir: str | os.PathLike[str], dtype: str) -> Any:
        """The HF eager model from the bundle's model/config.json and weights/ (``verify --accuracy``)."""
        from neuronc.backends.inductor.runtime import reference_model

        return reference_model(Path(bundle_dir), dtype)

    def recognizes(self, directory: str | os.PathLike[str]) -> bool:
        from neuronc.backends.inductor.format import INDEX_NAME

        return (Path(directory) / "artifacts" / INDEX_NAME).is_file()

    def load_snippet(self, bundle_dir: str) -> str | None:
        return (
            "from neuronc.runtime import load\n"
            f"runner = load({bundle_dir!r})\n"
            "result = runner.generate('Hello', max_new_tokens=20)\n"
            "print(result.text, result.ttft_ms, result.ms_per_token)\n"
        )


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _model_config(checkpoint_dir: Path) -> dict[str, Any]:
    from neuronc.model.files import read_model_config

    config = read_model_config(checkpoint_dir) or {}
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        msg = f"model_type {model_type!r} is not supported by the inductor backend"
        raise InvalidInputError(msg, hint=f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return config


def _check_weights(job: CompileJob, metas: Sequence[Mapping[str, Any]]) -> None:
    """Fail the compile now if the bundle's weights cannot bind every graph constant."""
    directory = job.weights_dir if job.weights_dir is not None else job.checkpoint_dir
    files = weight_files(directory) if directory.is_dir() else []
    if not files:
        msg = f"no safetensors weights in {directory} to bind the compiled graphs to"
        raise CompileError(msg, hint="the inductor backend needs safetensors weights (weights: presharded)")
    shapes: dict[str, list[int]] = {}
    for path in files:
        try:
            shapes.update(weight_shapes(path))
        except CheckpointError as exc:
            raise CompileError(f"cannot read weights {path}: {exc.message}") from None
    problems: list[str] = []
    for meta in metas:
        problems += [f"{meta['name']}: {p}" for p in missing_constants(meta, shapes)]
    if problems:
        msg = f"the weights in {directory} do not cover the compiled graphs' constants"
        raise CompileError(msg, details=problems[:_LOG_TAIL_LINES])


def _write_index(
    job: CompileJob,
    graphs: Sequence[CompiledGraph],
    metas: Mapping[GraphSpec, Mapping[str, Any]],
    keys: Mapping[GraphSpec, str],
    toolchain: Mapping[str, str | None],
    model_config: Mapping[str, Any],
) -> dict[str, Any]:
    spec = job.spec
    entries = []
    for compiled in graphs:
        graph = compiled.graph
        meta = metas[graph]
        package, meta_name, constants = graph_files(graph.name)
        entries.append(
            {
                "name": graph.name,
                "role": graph.role,
                "batch": graph.batch,
                "bucket": graph.bucket,
                "package": package,
                "meta": meta_name,
                "constants": constants,
                "cache_key": keys[graph],
                "cache_hit": compiled.cache_hit,
                "export_seconds": meta.get("export_seconds"),
                "aoti_seconds": meta.get("aoti_seconds"),
                "built_seconds": meta.get("built_seconds"),
            }
        )
    index = {
        "format": GRAPH_FORMAT,
        "backend": "inductor",
        "model_type": model_config.get("model_type"),
        "dtype": spec.dtype,
        "batch_size": spec.batch_size,
        "max_length": spec.sequence.max_length,
        "context_buckets": sorted(g.bucket for g in job.plan.graphs if g.role == ROLE_CONTEXT),
        "token_buckets": sorted(g.bucket for g in job.plan.graphs if g.role == ROLE_TOKEN),
        "toolchain": dict(toolchain),
        "graphs": entries,
    }
    (job.artifacts_dir / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return index
