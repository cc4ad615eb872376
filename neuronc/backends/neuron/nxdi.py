"""NxD Inference backend (neuronx-distributed-inference): ``Neuron<Arch>ForCausalLM.compile()``.

The profile maps to ``NeuronConfig`` keyword arguments (``neuron_config_kwargs``, a pure function);
the model class comes from the checkpoint's ``model_type`` (``model_class_for``). ``compile()``
writes ``neuron_config.json`` and ``model.pt`` (every bucket's NEFF in one TorchScript module)
into ``artifacts/``; with ``weights: presharded`` NxDI also writes its own rank shards to
``artifacts/weights/tp{rank}_sharded_checkpoint.safetensors``. With ``on-load`` the checkpoint's
safetensors go into ``artifacts/`` so NxDI's shard-on-load finds them there: NxDI reads weights
from ``_name_or_path`` in neuron_config.json when that path exists, else from the directory given
to the model constructor (aws-neuron/neuronx-distributed-inference
src/neuronx_distributed_inference/models/application_base.py ``checkpoint_loader_fn``), and
neuronc rewrites ``_name_or_path`` to the model id so that a bundle never points at the build
host's disk.

``options.serving: vllm`` compiles the bundle the way the vllm-neuron plugin loads precompiled
artifacts (``nxdi_serving.py``).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model, field_validator

from neuronc.backends.base import (
    GIB,
    ROLE_CONTEXT,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    HostRamModel,
    SpecProblem,
    check_import_reference,
)
from neuronc.backends.neuron.common import (
    NXD_PACKAGES,
    NeuronBackend,
    managed_problems,
    neuron_extra,
    user_neuron_config,
)
from neuronc.backends.neuron.env import NEURON_EXTRA_INDEX, build_env, logical_nc_config
from neuronc.backends.neuron.files import (
    backend_extra,
    bundle_line,
    bundle_rel,
    copy_checkpoint,
    even_split,
    is_hub_id,
    model_type_for_checks,
    model_type_of,
)
from neuronc.backends.neuron.nxdi_fields import MOE_NEURON_CONFIG_FIELDS, NEURON_CONFIG_FIELDS
from neuronc.backends.neuron.nxdi_serving import SERVING_MODES, serving_kwargs, serving_problems
from neuronc.backends.neuron.serving import NxdiServing
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.errors import MISSING_LIBRARY, EnvironmentIncompatibleError, InvalidInputError
from neuronc.hardware import chip
from neuronc.hfcompat import legacy_rope_fields
from neuronc.keys import CompilerFlagsMode
from neuronc.spec import ServingStack, StrictModel

if TYPE_CHECKING:
    from neuronc.backends.serving import ServingCapability
    from neuronc.spec import BuildSpec

_MODELS = "neuronx_distributed_inference.models"
# model_type -> (module, class), from NxD Inference's registry of causal LMs
# (aws-neuron/neuronx-distributed-inference src/neuronx_distributed_inference/utils/constants.py
# MODEL_TYPES, task "causal-lm"), text-only models.
MODEL_CLASSES: dict[str, tuple[str, str]] = {
    "llama": (f"{_MODELS}.llama.modeling_llama", "NeuronLlamaForCausalLM"),
    "mistral": (f"{_MODELS}.mistral.modeling_mistral", "NeuronMistralForCausalLM"),
    "mixtral": (f"{_MODELS}.mixtral.modeling_mixtral", "NeuronMixtralForCausalLM"),
    "dbrx": (f"{_MODELS}.dbrx.modeling_dbrx", "NeuronDbrxForCausalLM"),
    "qwen2": (f"{_MODELS}.qwen2.modeling_qwen2", "NeuronQwen2ForCausalLM"),
    "qwen3": (f"{_MODELS}.qwen3.modeling_qwen3", "NeuronQwen3ForCausalLM"),
    "qwen3_moe": (f"{_MODELS}.qwen3_moe.modeling_qwen3_moe", "NeuronQwen3MoeForCausalLM"),
    "gpt_oss": (f"{_MODELS}.gpt_oss.modeling_gpt_oss", "NeuronGptOssForCausalLM"),
}
# Classes that are not in every NxD Inference release (the v0.6.10598 tag is Neuron SDK 2.26.1's):
# gpt_oss arrived with v0.7.14366 (SDK 2.27), mistral after it (the main branch's SDK 2.29 sources).
FIRST_RELEASE: dict[str, str] = {"gpt_oss": "0.7 (Neuron SDK 2.27)", "mistral": "the Neuron SDK 2.29 sources"}
# Model types NxDI serves with more than one neuron config: neuronc builds one NeuronConfig per
# bundle, so it refuses them with the reason.
UNSUPPORTED_MODEL_TYPES: dict[str, str] = {
    "llama4": (
        "NxD Inference's Llama 4 (NeuronLlama4ForCausalLM) needs separate text and vision neuron configs "
        "(Llama4InferenceConfig(text_neuron_config=..., vision_neuron_config=...)); neuronc builds one "
        "NeuronConfig per bundle and does not compile llama4"
    ),
}

# Keys under options.neuron_config that neuronc sets itself from the profile's own fields.
MANAGED: dict[str, str] = {
    "tp_degree": "tp_degree",
    "batch_size": "batch_size",
    "seq_len": "sequence.max_length",
    "max_length": "sequence.max_length",
    "max_context_length": "sequence.max_context_length",
    "torch_dtype": "amp",
    "enable_bucketing": "sequence.context_buckets / sequence.token_buckets",
    "context_encoding_buckets": "sequence.context_buckets",
    "token_generation_buckets": "sequence.token_buckets",
    "save_sharded_checkpoint": "weights",
    "logical_nc_config": "options.logical_nc_config",
    "logical_neuron_cores": "options.logical_nc_config",
    "target": "target",
}

# ``options.neuron_config``: any keyword argument NeuronConfig reads (values are NxDI's to check).
NxdiNeuronConfig: type[StrictModel] = create_model(  # type: ignore[call-overload]
    "NxdiNeuronConfig",
    __base__=StrictModel,
    __doc__="Extra NeuronConfig keyword arguments (e.g. fused_qkv: true); names as NxD Inference reads them.",
    **{name: (Any, None) for name in sorted(NEURON_CONFIG_FIELDS | MOE_NEURON_CONFIG_FIELDS)},
)


class NxdiOptions(StrictModel):
    """``options:`` of the nxdi backend."""

    logical_nc_config: Literal[1, 2] | None = Field(
        default=None, description="logical NeuronCore size (default 2 on trn2 and trn3, else 1)"
    )
    model_class: str | None = Field(
        default=None, description="'module:Class' to use instead of the model_type's Neuron<Arch>ForCausalLM"
    )
    serving: Literal[SERVING_MODES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="'vllm': compile the bundle as the vllm-neuron plugin loads precompiled artifacts",
    )
    neuron_config: NxdiNeuronConfig = Field(  # type: ignore[valid-type]
        default_factory=NxdiNeuronConfig, description="extra NeuronConfig keyword arguments"
    )

    @field_validator("model_class")
    @classmethod
    def _model_class(cls, value: str | None) -> str | None:
        return None if value is None else check_import_reference(value, "Class")


def model_class_for(model_type: str, model_class: str | None = None) -> tuple[str, str]:
    """The NxDI ``(module, class)`` for a checkpoint's model_type, or the ``model_class`` option."""
    if model_class:
        module, _, cls = model_class.partition(":")
        return module, cls
    if model_type in UNSUPPORTED_MODEL_TYPES:
        raise InvalidInputError(UNSUPPORTED_MODEL_TYPES[model_type], hint="set options.model_class: 'module:Class'")
    try:
        return MODEL_CLASSES[model_type]
    except KeyError:
        known = ", ".join(sorted(MODEL_CLASSES))
        msg = f"nxdi has no causal-LM class for model_type '{model_type}'"
        raise InvalidInputError(msg, hint=f"supported: {known}; or set options.model_class: 'module:Class'") from None


