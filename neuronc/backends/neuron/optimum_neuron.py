"""optimum-neuron backend: ``NeuronModelForCausalLM.export`` with the profile's shapes.

Written against optimum-neuron 0.4.x, whose decoder backend is its own port of NxD Inference
(huggingface/optimum-neuron optimum/neuron/models/inference/). The profile maps to the arguments of
``NeuronModelForCausalLM.get_neuron_config`` (``get_neuron_config_arguments``), which picks the
model family's defaults (on-device sampling, fused QKV, continuous batching for batch > 1), and to
the ``NxDNeuronConfig`` fields neuronc decides on top (``neuron_config_kwargs``). The exported
directory (``neuron_config.json``, ``config.json``, ``model.pt``, tokenizer, and the weights as the
weights mode says) is ``artifacts/``: ``NeuronModelForCausalLM.from_pretrained`` and
``optimum-cli neuron serve`` load it as it is.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends.base import (
    GIB,
    ROLE_CONTEXT,
    ROLE_TOKEN,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    HostRamModel,
    SpecProblem,
)
from neuronc.backends.neuron.common import (
    NXD_PACKAGES,
    NeuronBackend,
    managed_problems,
    neuron_extra,
    user_neuron_config,
)
from neuronc.backends.neuron.env import NEURON_EXTRA_INDEX, platform_target
from neuronc.backends.neuron.files import (
    bundle_line,
    bundle_rel,
    copy_checkpoint,
    copy_tokenizer_files,
    even_split,
    hub_revision_of,
    is_hub_id,
)
from neuronc.backends.neuron.optimum_fields import OptimumNeuronOptions
from neuronc.backends.neuron.serving import OptimumServing
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.compile_cache import complete_modules
from neuronc.keys import CompilerFlagsMode
from neuronc.spec import ServingStack

if TYPE_CHECKING:
    from pydantic import BaseModel

    from neuronc.backends.bucket_rules import BucketRules
    from neuronc.backends.serving import ServingCapability
    from neuronc.spec import BuildSpec

# NxDNeuronConfig fields neuronc sets from the profile, and the profile field each comes from.
MANAGED: dict[str, str] = {
    "checkpoint_id": "model.id",
    "checkpoint_revision": "model.revision",
    "batch_size": "batch_size",
    "max_batch_size": "batch_size",
    "sequence_length": "sequence.max_length",
    "max_context_length": "sequence.max_context_length",
    "tp_degree": "tp_degree",
    "torch_dtype": "amp",
    "target": "target",
    "local_ranks_size": "tp_degree",
}


def get_neuron_config_arguments(spec: BuildSpec) -> dict[str, Any]:
    """Keyword arguments of neuronc's ``NeuronModelForCausalLM.get_neuron_config(checkpoint, config=...)`` call."""
    return {
        "instance_type": spec.target,
        "batch_size": spec.batch_size,
        "sequence_length": spec.sequence.max_length,
        "tensor_parallel_size": spec.tp_degree,
    }


def neuron_config_kwargs(spec: BuildSpec, checkpoint_revision: str | None = None) -> dict[str, Any]:
    """The ``NxDNeuronConfig`` fields neuronc sets on what ``get_neuron_config`` returned.

    ``target`` is the normalised instance family optimum-neuron stores (inf2 and trn1n become trn1).
    ``checkpoint_id``/``checkpoint_revision`` name the Hub checkpoint for Hub models, which is what
    lets ``weights: reference`` bundles download their weights at load time; local models have none.
    """
    hub = is_hub_id(spec)
    kwargs: dict[str, Any] = {
        "checkpoint_id": spec.model.id if hub else None,
        "checkpoint_revision": (checkpoint_revision or spec.model.revision) if hub else None,
        "batch_size": spec.batch_size,
        "sequence_length": spec.sequence.max_length,
        "max_context_length": spec.sequence.max_context_length,
        "tp_degree": spec.tp_degree,
        "torch_dtype": spec.dtype,
        "target": platform_target(spec.target),
    }
    kwargs.update(user_neuron_config(spec))
    return kwargs


