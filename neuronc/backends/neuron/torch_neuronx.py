"""torch-neuronx backend: ``torch_neuronx.trace`` once per bucket, for encoders and custom models.

Each graph of the plan (one per batch x sequence bucket) is traced with example inputs of that
shape and saved with ``torch.jit.save`` as ``artifacts/<graph>.pt``; ``artifacts/torch_neuronx.json``
lists the graphs so a server can route a padded batch to the smallest bucket that fits. Weights are
inlined into each NEFF (``inline_weights_to_neff=True``, torch-neuronx's default), so a bundle is
self-contained and ``weights: presharded`` is the only mode (aws-neuron/aws-neuron-sdk
frameworks/torch/torch-neuronx/api-reference-guide/inference/api-torch-neuronx-trace.rst).

Compiler arguments go to ``trace(compiler_args=...)``: the profile's flags and NEURON_CC_FLAGS,
an ``--auto-cast`` for the profile's amp unless the flags set one, and ``--target``. Whether trace
also reads NEURON_CC_FLAGS is not documented, so the child process gets NEURON_CC_FLAGS with the
cache-location flags only, and nothing is passed twice. Without a Neuron device of the target's
family, ``trace(cpu_backend=True)`` compiles without running on a device.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from neuronc.backends.base import (
    ENCODER_TASKS,
    GIB,
    LLM_TASKS,
    ROLE_CONTEXT,
    CompiledGraph,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    HostRamModel,
    check_import_reference,
)
from neuronc.backends.neuron.common import NeuronBackend, neuron_extra
from neuronc.backends.neuron.env import (
    NEURON_EXTRA_INDEX,
    cross_compiling,
    has_flag,
    host_platform,
    platform_target,
)
from neuronc.backends.neuron.files import bundle_line, bundle_rel
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.hfcompat import transformers_major
from neuronc.keys import CompilerFlagsMode, applied_compiler_flags
from neuronc.spec import StrictModel

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# transformers Auto class per task.
AUTO_CLASSES: dict[str, str] = {
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "fill-mask": "AutoModelForMaskedLM",
    "token-classification": "AutoModelForTokenClassification",
    "text-generation": "AutoModelForCausalLM",
}
AUTO_CAST = {
    "fp32": ["--auto-cast=none"],
    "bf16": ["--auto-cast=matmult", "--auto-cast-type=bf16"],
    "fp16": ["--auto-cast=matmult", "--auto-cast-type=fp16"],
}
DEFAULT_INPUTS = ("input_ids", "attention_mask")
INDEX_FILE = "torch_neuronx.json"


class TorchNeuronxOptions(StrictModel):
    """``options:`` of the torch-neuronx backend."""

    model_factory: str | None = Field(
        default=None,
        description="'module:function' called with the checkpoint directory, returning the module to trace",
    )
    inputs: list[str] | None = Field(
        default=None,
        min_length=1,
        description="names of the integer inputs, each [batch, bucket] (default [input_ids, attention_mask])",
    )

    @field_validator("model_factory")
    @classmethod
    def _factory(cls, value: str | None) -> str | None:
        return None if value is None else check_import_reference(value, "function")


def compiler_args(spec: BuildSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """``torch_neuronx.trace(compiler_args=...)`` for a BuildSpec: the profile's flags and NEURON_CC_FLAGS."""
    flags = applied_compiler_flags(
        TorchNeuronxBackend.compiler_flags_mode, spec.compiler_flags, os.environ if environ is None else environ
    )
    args = list(flags)
    if not has_flag(flags, "--auto-cast"):
        args += AUTO_CAST[spec.amp]
    if not has_flag(flags, "--target"):
        args.append(f"--target={platform_target(spec.target)}")
    return args


def input_names(spec: BuildSpec) -> list[str]:
    names = spec.options.get("inputs") or list(DEFAULT_INPUTS)
    return [str(n) for n in names]