def bucketing_enabled(spec: BuildSpec) -> bool:
    """NxDI compiles one CTE graph at max_context_length and one TKG graph at max_length unless bucketing is on."""
    seq = spec.sequence
    return seq.context_buckets != (seq.max_context_length,) or seq.token_buckets != (seq.max_length,)


def neuron_config_kwargs(spec: BuildSpec) -> dict[str, Any]:
    """``NeuronConfig(**kwargs)`` for a BuildSpec (aws-neuron/neuronx-distributed-inference models/config.py)."""
    seq = spec.sequence
    serving = spec.options.get("serving")
    kwargs: dict[str, Any] = {
        "tp_degree": spec.tp_degree,
        "batch_size": spec.batch_size,
        "seq_len": seq.max_length,
        "max_length": seq.max_length,
        "max_context_length": seq.max_context_length,
        "torch_dtype": spec.dtype,
        "enable_bucketing": bucketing_enabled(spec) or serving is not None,
        "save_sharded_checkpoint": spec.weights == "presharded",
        "logical_nc_config": logical_nc_config(spec),
        "target": spec.target,
    }
    if kwargs["enable_bucketing"]:
        # Always explicit: NxDI's own defaults start at 128 and would not match the plan.
        kwargs["context_encoding_buckets"] = list(seq.context_buckets)
        kwargs["token_generation_buckets"] = list(seq.token_buckets)
    if serving is not None:
        kwargs.update(serving_kwargs(serving, spec.batch_size))
    kwargs.update(user_neuron_config(spec))
    return kwargs


