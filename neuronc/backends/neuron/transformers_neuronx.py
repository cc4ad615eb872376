"""transformers-neuronx backend: ``<Arch>ForSampling.from_pretrained(...)``, compile, then ``save()``.

transformers-neuronx reached end of support (its last package is in Neuron SDK 2.26.1) but still runs the
TorchServe inf2 examples. The profile maps to ``from_pretrained`` keyword arguments
(``from_pretrained_kwargs``): ``batch_size``, ``tp_degree``, ``amp`` ('f32'/'f16'/'bf16'),
``n_positions`` (the token-generation buckets) and ``context_length_estimate`` (the
context-encoding buckets). ``save()`` writes one NEFF per compiled kernel, named by the hash of its
HLO, into ``artifacts/neff/``; reloading needs the same transformers-neuronx version and kwargs
(aws-neuron/transformers-neuronx src/transformers_neuronx/base.py).

transformers-neuronx reads NEURON_CC_FLAGS itself (src/transformers_neuronx/compiler.py), so the
profile's compiler flags reach neuronx-cc through it, and always compiles for the trn1 platform
(inf2 and trn1); on a host whose Neuron devices are of another family it compiles with
``cpu_compile()`` instead of ``to_neuron()``.

Weights: transformers-neuronx always shards at load (``to_neuron()``). ``presharded`` writes the
checkpoint in the split format it loads lazily, tensor by tensor (``save_pretrained_split``'s
layout: ``config.json`` + ``pytorch_model.bin/`` with ``key_to_filename.json`` and one
``torch.save`` file per tensor, already cast to the profile's dtype), streamed without loading the
model; ``on-load`` carries the safetensors as they are; ``reference`` carries none.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, create_model

from neuronc.backends.base import GIB, CompileJob, CompilePlan, CompileResult, HostRamModel, SpecProblem
from neuronc.backends.neuron.common import (
    NeuronBackend,
    managed_problems,
    neuron_extra,
    user_neuron_config,
)
from neuronc.backends.neuron.env import NEURON_EXTRA_INDEX, build_env, host_platform
from neuronc.backends.neuron.files import (
    backend_extra,
    bundle_line,
    bundle_rel,
    checkpoint_weight_files,
    copy_checkpoint,
    copy_tokenizer_files,
    even_split,
    model_type_for_checks,
    model_type_of,
)
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.errors import InvalidInputError
from neuronc.hardware import max_cores
from neuronc.keys import CompilerFlagsMode, applied_compiler_flags
from neuronc.spec import ServingStack, StrictModel

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

AMP = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}

# model_type -> class exported at transformers_neuronx's top level (its NeuronAutoModelForCausalLM table),
# for the classes that can save and reload their NEFFs (save(), load(), cpu_compile()).
MODEL_CLASSES: dict[str, str] = {
    "bloom": "BloomForSampling",
    "code_llama": "LlamaForSampling",
    "gpt2": "GPT2ForSamplingWithContextBroadcasting",
    "llama": "LlamaForSampling",
    "mistral": "MistralForSampling",
    "mixtral": "MixtralForSampling",
    "opt": "OPTForSampling",
}
# GPTJForSampling and GPTNeoXForSampling derive from module.PretrainedModel, not base.NeuronModelBase:
# they have no save(), load() or cpu_compile() (aws-neuron/transformers-neuronx src/transformers_neuronx/
# gptj/model.py, gptneox/model.py), so their compiled kernels cannot be stored in a bundle.
UNSUPPORTED_MODEL_TYPES: dict[str, str] = {
    model_type: (
        f"transformers-neuronx's {cls} has no save()/load(): its compiled kernels cannot be put in a bundle "
        "(it compiles again at every to_neuron())"
    )
    for model_type, cls in (("gptj", "GPTJForSampling"), ("gpt_neox", "GPTNeoXForSampling"))
}

SPLIT_DIR = "pytorch_model.bin"
KEY_TO_FILENAME = "key_to_filename.json"
CHECKPOINT_DIR = "checkpoint"
NEFF_DIR = "neff"
_MANAGED = {
    "batch_size": "batch_size",
    "tp_degree": "tp_degree",
    "amp": "amp",
    "n_positions": "sequence.token_buckets",
    "context_length_estimate": "sequence.context_buckets",
    "neuron_config": "options.neuron_config",
}
# Keyword-only parameters of transformers_neuronx.NeuronConfig (aws-neuron/transformers-neuronx
# src/transformers_neuronx/config.py at 1ade6d7, the repository's last sync, Dec 2024).
NEURON_CONFIG_FIELDS = (
    "sparse_attn",
    "quant",
    "kv_cache_quant",
    "continuous_batching",
    "attention_layout",
    "collectives_layout",
    "cache_layout",
    "padding_side",
    "group_query_attention",
    "sequence_parallel_norm",
    "sequence_parallel_norm_threshold",
    "bf16_rms_norm",
    "on_device_embedding",
    "on_device_generation",
    "all_reduce_dtype",
    "cast_logits_dtype",
    "fuse_qkv",
    "qkv_tiling",
    "weight_tiling",
    "mlp_in_weight_tiling_permute_order",
    "mlp_out_weight_tiling_permute_order",
    "log_softmax_scores",
    "shard_over_sequence",
    "output_all_logits",
    "attn_output_transposed",
    "fused_rmsnorm_qkv",
    "fused_rmsnorm_mlp",
    "mlp_out_weight_transpose",
    "fuse_mlp",
    "is_eagle_target",
    "is_eagle_draft",
    "has_pre_attention_norm",
    "compilation_worker_count",
    "duplicate_q_weight_sos",
)

TnxNeuronConfig: type[StrictModel] = create_model(  # type: ignore[call-overload]
    "TnxNeuronConfig",
    __base__=StrictModel,
    __doc__="transformers_neuronx.NeuronConfig keyword arguments (plain values).",
    **{name: (Any, None) for name in NEURON_CONFIG_FIELDS},
)


class TnxOptions(StrictModel):
    """``options:`` of the transformers-neuronx backend."""

    from_pretrained: dict[str, Any] = Field(
        default_factory=dict, description="extra from_pretrained keyword arguments, e.g. {unroll: 4}"
    )
    neuron_config: TnxNeuronConfig = Field(  # type: ignore[valid-type]
        default_factory=TnxNeuronConfig,
        description="transformers_neuronx.NeuronConfig keyword arguments, e.g. {fuse_qkv: true}",
    )


def model_class_for(model_type: str) -> str:
    """The ``transformers_neuronx`` class name for a checkpoint's model_type."""
    if model_type in UNSUPPORTED_MODEL_TYPES:
        raise InvalidInputError(UNSUPPORTED_MODEL_TYPES[model_type])
    try:
        return MODEL_CLASSES[model_type]
    except KeyError:
        msg = f"transformers-neuronx has no sampling class for model_type '{model_type}'"
        raise InvalidInputError(msg, hint=f"supported: {', '.join(sorted(MODEL_CLASSES))}") from None


