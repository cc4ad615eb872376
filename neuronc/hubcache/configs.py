"""Model configs as optimum-neuron 0.4.5 sees them: ``to_diff_dict()`` without transformers.

optimum-neuron's arch digest hashes ``PretrainedConfig.to_diff_dict()`` (transformers 4.57) minus a
whitelist. ``to_diff_dict()`` keeps a key when it is not a base ``PretrainedConfig`` attribute, or
when it differs from the base default or from the model class's default. neuronc reproduces this
from a table of defaults generated from transformers 4.57.6 (``config_defaults.json``, package data
written by ``scripts/gen_hubcache_config_defaults.py``) plus the few
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
import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
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
DEFAULTS_FILE = Path(__file__).with_name("config_defaults.json")


@dataclass(frozen=True)
class DefaultsTable:
    """transformers 4.57's config defaults: ``PretrainedConfig().to_dict()`` and, per model type, what differs."""

    transformers_version: str
    base: dict[str, Any]
    classes: dict[str, dict[str, dict[str, Any]]]
    _merged: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def class_defaults(self, model_type: str | None) -> dict[str, Any]:
        """``ConfigClass().to_dict()`` for a model type in the table; the base defaults for any other.

        One dict per model type, shared by every caller: read it, never change it.
        """
        key = model_type if model_type in self.classes else ""
        merged = self._merged.get(key)
        if merged is None:
            table = self.classes.get(key)
            merged = self._merged[key] = {**self.base, **table["overrides"]} if table is not None else dict(self.base)
        return merged


@functools.cache
def defaults_table() -> DefaultsTable:
    """The table shipped as package data (read once per process; our own file, so plain ``json``)."""
    doc = json.loads(DEFAULTS_FILE.read_text(encoding="utf-8"))
    base = dict(doc["base_defaults"])
    # JSON keys are strings; transformers keeps id2label keyed by int (PretrainedConfig.__init__).
    base["id2label"] = {int(k): v for k, v in base["id2label"].items()}
    return DefaultsTable(doc["transformers_version"], base, doc["class_defaults"])


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
    transformers (lazily) for others; it returns None when neither is possible. Raises ConfigError
    when a field the config class computes with has an unusable value (a hostile config.json).
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
    return defaults_table().classes


class ConfigError(ValueError):
    """A config.json that no config class could be built from (the message names the field)."""


# Fields the emulated __init__ computes with (layer lists, head_dim, labels): they must be integers
# in these bounds, or a hostile config.json could divide by zero or ask for a list of 10**18 items.
_INT_FIELDS = {
    "num_hidden_layers": (0, 100_000),
    "num_attention_heads": (1, 2**31),
    "hidden_size": (0, 2**40),
    "num_key_value_heads": (1, 2**31),
    "head_dim": (0, 2**31),
    "max_window_layers": (0, 100_000),
    "no_rope_layer_interval": (1, 100_000),
    "num_labels": (0, 100_000),
    "sliding_window": (0, 2**40),
}
_LIST_FIELDS = ("layer_types", "no_rope_layers", "mlp_only_layers")


def check_config(raw: Mapping[str, Any]) -> None:
    """Raise ConfigError when a config.json field the emulation computes with has an unusable value."""
    for key, (low, high) in _INT_FIELDS.items():
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            raise ConfigError(f"field '{key}' must be an integer from {low} to {high}, got {_short_json(value)}")
    for key in ("id2label", "pruned_heads"):
        value = raw.get(key)
        if value is not None and not (isinstance(value, dict) and all(_int_like(k) for k in value)):
            raise ConfigError(f"field '{key}' must be an object keyed by integers")
    for key in _LIST_FIELDS:
        value = raw.get(key)
        if value is not None and not isinstance(value, list):
            raise ConfigError(f"field '{key}' must be a list, got {_short_json(value)}")
    if raw.get("rope_scaling") is not None and not isinstance(raw["rope_scaling"], dict):
        raise ConfigError(f"field 'rope_scaling' must be an object or null, got {_short_json(raw['rope_scaling'])}")
    layers = raw.get("num_hidden_layers")
    given = raw.get("no_rope_layers")
    if isinstance(given, list) and isinstance(layers, int) and len(given) < layers:
        raise ConfigError(f"field 'no_rope_layers' has {len(given)} items for {layers} layers")


def _int_like(key: Any) -> bool:
    return isinstance(key, int) or (isinstance(key, str) and key.lstrip("-").isdigit() and len(key) < 19)


def _short_json(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def emulate_diff_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``AutoConfig.for_model(**raw).to_diff_dict()`` (transformers 4.57) for a model type in the table.

    Raises ConfigError for a config.json the config class could not have been built from.
    """
    check_config(raw)
    defaults = defaults_table()
    base = defaults.base
    model_type = str(raw["model_type"])
    table = defaults.classes[model_type]
    class_defaults = defaults.class_defaults(model_type)  # shared: deep-copied below before any change
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
    try:
        for rule in _RULES.get(model_type, ()):
            rule(inst, given, params)
    except (TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        # The rules compute what the config class's __init__ computes; where they cannot (a null
        # hidden_size, fewer no_rope_layers than the default layer count), neither could __init__.
        msg = f"config.json for '{model_type}': transformers could not build its config from these values ({exc})"
        raise ConfigError(msg) from None
    inst["model_type"] = model_type

    diff: dict[str, Any] = {}
    for key, value in inst.items():
        if key not in base or value != base[key] or value != class_defaults.get(key, value):
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
        from transformers import CONFIG_MAPPING
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
