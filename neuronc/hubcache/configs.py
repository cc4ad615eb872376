"""Model configs as optimum-neuron 0.4.5 sees them: ``to_diff_dict()`` without transformers.

optimum-neuron's arch digest hashes ``PretrainedConfig.to_diff_dict()`` (transformers 4.57) minus a
whitelist. ``to_diff_dict()`` keeps a key when it is not a base ``PretrainedConfig`` attribute, or
when it differs from the base default or from the model class's default. neuronc reproduces this
from a table of defaults generated from transformers 4.57.6 (``_config_defaults.py``) plus the few
values each config class derives in its ``__init__`` (``head_dim``, ``num_key_value_heads``,
``layer_types`` ...). The emulation reads config.json as 4.57 would whichever transformers is
installed, including a config.json that transformers 5 wrote (its ``rope_parameters`` is an unknown
key to 4.57, kept as is, and ``rope_theta`` takes 4.57's class default), because that is what
optimum-neuron 0.4.5 hashes. For a model type outside the table, transformers is imported lazily,
only if the installed one is 4.57.x (``method == "transformers"``); otherwise (not installed, or
5.x) there is no digest and lookups fall back to comparing architecture fields directly.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# optimum/neuron/cache/entries/cache_entry.py (0.4.5): keys removed before hashing.
CACHE_WHITE_LIST = (
    "_name_or_path",
    "transformers_version",
    "_diffusers_version",
    "eos_token_id",
    "bos_token_id",
    "pad_token_id",
    "torchscript",
    "torch_dtype",
    "_commit_hash",
    "sample_size",
    "projection_dim",
    "_use_default_values",
    "_attn_implementation_autoset",
    "return_dict",
)
# Keys PretrainedConfig consumes in __init__ or drops when serialising.
_CONSUMED = frozenset(
    {
        "torch_dtype",
        "dtype",
        "transformers_version",
        "_commit_hash",
        "attn_implementation",
        "num_labels",
        "name_or_path",
    }
)
_NOT_SERIALIZED = (
    "_auto_class",
    "_commit_hash",
    "_attn_implementation_internal",
    "base_model_tp_plan",
    "base_model_pp_plan",
    "_name_or_path",
)

DigestMethod = Literal["emulated", "transformers"]


def arch_digest(config: Mapping[str, Any], task: str | None) -> str:
    """optimum-neuron 0.4.5's arch digest of a normalised config (SingleModelCacheEntry.arch_digest)."""
    body = {k: v for k, v in config.items() if k != "neuron"}
    arch = {"model_type": body.get("model_type"), "task": task, "config": body}
    return hashlib.sha256(json.dumps(arch, sort_keys=True).encode("utf-8")).hexdigest()


def strip_whitelist(config: Mapping[str, Any]) -> dict[str, Any]:
    """Drop CACHE_WHITE_LIST keys, as SingleModelCacheEntry does before hashing."""
    return {k: v for k, v in config.items() if k not in CACHE_WHITE_LIST}


@dataclass(frozen=True)
class ModelArch:
    """A model's normalised config (lookup side), its task, and how it was computed."""

    model_type: str
    task: str
    config: dict[str, Any]
    method: DigestMethod
    checkpoint_dtype: str | None

    @property
    def digest(self) -> str:
        """The digest optimum-neuron 0.4.5's lookup computes for this model."""
        return arch_digest(self.config, self.task)

    def export_config(self, dtype: str | None) -> dict[str, Any]:
        """The config an optimum-neuron 0.4.5 export writes: dtype set from the neuron config, head_dim filled."""
        config = dict(self.config)
        if dtype is not None:
            config["dtype"] = dtype
        if "head_dim" in config and config["head_dim"] is None:
            hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
            if isinstance(hidden, int) and isinstance(heads, int) and heads:
                config["head_dim"] = hidden // heads
        return config

    def export_digest(self, dtype: str | None) -> str:
        """The digest folder an optimum-neuron 0.4.5 export with ``dtype`` writes its entry into."""
        return arch_digest(self.export_config(dtype), self.task)