def from_pretrained_kwargs(spec: BuildSpec) -> dict[str, Any]:
    """``<Arch>ForSampling.from_pretrained(path, **kwargs)`` for a BuildSpec.

    Both bucket lists are passed as lists, so the compiled buckets are exactly the plan's (an int
    ``n_positions`` would make transformers-neuronx pick powers of two itself).
    """
    kwargs: dict[str, Any] = {
        "batch_size": spec.batch_size,
        "tp_degree": spec.tp_degree,
        "amp": AMP[spec.amp],
        "n_positions": list(spec.sequence.token_buckets),
        "context_length_estimate": list(spec.sequence.context_buckets),
    }
    kwargs.update(spec.options.get("from_pretrained") or {})
    return kwargs


def sanitize_file_name(key: str) -> str:
    """A tensor name as a file name: spaces to underscores, then only word characters, '-' and '.'."""
    name = re.sub(r"[^-\w.]", "", key.strip().replace(" ", "_"))
    if name in {"", ".", ".."}:
        msg = f"cannot turn tensor name {key!r} into a file name"
        raise InvalidInputError(msg)
    return name


def write_split_checkpoint(checkpoint_dir: Path, out_dir: Path, dtype: str) -> dict[str, str]:
    """Write ``checkpoint_dir``'s safetensors as transformers-neuronx's split checkpoint in ``out_dir``.

    One tensor is in memory at a time. Floating-point tensors are cast to ``dtype``. Returns the
    key -> file name table that is also written to ``pytorch_model.bin/key_to_filename.json``.
    """
    import torch
    from safetensors import safe_open

    target = getattr(torch, dtype)
    split = out_dir / SPLIT_DIR
    split.mkdir(parents=True, exist_ok=True)
    table: dict[str, str] = {}
    index = 0
    for path in checkpoint_weight_files(checkpoint_dir):
        if path.name.endswith(".index.json"):
            continue
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                tensor = f.get_tensor(key)
                if tensor.is_floating_point():
                    tensor = tensor.to(target)
                name = f"p{index}.{sanitize_file_name(key)}"
                torch.save(tensor, split / name)
                table[key] = name
                index += 1
                del tensor
    (split / KEY_TO_FILENAME).write_text(json.dumps(table, indent=2), encoding="utf-8")
    return table


