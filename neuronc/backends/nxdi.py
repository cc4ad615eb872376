"""NxD Inference backend (neuronx-distributed-inference): ``Neuron<Arch>ForCausalLM.compile()``.

The profile maps to ``NeuronConfig`` keyword arguments (``neuron_config_kwargs``, a pure function);
the model class comes from the checkpoint's ``model_type`` (``model_class_for``). ``compile()``
writes ``neuron_config.json`` and ``model.pt`` (every bucket's NEFF in one TorchScript module)
into ``artifacts/``; with ``weights: presharded`` NxDI also writes its own rank shards to
``artifacts/weights/tp{rank}_sharded_checkpoint.safetensors``. With ``on-load`` the checkpoint's
safetensors go into ``artifacts/`` so NxDI's shard-on-load finds them there: NxDI reads weights
from ``_name_or_path`` in neuron_config.json when that path exists, else from the directory given
to the model constructor, and neuronc rewrites ``_name_or_path`` to the model id so that a bundle
never points at the build host's disk (reference/neuron-apis.md §1.6-§1.7).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends._neuron_common import (
    BUNDLE_PLACEHOLDER,
    NEURON_EXTRA_INDEX,
    NeuronBackend,
    bundle_line,
    bundle_rel,
    copy_checkpoint,
    even_split,
    is_hub_id,
    logical_nc_config,
    model_type_of,
    read_manifest,
    read_model_config,
)
from neuronc.backends.base import GIB, CompileJob, CompilePlan, CompileResult, HostRamModel
from neuronc.errors import InvalidInputError
from neuronc.hfcompat import legacy_rope_fields

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# model_type -> (module, class), from NxDI's own registries (utils/constants.py MODEL_TYPES and
# inference_demo.py); text-only causal LMs.
MODEL_CLASSES: dict[str, tuple[str, str]] = {
    "llama": ("neuronx_distributed_inference.models.llama.modeling_llama", "NeuronLlamaForCausalLM"),
    "mixtral": ("neuronx_distributed_inference.models.mixtral.modeling_mixtral", "NeuronMixtralForCausalLM"),
    "dbrx": ("neuronx_distributed_inference.models.dbrx.modeling_dbrx", "NeuronDbrxForCausalLM"),
    "qwen2": ("neuronx_distributed_inference.models.qwen2.modeling_qwen2", "NeuronQwen2ForCausalLM"),
    "qwen3": ("neuronx_distributed_inference.models.qwen3.modeling_qwen3", "NeuronQwen3ForCausalLM"),
    "qwen3_moe": ("neuronx_distributed_inference.models.qwen3_moe.modeling_qwen3_moe", "NeuronQwen3MoeForCausalLM"),
    "gpt_oss": ("neuronx_distributed_inference.models.gpt_oss.modeling_gpt_oss", "NeuronGptOssForCausalLM"),
    "llama4": ("neuronx_distributed_inference.models.llama4.modeling_llama4", "NeuronLlama4ForCausalLM"),
}

# Keys under options.neuron_config that neuronc sets itself from the profile.
_MANAGED = frozenset(
    {
        "tp_degree",
        "batch_size",
        "seq_len",
        "max_length",
        "max_context_length",
        "torch_dtype",
        "enable_bucketing",
        "context_encoding_buckets",
        "token_generation_buckets",
        "save_sharded_checkpoint",
        "logical_nc_config",
        "logical_neuron_cores",
        "target",
    }
)


def model_class_for(model_type: str, options: dict[str, Any] | None = None) -> tuple[str, str]:
    """The NxDI ``(module, class)`` for a checkpoint's model_type, or the ``model_class`` option."""
    override = (options or {}).get("model_class")
    if override:
        module, sep, cls = str(override).partition(":")
        if not sep or not module or not cls:
            msg = f"options.model_class: expected 'module:Class', got {override!r}"
            raise InvalidInputError(msg)
        return module, cls
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
    """``NeuronConfig(**kwargs)`` for a BuildSpec (reference/neuron-apis.md §1.2)."""
    seq = spec.sequence
    kwargs: dict[str, Any] = {
        "tp_degree": spec.tp_degree,
        "batch_size": spec.batch_size,
        "seq_len": seq.max_length,
        "max_length": seq.max_length,
        "max_context_length": seq.max_context_length,
        "torch_dtype": spec.dtype,
        "enable_bucketing": bucketing_enabled(spec),
        "save_sharded_checkpoint": spec.weights == "presharded",
        "logical_nc_config": logical_nc_config(spec),
        "target": spec.target,
    }
    if kwargs["enable_bucketing"]:
        # Always explicit: NxDI's own defaults start at 128 and would not match the plan.
        kwargs["context_encoding_buckets"] = list(seq.context_buckets)
        kwargs["token_generation_buckets"] = list(seq.token_buckets)
    extra = spec.options.get("neuron_config") or {}
    clash = sorted(set(extra) & _MANAGED)
    if clash:
        msg = f"options.neuron_config sets {', '.join(clash)}, which come from the profile's own fields"
        raise InvalidInputError(msg, hint="set tp_degree, batch_size, sequence.*, amp, weights or target instead")
    kwargs.update(extra)
    return kwargs