def continuous_batching(spec: BuildSpec) -> bool:
    """optimum-neuron's decoder default: continuous batching whenever batch_size > 1."""
    value = user_neuron_config(spec).get("continuous_batching")
    return bool(value) if value is not None else spec.batch_size > 1


def export_command(spec: BuildSpec, output: str, config_dtype: str | None) -> tuple[str, list[str]]:
    """The ``optimum-cli export neuron`` command closest to this build, and what it cannot express.

    In 0.4.5 the CLI hands LLM exports to ``get_neuron_config`` with batch size, sequence length,
    tensor-parallel size and instance type only (huggingface/optimum-neuron
    optimum/exporters/neuron/__main__.py ``maybe_export_from_neuron_model_class``): the dtype comes
    from the model's config.json (``--torch_dtype`` is dropped), context encoding runs at the full
    sequence length, and no other NxDNeuronConfig field can be set.
    """
    args = ["optimum-cli", "export", "neuron", "-m", spec.model.id, "--task", "text-generation"]
    for key, value in get_neuron_config_arguments(spec).items():
        args += [f"--{key}", str(value)]
    args.append(output)
    cannot: list[str] = []
    if config_dtype != spec.dtype:
        cannot.append(
            f"dtype {spec.dtype}: the CLI takes the dtype from the model's config.json ({config_dtype or 'unset'})"
        )
    if spec.sequence.max_context_length != spec.sequence.max_length:
        cannot.append(
            f"max_context_length {spec.sequence.max_context_length}: the CLI encodes context at the sequence "
            f"length ({spec.sequence.max_length})"
        )
    for key in sorted(user_neuron_config(spec)):
        cannot.append(f"neuron_config.{key}: the CLI sets no NxDNeuronConfig field beyond its shape arguments")
    if spec.weights != "presharded":
        cannot.append(
            f"weights: {spec.weights}: the CLI saves a local checkpoint's weights pre-sharded (checkpoint/weights/)"
        )
    return shlex.join(args), cannot


def reproduce_snippet(spec: BuildSpec, output: str) -> str:
    """Python that repeats neuronc's export exactly (the calls ``compile_in_process`` makes)."""
    arguments = ", ".join(f"{k}={v!r}" for k, v in get_neuron_config_arguments(spec).items())
    overrides = {k: v for k, v in neuron_config_kwargs(spec).items() if k != "torch_dtype"}
    save = "model.save_pretrained(output)" if spec.weights == "presharded" else 'model.save(output + "/")'
    return "\n".join(
        [
            "import torch",
            "from optimum.neuron import NeuronModelForCausalLM",
            "from transformers import AutoConfig",
            f"checkpoint, output = {spec.model.id!r}, {output!r}  # a local snapshot of the checkpoint",
            "config = AutoConfig.from_pretrained(checkpoint).get_text_config()",
            f"config.dtype = torch.{spec.dtype}",
            f"neuron_config = NeuronModelForCausalLM.get_neuron_config(checkpoint, config=config, {arguments})",
            f"for key, value in {overrides!r}.items():",
            "    setattr(neuron_config, key, value)",
            f"neuron_config.torch_dtype = torch.{spec.dtype}",
            "model = NeuronModelForCausalLM.export(model_id=checkpoint, neuron_config=neuron_config, config=config, "
            "load_weights=False)",
            save,
        ]
    )