class TransformersNeuronxBackend(NeuronBackend):
    name: ClassVar[str] = "transformers-neuronx"
    # save() writes the compiled kernels' NEFFs only; load() reads them back into a model made with
    # from_pretrained(checkpoint), and to_neuron() then loads that checkpoint's weights onto the device
    # (aws-neuron/transformers-neuronx src/transformers_neuronx/base.py save/load/to_neuron).
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        False,
        "transformers-neuronx base.py: save() writes NEFFs only; weights loaded by to_neuron() from the checkpoint",
    )
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        4 * GIB, 2.0, 2 * GIB, False, "from_pretrained loads the model on the host, then to_neuron compiles"
    )
    toolchain_package: ClassVar[str | None] = "transformers-neuronx"
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = (ServingStack.torchserve,)
    # transformers-neuronx reads NEURON_CC_FLAGS at compile time; the profile's flags go there too.
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.PROFILE_AND_ENV
    options_model: ClassVar[type[BaseModel] | None] = TnxOptions
    description: ClassVar[str] = "transformers-neuronx (deprecated by AWS): <Arch>ForSampling, to_neuron(), save()"
    # transformers-neuronx pads attention heads to the tp degree (the TorchServe Llama-2-13B
    # example runs 40 heads on tp 12), so it does not need tp to divide the head count.
    requires_tp_divides_heads: ClassVar[bool] = False
    packages: ClassVar[tuple[str, ...]] = (
        "transformers-neuronx",
        "neuronx-cc",
        "torch-neuronx",
        "torch",
        "transformers",
    )
    required: ClassVar[tuple[str, ...]] = ("transformers-neuronx", "neuronx-cc", "torch-neuronx")
    install_hint: ClassVar[str | None] = (
        f"pip install --extra-index-url {NEURON_EXTRA_INDEX} transformers-neuronx "
        "neuronx-cc torch-neuronx (its last release is in Neuron SDK 2.26.1)"
    )

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        # Any degree up to the instance's core count (tp 12 on inf2.48xlarge is a documented setup).
        return frozenset(range(1, max_cores(target, options) + 1))

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        problems = managed_problems(spec, "from_pretrained", _MANAGED)
        model_type = model_type_for_checks(spec)
        if model_type in UNSUPPORTED_MODEL_TYPES:
            problems.append(SpecProblem(("model", "id"), UNSUPPORTED_MODEL_TYPES[model_type]))
        elif model_type is not None and model_type not in MODEL_CLASSES:
            msg = f"transformers-neuronx has no sampling class for model_type '{model_type}'"
            problems.append(SpecProblem(("model", "id"), f"{msg} (supported: {', '.join(sorted(MODEL_CLASSES))})"))
        return problems

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        flags = applied_compiler_flags(self.compiler_flags_mode, job.spec.compiler_flags, os.environ)
        return build_env(job.spec, job.env, job.work_dir, compiler_flags=flags)

    def plan(self, spec: BuildSpec) -> CompilePlan:
        plan = super().plan(spec)
        layout = {
            "presharded": "split checkpoint (one file per tensor) in artifacts/checkpoint/, sharded by to_neuron()",
            "on-load": "checkpoint safetensors in artifacts/checkpoint/, sharded by to_neuron()",
            "reference": "not in the bundle: from_pretrained() reads the original checkpoint",
        }[spec.weights]
        return CompilePlan(graphs=plan.graphs, weights_layout=layout, notes=plan.notes)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        spec = job.spec
        class_name = model_class_for(model_type_of(job.checkpoint_dir))
        out = job.artifacts_dir
        checkpoint = out / CHECKPOINT_DIR
        prep = job.progress.task("transformers-neuronx: prepare checkpoint")
        if spec.weights == "presharded":
            write_split_checkpoint(job.checkpoint_dir, checkpoint, spec.dtype)
            copy_tokenizer_files(job.checkpoint_dir, checkpoint)
            load_from = checkpoint
        elif spec.weights == "on-load":
            copy_checkpoint(job.checkpoint_dir, checkpoint)
            load_from = checkpoint
        else:
            load_from = job.checkpoint_dir
        prep.done()
        tnx = importlib.import_module("transformers_neuronx")
        model_cls = getattr(tnx, class_name)
        kwargs = from_pretrained_kwargs(spec)
        neuron_config_args = user_neuron_config(spec)
        if neuron_config_args:
            kwargs["neuron_config"] = tnx.NeuronConfig(**neuron_config_args)
        task = job.progress.task(
            f"transformers-neuronx: compile {len(job.plan.graphs)} graph(s)", total=len(job.plan.graphs)
        )
        start = time.monotonic()
        model = model_cls.from_pretrained(str(load_from), **kwargs)
        # to_neuron() compiles and loads onto this host's devices; without devices of the trn1 family
        # (inf2/trn1), cpu_compile() compiles only (transformers-neuronx base.py).
        if host_platform() == "trn1":
            model.to_neuron()
        else:
            model.cpu_compile()
        neff_dir = out / NEFF_DIR
        model.save(str(neff_dir))
        seconds = time.monotonic() - start
        task.advance(len(job.plan.graphs))
        neffs = sorted(p.name for p in neff_dir.glob("*.neff"))
        recorded = {k: v for k, v in kwargs.items() if k != "neuron_config"}
        if neuron_config_args:
            recorded["neuron_config"] = neuron_config_args
        info = {
            "model_class": f"transformers_neuronx.{class_name}",
            "from_pretrained": recorded,
            "weights": spec.weights,
            "neffs": neffs,
        }
        extra = neuron_extra(
            lambda bundle: tnx_load_snippet(bundle, class_name, recorded, spec.weights),
            "transformers_neuronx",
            info,
            timing="one compile builds every kernel; per-graph seconds are its total split evenly",
        )
        return CompileResult(graphs=even_split(job.plan.graphs, bundle_rel(job, neff_dir), seconds), extra=extra)

    def load_snippet(self, bundle_dir: str) -> str | None:
        info = backend_extra(bundle_dir, "transformers_neuronx")
        if not info:
            return None
        class_name = str(info.get("model_class", "")).rpartition(".")[2] or "LlamaForSampling"
        return tnx_load_snippet(
            bundle_dir, class_name, dict(info.get("from_pretrained") or {}), str(info.get("weights"))
        )


def tnx_load_snippet(bundle_dir: str, class_name: str, kwargs: Mapping[str, Any], weights: str) -> str:
    """Python lines that reload a transformers-neuronx bundle: same kwargs, load(), to_neuron()."""
    plain = {k: v for k, v in kwargs.items() if k != "neuron_config"}
    args = ", ".join(f"{k}={v!r}" for k, v in plain.items())
    source = f'f"{{bundle}}/artifacts/{CHECKPOINT_DIR}"' if weights != "reference" else '"/path/to/checkpoint"'
    lines = [bundle_line(bundle_dir), f"from transformers_neuronx import {class_name}"]
    if "neuron_config" in kwargs:
        lines[1] += ", NeuronConfig"
        args += f", neuron_config=NeuronConfig(**{dict(kwargs['neuron_config'])!r})"
    if weights == "reference":
        lines.append("# weights: reference -> the original Hugging Face checkpoint directory")
    lines += [
        f"model = {class_name}.from_pretrained({source}, {args})",
        f'model.load(f"{{bundle}}/artifacts/{NEFF_DIR}")  # NEFFs match by HLO hash: same versions and kwargs',
        "model.to_neuron()",
    ]
    return "\n".join(lines)