class NxdiBackend(NeuronBackend):
    name: ClassVar[str] = "nxdi"
    # NxD traces the whole model on the host before neuronx-cc runs: Llama-3.1-8B (16 GB bf16) is killed
    # during HLO generation on a 32 GB host, so 2× weights + base.
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        4 * GIB, 2.0, 2 * GIB, False, "HLO generation holds ~2× the weights; neuronx-cc per graph"
    )
    toolchain_package: ClassVar[str | None] = "neuronx-distributed-inference"
    description: ClassVar[str] = "NxD Inference: NeuronConfig/InferenceConfig, Neuron<Arch>ForCausalLM.compile()"
    packages: ClassVar[tuple[str, ...]] = (
        "neuronx-cc",
        "torch-neuronx",
        "libneuronxla",
        "neuronx-distributed",
        "neuronx-distributed-inference",
        "torch",
        "transformers",
    )
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
    options_help: ClassVar[dict[str, str]] = {
        "logical_nc_config": "logical NeuronCore size (default 2 on trn2, else 1)",
        "neuron_config": "extra NeuronConfig keyword arguments, e.g. {fused_qkv: true}",
        "model_class": "'module:Class' to use instead of the model_type's Neuron<Arch>ForCausalLM",
    }

    def check_spec_or_raise(self, spec: BuildSpec) -> None:
        super().check_spec_or_raise(spec)
        extra = spec.options.get("neuron_config")
        if extra is not None and not isinstance(extra, dict):
            msg = "options.neuron_config must be a mapping of NeuronConfig keyword arguments"
            raise InvalidInputError(msg)
        neuron_config_kwargs(spec)

    def plan(self, spec: BuildSpec) -> CompilePlan:
        plan = super().plan(spec)
        layout = {
            "presharded": f"NxDI's {spec.tp_degree} rank shards in artifacts/weights/ (tp<rank>_sharded_checkpoint)",
            "on-load": "checkpoint safetensors in artifacts/, sharded by NxDI when loaded",
            "reference": "not in the bundle: pass the original checkpoint directory when loading",
        }[spec.weights]
        return CompilePlan(graphs=plan.graphs, weights_layout=layout, notes=plan.notes)

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        from neuronc.backends._neuron_common import build_env

        # NxDI lets NEURON_LOGICAL_NC_CONFIG override the config; pin it to the profile's value.
        extra = {"NEURON_LOGICAL_NC_CONFIG": str(logical_nc_config(job.spec))}
        return build_env(job.spec, job.env, job.work_dir, extra=extra)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        spec = job.spec
        module_name, class_name = model_class_for(model_type_of(job.checkpoint_dir), spec.options)
        model_cls = getattr(importlib.import_module(module_name), class_name)
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
        extra = {
            "load_snippet": self.load_snippet_for(spec, class_name, module_name),
            "nxdi": {
                "model_class": f"{module_name}:{class_name}",
                "neuron_config": kwargs,
                "weights": spec.weights,
                "checkpoint_files_in_artifacts": bundled,
            },
            "timing": "one NxDI compile() call builds every graph; per-graph seconds are its total split evenly",
        }
        return CompileResult(graphs=even_split(job.plan.graphs, artifact, seconds), extra=extra)

    def load_snippet_for(self, spec: BuildSpec, class_name: str, module_name: str) -> str:
        return nxdi_load_snippet(BUNDLE_PLACEHOLDER, module_name, class_name, spec.weights)

    def load_snippet(self, bundle_dir: str) -> str | None:
        manifest = read_manifest(bundle_dir)
        info = (manifest.get("extra") or {}).get("nxdi") or {}
        module_name, _, class_name = str(info.get("model_class") or ":".join(MODEL_CLASSES["llama"])).partition(":")
        weights = str(info.get("weights") or (manifest.get("profile") or {}).get("weights") or "presharded")
        return nxdi_load_snippet(bundle_dir, module_name, class_name, weights)


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
    legacy = legacy_rope_fields(read_model_config(checkpoint_dir))

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