def normalize_config(
    raw: Mapping[str, Any],
    task: str = "text-generation",
    *,
    method: DigestMethod | None = None,
) -> ModelArch | None:
    """Normalise a config.json dict as optimum-neuron 0.4.5 does before hashing.

    ``method=None`` emulates transformers for the model types in the generated table and imports
    transformers (lazily) for others; it returns None when neither is possible.
    """
    model_type = raw.get("model_type")
    if not isinstance(model_type, str):
        return None
    checkpoint_dtype = _checkpoint_dtype(raw)
    text_config = raw.get("text_config")
    emulable = model_type in _class_table() and not (task == "text-generation" and isinstance(text_config, dict))
    if method == "emulated" or (method is None and emulable):
        if not emulable:
            return None
        config = strip_whitelist(emulate_diff_dict(raw))
        return ModelArch(model_type, task, config, "emulated", checkpoint_dtype)
    config_t = _diff_dict_with_transformers(raw, task)
    if config_t is None:
        return None
    config_t = strip_whitelist(config_t)
    config_t.pop("neuron", None)
    text_type = config_t.get("model_type")
    return ModelArch(
        text_type if isinstance(text_type, str) else model_type, task, config_t, "transformers", checkpoint_dtype
    )


def _checkpoint_dtype(raw: Mapping[str, Any]) -> str | None:
    value = raw.get("dtype") or raw.get("torch_dtype")
    return value if isinstance(value, str) else None


def _class_table() -> dict[str, dict[str, dict[str, Any]]]:
    from neuronc.hubcache._config_defaults import CLASS_DEFAULTS

    return CLASS_DEFAULTS