class OptimumNeuronBackend(NeuronBackend):
    name: ClassVar[str] = "optimum-neuron"
    # optimum-neuron 0.4 exports through NxD's ModelBuilder.trace(initialize_model_weights=False) and keeps the
    # weights in checkpoint/weights/ beside model.pt, or none at all for a Hub model (checkpoint_id: the
    # weights are downloaded and sharded at load) (huggingface/optimum-neuron optimum/neuron/models/
    # inference/backend/pretrained_model.py; push_to_hub skips checkpoint/ when checkpoint_id is set).
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        False,
        "optimum-neuron models/inference/backend/pretrained_model.py: NxD trace(initialize_model_weights=False); "
        "checkpoint/weights beside model.pt, or loaded by checkpoint_id",
    )
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(4 * GIB, 2.0, 2 * GIB, False, "NxD tracing, as nxdi")
    # optimum-neuron's NxD backend compiles with the model class's own get_compiler_args() and reads no
    # NEURON_CC_FLAGS (huggingface/optimum-neuron v0.4.5
    # optimum/neuron/models/inference/backend/pretrained_model.py, modules/decoder/modeling_decoder.py).
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.NONE
    toolchain_package: ClassVar[str | None] = "optimum-neuron"
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = (ServingStack.vllm, ServingStack.sagemaker, ServingStack.tgi)
    serving: ClassVar[ServingCapability | None] = OptimumServing()
    uses_hf_neuron_cache: ClassVar[bool] = True
    options_model: ClassVar[type[BaseModel] | None] = OptimumNeuronOptions
    description: ClassVar[str] = "optimum-neuron: NeuronModelForCausalLM.export()"
    packages: ClassVar[tuple[str, ...]] = ("optimum-neuron", *NXD_PACKAGES, "torch", "transformers")
    required: ClassVar[tuple[str, ...]] = ("optimum-neuron", "neuronx-cc", "torch-neuronx", "neuronx-distributed")
    install_hint: ClassVar[str | None] = (
        "pip install optimum-neuron, plus neuronx-cc, torch-neuronx and neuronx-distributed from "
        f"{NEURON_EXTRA_INDEX} (the Neuron SDK is not on PyPI)"
    )

    def compiler_flags_problem(self) -> str:
        return (
            "the optimum-neuron backend cannot apply compiler flags: its models compile with their own "
            "get_compiler_args() and it reads no NEURON_CC_FLAGS; remove compiler.flags"
        )

    def bucket_rules(self, spec: BuildSpec) -> BucketRules:
        """One graph at max_context_length and one at max_length (check_spec refuses bucket lists)."""
        from neuronc.backends.bucket_rules import BucketRule, BucketRules

        seq = spec.sequence
        why = "optimum-neuron compiles one graph at sequence.{}: no bucket lists"
        return BucketRules(
            BucketRule(
                seq.max_context_length, fixed=(seq.max_context_length,), source=why.format("max_context_length")
            ),
            BucketRule(seq.max_length, fixed=(seq.max_length,), source=why.format("max_length")),
        )

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        seq = spec.sequence
        user = user_neuron_config(spec)
        problems = managed_problems(spec, "neuron_config", MANAGED)
        one_graph = "optimum-neuron compiles one graph at sequence.{}; it has no bucket lists (remove it, or use nxdi)"
        if seq.context_buckets != (seq.max_context_length,):
            problems.append(SpecProblem(("sequence", "context_buckets"), one_graph.format("max_context_length")))
        if seq.token_buckets != (seq.max_length,):
            problems.append(SpecProblem(("sequence", "token_buckets"), one_graph.format("max_length")))
        if spec.weights == "reference" and not is_hub_id(spec):
            msg = "reference needs a Hub model: optimum-neuron downloads the weights by checkpoint_id when loading"
            problems.append(SpecProblem(("weights",), msg + "; use presharded or on-load for a local checkpoint"))
        if (user.get("speculation_length") or 0) > 0 and user.get("on_device_sampling") is not False:
            msg = "speculative decoding needs on_device_sampling: false (NxDNeuronConfig refuses both together)"
            problems.append(SpecProblem(("options", "neuron_config", "speculation_length"), msg))
        return problems

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.ensure_valid(spec)
        seq = spec.sequence
        # With continuous batching the context-encoding graph takes one sequence at a time.
        ctx_batch = 1 if continuous_batching(spec) else spec.batch_size
        graphs = (
            GraphSpec(ROLE_CONTEXT, ctx_batch, seq.max_context_length),
            GraphSpec(ROLE_TOKEN, spec.batch_size, seq.max_length),
        )
        layout = {
            "presharded": f"optimum-neuron's {spec.tp_degree} rank shards in artifacts/checkpoint/weights/",
            "on-load": "checkpoint safetensors in artifacts/, sharded by optimum-neuron when loaded",
            "reference": f"downloaded from {spec.model.id} (checkpoint_id) and sharded when loaded",
        }[spec.weights]
        state = "on" if continuous_batching(spec) else "off"
        notes = (f"continuous batching {state}: context encoding runs at batch {ctx_batch}",)
        return CompilePlan(graphs=graphs, weights_layout=layout, notes=notes)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        import torch
        from optimum.neuron import NeuronModelForCausalLM
        from transformers import AutoConfig

        spec = job.spec
        ckpt = str(job.checkpoint_dir)
        dtype = getattr(torch, spec.dtype)
        config = AutoConfig.from_pretrained(ckpt).get_text_config()
        config_dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "")
        # optimum-neuron 0.4 takes the dtype from the model config (not from --torch_dtype).
        config.dtype = dtype
        arguments = get_neuron_config_arguments(spec)
        neuron_config = NeuronModelForCausalLM.get_neuron_config(ckpt, config=config, **arguments)
        managed = neuron_config_kwargs(spec, hub_revision_of(job.checkpoint_dir, spec))
        for key, value in managed.items():
            setattr(neuron_config, key, dtype if key == "torch_dtype" else value)
        out = job.artifacts_dir
        task = job.progress.task("optimum-neuron: export", total=len(job.plan.graphs))
        cache_dir = os.environ.get("NEURON_COMPILE_CACHE_URL")
        cached_before = complete_modules(cache_dir)
        start = time.monotonic()
        model = NeuronModelForCausalLM.export(
            model_id=ckpt, neuron_config=neuron_config, config=config, load_weights=False
        )
        seconds = time.monotonic() - start
        # The compile-cache entries this export compiled: what `neuronc cache synchronize` publishes.
        compiled = sorted(complete_modules(cache_dir) - cached_before)
        task.advance(len(job.plan.graphs))
        bundled: list[str] = []
        if spec.weights == "presharded":
            # Exported from a local directory, save_pretrained shards into checkpoint/weights/.
            model.save_pretrained(str(out))
        else:
            model.save(str(out) + "/")
            if spec.weights == "on-load":
                bundled = copy_checkpoint(job.checkpoint_dir, out, with_config=False)
        bundled += copy_tokenizer_files(job.checkpoint_dir, out)
        command, cannot = export_command(spec, "<bundle>/artifacts", config_dtype.removeprefix("torch."))
        info = {
            "get_neuron_config": arguments,
            "neuron_config": managed,
            "export_command": command,
            "export_command_cannot_express": cannot,
            "reproduce": reproduce_snippet(spec, "<bundle>/artifacts"),
            "weights": spec.weights,
            "files_from_checkpoint": bundled,
            "compile_cache": {"cache_dir": cache_dir, "modules": compiled},
        }
        extra = neuron_extra(
            optimum_load_snippet,
            "optimum_neuron",
            info,
            timing="one export() call builds both graphs; per-graph seconds are its total split evenly",
        )
        artifact = bundle_rel(job, out / "model.pt")
        return CompileResult(graphs=even_split(job.plan.graphs, artifact, seconds), extra=extra)

    def load_snippet(self, bundle_dir: str) -> str | None:
        return optimum_load_snippet(bundle_dir)


def optimum_load_snippet(bundle_dir: str) -> str:
    """Python lines that load an optimum-neuron bundle (same optimum-neuron and neuronx-cc versions)."""
    return "\n".join(
        [
            bundle_line(bundle_dir),
            "from optimum.neuron import NeuronModelForCausalLM",
            "from transformers import AutoTokenizer",
            'model = NeuronModelForCausalLM.from_pretrained(f"{bundle}/artifacts")',
            'tokenizer = AutoTokenizer.from_pretrained(f"{bundle}/artifacts")',
            "# or serve it: optimum-cli neuron serve -m <bundle>/artifacts",
        ]
    )