def trace_calls(
    spec: BuildSpec, graphs: tuple[GraphSpec, ...], environ: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """One ``trace`` call per graph: its example-input shapes, compiler args and output file (pure)."""
    args = compiler_args(spec, environ)
    names = input_names(spec)
    return [
        {
            "graph": g.name,
            "example_inputs": {name: [g.batch, g.bucket] for name in names},
            "compiler_args": args,
            "file": f"{g.name}.pt",
        }
        for g in graphs
    ]


class TorchNeuronxBackend(NeuronBackend):
    name: ClassVar[str] = "torch-neuronx"
    # torch_neuronx.trace(..., inline_weights_to_neff=True) is the default and what this backend calls: the
    # parameters are compiled into each NEFF (aws-neuron/aws-neuron-sdk frameworks/torch/torch-neuronx/
    # api-reference-guide/inference/api-torch-neuronx-trace.rst; replace_weights "is only applicable for
    # models traced with inline_weights_to_neff=False, which is True by default").
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        True, "aws-neuron-sdk api-torch-neuronx-trace.rst: inline_weights_to_neff=True (the default)"
    )
    # torch_neuronx.trace runs the eager model on the host, usually in fp32.
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        2 * GIB, 2.0, 1 * GIB, False, "trace runs the eager model on the host"
    )
    toolchain_package: ClassVar[str | None] = "torch-neuronx"
    # neuronc passes the profile's flags and NEURON_CC_FLAGS to trace(compiler_args=...) itself.
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.PROFILE_AND_ENV
    options_model: ClassVar[type[BaseModel] | None] = TorchNeuronxOptions
    description: ClassVar[str] = "torch-neuronx: torch_neuronx.trace per bucket (encoders, custom models)"
    tasks: ClassVar[frozenset[str]] = ENCODER_TASKS | LLM_TASKS
    # Weights are inlined into every traced NEFF: the artifacts are the weights.
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded"})
    packages: ClassVar[tuple[str, ...]] = ("torch-neuronx", "neuronx-cc", "libneuronxla", "torch", "transformers")
    required: ClassVar[tuple[str, ...]] = ("torch-neuronx", "neuronx-cc")
    install_hint: ClassVar[str | None] = (
        f"pip install --extra-index-url {NEURON_EXTRA_INDEX} torch-neuronx neuronx-cc (the Neuron SDK is not on PyPI)"
    )

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        # trace compiles for one NeuronCore; tensor parallelism is NxD's parallel_model_trace.
        return frozenset({1})

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.ensure_valid(spec)
        notes: tuple[str, ...] = ()
        if spec.model.task in LLM_TASKS:
            # A traced forward has no KV cache: one full-sequence graph per context bucket.
            graphs = tuple(GraphSpec(ROLE_CONTEXT, spec.batch_size, b) for b in spec.sequence.context_buckets)
            notes = ("torch-neuronx traces the full forward (no KV cache) per context bucket; use nxdi for generation",)
        else:
            graphs = super().plan(spec).graphs
        return CompilePlan(graphs=graphs, weights_layout="inlined into each traced NEFF in artifacts/", notes=notes)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        import torch
        import torch_neuronx

        spec = job.spec
        model = _load_model(spec, str(job.checkpoint_dir))
        calls = trace_calls(spec, job.plan.graphs)
        # Without a device of the target's family, compile only (trace would load onto the device).
        cpu_host = cross_compiling(spec, host_platform())
        task = job.progress.task(f"torch-neuronx: trace {len(calls)} graph(s)", total=len(calls))
        compiled: list[CompiledGraph] = []
        index = []
        for graph, call in zip(job.plan.graphs, calls, strict=True):
            example = tuple(torch.zeros(shape, dtype=torch.long) for shape in call["example_inputs"].values())
            if "attention_mask" in call["example_inputs"]:
                position = list(call["example_inputs"]).index("attention_mask")
                example = tuple(torch.ones_like(t) if i == position else t for i, t in enumerate(example))
            options: dict[str, Any] = {
                "compiler_workdir": str(job.work_dir / graph.name),
                "compiler_args": call["compiler_args"],
            }
            if cpu_host:
                options["cpu_backend"] = True
            start = time.monotonic()
            traced = torch_neuronx.trace(model, example, **options)
            path = job.artifacts_dir / call["file"]
            torch.jit.save(traced, str(path))
            seconds = time.monotonic() - start
            compiled.append(CompiledGraph(graph=graph, artifact=bundle_rel(job, path), compile_seconds=seconds))
            index.append({"name": graph.name, "file": call["file"], "batch": graph.batch, "sequence": graph.bucket})
            task.advance()
        (job.artifacts_dir / INDEX_FILE).write_text(
            json.dumps({"task": spec.model.task, "inputs": input_names(spec), "graphs": index}, indent=2) + "\n",
            encoding="utf-8",
        )
        info = {
            "trace": calls,
            "inputs": input_names(spec),
            "model_factory": spec.options.get("model_factory"),
            "cpu_backend": cpu_host,
        }
        extra = neuron_extra(torch_neuronx_load_snippet, "torch_neuronx", info)
        return CompileResult(graphs=compiled, extra=extra)

    def load_snippet(self, bundle_dir: str) -> str | None:
        return torch_neuronx_load_snippet(bundle_dir)


def torch_neuronx_load_snippet(bundle_dir: str) -> str:
    """Python lines that load the traced buckets and route a padded batch to the smallest that fits."""
    return "\n".join(
        [
            bundle_line(bundle_dir),
            "import json, torch, torch_neuronx  # torch_neuronx registers the Neuron ops",
            f'index = json.load(open(f"{{bundle}}/artifacts/{INDEX_FILE}"))',
            'models = {g["sequence"]: torch.jit.load(f"{bundle}/artifacts/{g[\'file\']}") for g in index["graphs"]}',
            "# pad input_ids/attention_mask to the smallest bucket >= the sequence length, then:",
            "# outputs = models[bucket](input_ids, attention_mask)",
        ]
    )


def _load_model(spec: BuildSpec, checkpoint_dir: str) -> Any:
    """The module to trace: the task's transformers Auto class, or the profile's model_factory."""
    factory = spec.options.get("model_factory")
    if factory:
        module_name, _, func = str(factory).partition(":")
        return getattr(importlib.import_module(module_name), func)(checkpoint_dir)
    import transformers

    auto = getattr(transformers, AUTO_CLASSES[spec.model.task])
    # Tracing needs tuple outputs. transformers 4.57 spells that torchscript=True (which also implies
    # return_dict=False); 5.x removed the torchscript config attribute and models reject the keyword.
    kwargs: dict[str, Any] = {"torchscript": True} if transformers_major() == 4 else {"return_dict": False}
    if spec.model.task in LLM_TASKS:
        kwargs["use_cache"] = False
    model = auto.from_pretrained(checkpoint_dir, **kwargs)
    model.eval()
    return model