def emulate_diff_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``AutoConfig.for_model(**raw).to_diff_dict()`` (transformers 4.57) for a model type in the table."""
    from neuronc.hubcache._config_defaults import BASE_DEFAULTS, CLASS_DEFAULTS

    model_type = str(raw["model_type"])
    table = CLASS_DEFAULTS[model_type]
    class_defaults = {**BASE_DEFAULTS, **table["overrides"]}
    params: dict[str, Any] = table["params"]
    given = {k: copy.deepcopy(v) for k, v in raw.items()}

    # The instance __dict__ after __init__: class defaults, then every given key (unknown keys become
    # attributes too), then what PretrainedConfig.__init__ consumes.
    inst = copy.deepcopy(class_defaults)
    for key, value in given.items():
        if key in _CONSUMED:
            continue
        inst[key] = value
    dtype = given.get("dtype") if given.get("dtype") is not None else given.get("torch_dtype")
    inst["dtype"] = dtype if dtype is not None else class_defaults.get("dtype")
    if "id2label" in given and isinstance(given["id2label"], dict):
        inst["id2label"] = {int(k): v for k, v in given["id2label"].items()}
        inst["label2id"] = given.get("label2id")  # not derived when id2label is given
    elif isinstance(given.get("num_labels"), int):
        inst["id2label"] = {i: f"LABEL_{i}" for i in range(given["num_labels"])}
        inst["label2id"] = {f"LABEL_{i}": i for i in range(given["num_labels"])}
    if isinstance(inst.get("pruned_heads"), dict):
        inst["pruned_heads"] = {int(k): v for k, v in inst["pruned_heads"].items()}
    for rule in _RULES.get(model_type, ()):
        rule(inst, given, params)
    inst["model_type"] = model_type

    diff: dict[str, Any] = {}
    for key, value in inst.items():
        if key not in BASE_DEFAULTS or value != BASE_DEFAULTS[key] or value != class_defaults.get(key, value):
            diff[key] = value
    for key in _NOT_SERIALIZED:
        diff.pop(key, None)
    return diff


# -- what each config class derives in __init__ (transformers 4.57) ---------------------------------

Rule = Callable[[dict[str, Any], Mapping[str, Any], Mapping[str, Any]], None]


def _given_or_param(name: str, given: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    return given[name] if name in given else params.get(name)


def _kv_heads(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if _given_or_param("num_key_value_heads", given, params) is None:
        inst["num_key_value_heads"] = inst["num_attention_heads"]


def _head_dim_from_hidden(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if _given_or_param("head_dim", given, params) is None:
        inst["head_dim"] = inst["hidden_size"] // inst["num_attention_heads"]


def _rope_type_from_type(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    rope = inst.get("rope_scaling")
    if isinstance(rope, dict) and "type" in rope:
        rope["rope_type"] = rope["type"]


def _phi3_rope(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    rope = inst.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("type") in ("su", "yarn"):
        rope["type"] = "longrope"


def _sliding_window(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    window = _given_or_param("sliding_window", given, params)
    inst["sliding_window"] = window if _given_or_param("use_sliding_window", given, params) else None


def _qwen_layer_types(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if _given_or_param("layer_types", given, params) is None:
        window, max_window_layers = inst["sliding_window"], inst["max_window_layers"]
        inst["layer_types"] = [
            "sliding_attention" if window is not None and i >= max_window_layers else "full_attention"
            for i in range(inst["num_hidden_layers"])
        ]


def _mlp_only_layers(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if _given_or_param("mlp_only_layers", given, params) is None:
        inst["mlp_only_layers"] = []


def _smollm3_layers(inst: dict[str, Any], given: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    layers = inst["num_hidden_layers"]
    if _given_or_param("no_rope_layers", given, params) is None:
        interval = inst["no_rope_layer_interval"]
        inst["no_rope_layers"] = [int((i + 1) % interval != 0) for i in range(layers)]
    if _given_or_param("layer_types", given, params) is None:
        use_window = _given_or_param("use_sliding_window", given, params)
        window = _given_or_param("sliding_window", given, params)
        inst["layer_types"] = [
            "sliding_attention"
            if use_window and window is not None and not inst["no_rope_layers"][i]
            else "full_attention"
            for i in range(layers)
        ]


_RULES: dict[str, tuple[Rule, ...]] = {
    "granite": (_kv_heads,),
    "llama": (_kv_heads, _head_dim_from_hidden, _rope_type_from_type),
    "mistral": (_kv_heads,),
    "mixtral": (_kv_heads,),
    "phi3": (_kv_heads, _phi3_rope),
    "qwen2": (_sliding_window, _kv_heads, _rope_type_from_type, _qwen_layer_types),
    "qwen3": (_sliding_window, _kv_heads, _rope_type_from_type, _qwen_layer_types),
    "qwen3_moe": (_sliding_window, _rope_type_from_type, _mlp_only_layers),
    "smollm3": (_kv_heads, _smollm3_layers, _rope_type_from_type),
}


def _diff_dict_with_transformers(raw: Mapping[str, Any], task: str) -> dict[str, Any] | None:
    """The exact path for model types outside the table: needs transformers 4.57.x (imported here only)."""
    from neuronc.hfcompat import transformers_is_sdk_series

    # optimum-neuron 0.4.5 pins transformers 4.57, and its digest is 4.57's to_diff_dict(). 5.x
    # serialises configs differently (rope_parameters instead of rope_theta/rope_scaling, fewer
    # generation defaults), so its to_diff_dict() would give a digest no 0.4.5 entry has.
    if not transformers_is_sdk_series():
        return None
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return None
    try:
        # What AutoConfig.from_pretrained does once it has read config.json.
        config = CONFIG_MAPPING[str(raw["model_type"])].from_dict(copy.deepcopy(dict(raw)))
    except (ImportError, ValueError, KeyError, TypeError):  # unknown type, bad config, broken install
        return None
    if task == "text-generation":
        text = config.get_text_config()
        if text is not None:
            config = text
    result: dict[str, Any] = config.to_diff_dict()
    return result


def emulated_model_types() -> list[str]:
    """Model types whose digest neuronc computes without transformers."""
    return sorted(_class_table())