class NxdiBackend(NeuronBackend):
    name: ClassVar[str] = "nxdi"
    # NeuronApplicationBase.compile traces with ModelBuilder.trace(initialize_model_weights=False): model.pt
    # holds no weights; they are sharded beside it (save_sharded_checkpoint) or at load, and bound with
    # NxDModel.set_weights (aws-neuron/neuronx-distributed-inference src/neuronx_distributed_inference/
    # models/application_base.py; aws-neuron/neuronx-distributed src/neuronx_distributed/trace/model_builder.py).
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        False,
        "neuronx-distributed-inference models/application_base.py compile(): "
        "ModelBuilder.trace(initialize_model_weights=False); weights sharded beside model.pt",
    )
    # NxD traces the whole model on the host before neuronx-cc runs: Llama-3.1-8B (16 GB bf16) is killed
    # during HLO generation on a 32 GB host, so 2× weights + base.
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        4 * GIB, 2.0, 2 * GIB, False, "HLO generation holds ~2× the weights; neuronx-cc per graph"
    )
    # NxD's ModelBuilder passes neuronx-cc only the model's own get_compiler_args(); nothing in NxD or
    # NxDI reads NEURON_CC_FLAGS (aws-neuron/neuronx-distributed src/neuronx_distributed/trace/
    # model_builder.py; aws-neuron/neuronx-distributed-inference models/model_wrapper.py).
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.NONE
    toolchain_package: ClassVar[str | None] = "neuronx-distributed-inference"
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = (ServingStack.vllm,)
    serving: ClassVar[ServingCapability | None] = NxdiServing()
    options_model: ClassVar[type[BaseModel] | None] = NxdiOptions
    description: ClassVar[str] = "NxD Inference: NeuronConfig/InferenceConfig, Neuron<Arch>ForCausalLM.compile()"
    packages: ClassVar[tuple[str, ...]] = (*NXD_PACKAGES, "neuronx-distributed-inference", "torch", "transformers")
    required: ClassVar[tuple[str, ...]] = (
        "neuronx-cc",
        "torch-neuronx",
        "neuronx-distributed",
        "neuronx-distributed-inference",
    )
    install_hint: ClassVar[str | None] = (
        f"pip install --extra-index-url {NEURON_EXTRA_INDEX} "
        "neuronx-cc torch-neuronx neuronx-distributed neuronx-distributed-inference "
        "(the Neuron SDK is not on PyPI; use a Neuron DLAMI or DLC)"
    )

    def compiler_flags_problem(self) -> str:
        return (
            "the nxdi backend cannot apply compiler flags: NxD compiles with the model class's own "
            "get_compiler_args() and reads no NEURON_CC_FLAGS; remove compiler.flags (NeuronConfig compiler "
            "knobs such as cc_pipeline_tiling_factor go under options.neuron_config, or name a model class "
            "that overrides get_compiler_args() in options.model_class)"
        )

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        options = NxdiOptions.model_validate(spec.options)
        problems = managed_problems(spec, "neuron_config", MANAGED)
        device = chip(spec.target)
        if options.logical_nc_config is not None and device and options.logical_nc_config not in device.lnc_sizes:
            msg = f"LNC {options.logical_nc_config} does not exist on {spec.target} (LNC 2 is trn2/trn3 only)"
            problems.append(SpecProblem(("options", "logical_nc_config"), msg))
        model_type = model_type_for_checks(spec)
        if options.model_class is None and model_type is not None:
            if model_type in UNSUPPORTED_MODEL_TYPES:
                problems.append(SpecProblem(("model", "id"), UNSUPPORTED_MODEL_TYPES[model_type]))
            elif model_type not in MODEL_CLASSES:
                known = ", ".join(sorted(MODEL_CLASSES))
                msg = f"nxdi has no causal-LM class for model_type '{model_type}' (supported: {known})"
                problems.append(SpecProblem(("model", "id"), msg + "; or set options.model_class: 'module:Class'"))
        if options.serving is not None:
            problems += serving_problems(options.serving, spec.batch_size, user_neuron_config(spec))
        return problems

    def plan(self, spec: BuildSpec) -> CompilePlan:
        plan = super().plan(spec)
        kwargs = neuron_config_kwargs(spec)
        ctx_batch = int(kwargs.get("ctx_batch_size", spec.batch_size))
        graphs = tuple(GraphSpec(g.role, ctx_batch, g.bucket) if g.role == ROLE_CONTEXT else g for g in plan.graphs)
        layout = {
            "presharded": f"NxDI's {spec.tp_degree} rank shards in artifacts/weights/ (tp<rank>_sharded_checkpoint)",
            "on-load": "checkpoint safetensors in artifacts/, sharded by NxDI when loaded",
            "reference": "not in the bundle: pass the original checkpoint directory when loading",
        }[spec.weights]
        notes = list(plan.notes)
        if kwargs.get("is_continuous_batching"):
            notes.append(f"continuous batching on: context encoding runs at batch {ctx_batch}")
        if spec.options.get("serving"):
            notes.append(f"compiled for serving with {spec.options['serving']} (vllm-neuron's NeuronConfig defaults)")
        return CompilePlan(graphs=graphs, weights_layout=layout, notes=tuple(notes))

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        # NxDI lets NEURON_LOGICAL_NC_CONFIG override the config; pin it to the profile's value.
        extra = {"NEURON_LOGICAL_NC_CONFIG": str(logical_nc_config(job.spec))}
        return build_env(job.spec, job.env, job.work_dir, extra=extra)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        spec = job.spec
        options = NxdiOptions.model_validate(spec.options)
        model_type = model_type_of(job.checkpoint_dir)
        module_name, class_name = model_class_for(model_type, options.model_class)
        since = FIRST_RELEASE.get(model_type)
        hint = f"{class_name} is in NxD Inference from {since}" if since else "check options.model_class"
        missing = f"{module_name}:{class_name} is not in this NxD Inference"
        try:
            model_cls = getattr(importlib.import_module(module_name), class_name)
        except ImportError as exc:
            raise MISSING_LIBRARY.convert(exc, missing, hint=hint) from None
        except AttributeError:
            raise EnvironmentIncompatibleError(missing, hint=hint) from None
        from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config

        kwargs = neuron_config_kwargs(spec)
        neuron_config = model_cls.get_neuron_config_cls()(**kwargs)
        load_config = _with_legacy_rope(load_pretrained_config(str(job.checkpoint_dir)), job.checkpoint_dir)
        config = model_cls.get_config_cls()(neuron_config, load_config=load_config)
        out = job.artifacts_dir
        task = job.progress.task(f"nxdi: compile {len(job.plan.graphs)} graph(s)", total=len(job.plan.graphs))
        start = time.monotonic()
        model = model_cls(str(job.checkpoint_dir), config)
        # NxDI joins file names onto the path by string concatenation: it must end with "/".
        model.compile(str(out) + "/")
        seconds = time.monotonic() - start
        task.advance(len(job.plan.graphs))
        bundled: list[str] = []
        if spec.weights == "on-load":
            bundled = copy_checkpoint(job.checkpoint_dir, out, with_config=False)
        _point_name_or_path_away(out / "neuron_config.json", spec)
        artifact = bundle_rel(job, out / "model.pt")
        info = {
            "model_class": f"{module_name}:{class_name}",
            "neuron_config": kwargs,
            "serving": options.serving,
            "weights": spec.weights,
            "checkpoint_files_in_artifacts": bundled,
        }
        extra = neuron_extra(
            lambda bundle: nxdi_load_snippet(bundle, module_name, class_name, spec.weights),
            "nxdi",
            info,
            timing="one NxDI compile() call builds every graph; per-graph seconds are its total split evenly",
        )
        return CompileResult(graphs=even_split(job.plan.graphs, artifact, seconds), extra=extra)

    def load_snippet(self, bundle_dir: str) -> str | None:
        info = backend_extra(bundle_dir, "nxdi")
        if not info:
            return None
        module_name, _, class_name = str(info.get("model_class") or ":".join(MODEL_CLASSES["llama"])).partition(":")
        return nxdi_load_snippet(bundle_dir, module_name, class_name, str(info.get("weights") or "presharded"))


def nxdi_load_snippet(bundle_dir: str, module_name: str, class_name: str, weights: str) -> str:
    """Python lines that load an nxdi bundle on a Neuron instance and generate with it."""
    compiled = 'f"{bundle}/artifacts/"'
    lines = [
        bundle_line(bundle_dir),
        f"from {module_name} import {class_name}",
        "from neuronx_distributed_inference.utils.hf_adapter import HuggingFaceGenerationAdapter",
        "from transformers import AutoTokenizer",
    ]
    if weights == "reference":
        lines += [
            f"config = {class_name}.get_config_cls().load({compiled})",
            "# weights: reference -> the original Hugging Face checkpoint directory:",
            f'model = {class_name}("/path/to/checkpoint", config)',
        ]
    else:
        lines.append(f"model = {class_name}({compiled})")
    lines += [
        f"model.load({compiled})",
        'tokenizer = AutoTokenizer.from_pretrained(f"{bundle}/model")',
        "generator = HuggingFaceGenerationAdapter(model)",
    ]
    return "\n".join(lines)


def _with_legacy_rope(load_config: Callable[[Any], None], checkpoint_dir: Path) -> Callable[[Any], None]:
    """NxDI's config loader, then ``rope_theta``/``rope_scaling`` in the 4.57 form when config.json lacks them.

    NxD Inference is pinned to transformers 4.57 and requires ``rope_theta``; a checkpoint saved by
    transformers 5 has only ``rope_parameters``, so NxDI would miss it (or, through 4.57's
    AutoConfig, silently take the default 10000). The values come from config.json's own
    ``rope_parameters``; a config.json with ``rope_theta`` is left exactly as NxDI read it.
    """
    from neuronc.model.files import read_model_config

    legacy = legacy_rope_fields(read_model_config(checkpoint_dir) or {})

    def load(config: Any) -> None:
        load_config(config)
        for key, value in legacy.items():
            setattr(config, key, value)

    return load


def _point_name_or_path_away(path: Path, spec: BuildSpec) -> None:
    """Replace the build host's checkpoint path in neuron_config.json with the model id.

    NxDI loads weights from ``_name_or_path`` only if that path exists; otherwise from the
    directory passed to the constructor, which is the bundle's artifacts/ (or, for reference
    weights, the checkpoint the user names). An absolute build-host path would make a bundle read
    weights from outside itself whenever that path happened to exist.
    """
    if not path.is_file():
        return
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "_name_or_path" in data:
        data["_name_or_path"] = spec.model.id if is_hub_id(spec) else Path(spec.model.id).name
        path.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
