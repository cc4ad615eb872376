"""Is an entry's architecture the model's? Field by field, tolerating what does not change the graphs.

optimum-neuron 0.4.5 files entries by an exact digest of the normalised config, which a ``dtype``
key, ``head_dim: null`` or a key one transformers version writes and another does not are enough
to change. ``compare_arch`` compares the fields instead and says what it tolerated.

``arch_key`` is a coarser fingerprint for the persistent index: the config with everything
``compare_arch`` may tolerate removed or put in one canonical form. Two configs that
``compare_arch`` finds equal always have the same key (tests/test_hubcache_index.py checks it on
generated variants), so a lookup compares only the entries that share the model's key (and the
model's own entries, to report how they differ), not every entry of the registry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuronc.hubcache.configs import CACHE_WHITE_LIST, ModelArch, defaults_table
from neuronc.hubcache.entries import RESERVED_KEYS, CacheEntry

# Never architecture: the dtype is compared through the neuron config; the rest is bookkeeping.
IGNORED_KEYS = frozenset({*CACHE_WHITE_LIST, "dtype", "torch_dtype", "neuron", *RESERVED_KEYS})


@dataclass(frozen=True)
class ArchCheck:
    """How an entry's architecture compares with a model's: equal or not, and what was tolerated."""

    same: bool
    differing: tuple[str, ...] = ()
    tolerated: tuple[str, ...] = ()


def compare_arch(entry: CacheEntry, arch: ModelArch) -> ArchCheck:
    """Compare an entry's config with the model's normalised config, field by field."""
    if entry.is_multi_model or entry.model_type != arch.model_type:
        return ArchCheck(False, ("model_type",))
    if entry.task is not None and entry.task != arch.task:
        return ArchCheck(False, ("task",))
    theirs, ours = entry.config, arch.config
    defaults = defaults_table().class_defaults(arch.model_type)
    differing: list[str] = []
    tolerated: list[str] = []
    for key in sorted((set(theirs) | set(ours)) - IGNORED_KEYS):
        in_theirs, in_ours = key in theirs, key in ours
        a, b = theirs.get(key), ours.get(key)
        if in_theirs and in_ours and _same_value(key, a, b):
            continue
        note = _tolerated(key, a if in_theirs else _MISSING, b if in_ours else _MISSING, ours, defaults)
        if note is None:
            differing.append(key)
        else:
            tolerated.append(note)
    return ArchCheck(not differing, tuple(differing), tuple(tolerated))


class _Missing:
    def __repr__(self) -> str:
        return "absent"


_MISSING: Any = _Missing()


def _same_value(key: str, a: Any, b: Any) -> bool:
    if a == b:
        return True
    if key == "rope_scaling" and isinstance(a, dict) and isinstance(b, dict):
        return _rope(a) == _rope(b)
    return False


def _rope(value: Mapping[str, Any]) -> dict[str, Any]:
    # transformers copies the legacy "type" key into "rope_type"; older serialisations have one or the other.
    result = dict(value)
    kind = result.get("rope_type", result.get("type"))
    result.pop("type", None)
    result["rope_type"] = kind
    return result


def _tolerated(key: str, a: Any, b: Any, ours: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    """A note when a difference is one optimum-neuron exports or transformers versions make; else None."""
    present = [v for v in (a, b) if v is not _MISSING]
    if key == "head_dim":
        derived = _derived_head_dim(ours, {})
        if all(v is None or v == derived for v in present):
            return f"head_dim: {show(a)} in the entry, {show(b)} in the model config (both mean {show(derived)})"
        return None
    if key == "num_key_value_heads" and all(v in (None, ours.get("num_attention_heads")) for v in present):
        return f"num_key_value_heads: {show(a)} vs {show(b)} (defaults to num_attention_heads)"
    if (
        key == "layer_types"
        and all(isinstance(v, list) and all(t == "full_attention" for t in v) for v in present)
        and (a is _MISSING or b is _MISSING)
    ):
        return "layer_types: written by one transformers version only (all full attention)"
    if a is _MISSING or b is _MISSING:
        value = b if a is _MISSING else a
        if key in defaults and defaults[key] == value:
            side = "entry" if a is _MISSING else "model config"
            return f"{key}: absent from the {side}, where it has its default {show(value)}"
    return None


def _derived_head_dim(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> int | None:
    hidden = _whole(config.get("hidden_size", defaults.get("hidden_size")))
    heads = _whole(config.get("num_attention_heads", defaults.get("num_attention_heads")))
    if hidden is not None and heads is not None and heads > 0:
        return hidden // heads
    return None


def _whole(value: Any) -> int | None:
    """An integer, or a float with an integral value (``16.0`` in a config means 16), else None."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def show(value: Any) -> str:
    """A config value for a note, as JSON writes it (``null``, ``true``, ``"silu"``), at most 60 characters."""
    if value is _MISSING:
        return "absent"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------------
# The index's fingerprint
# --------------------------------------------------------------------------------------------------


def arch_key(model_type: str | None, config: Mapping[str, Any]) -> str:
    """A fingerprint equal for every two configs ``compare_arch`` finds equal (it may also join a few that are not).

    Removed: ignored keys, ``head_dim`` when null or derived, ``num_key_value_heads`` when null or
    equal to the head count, ``layer_types`` of full attention only, and every key at its class
    default; ``rope_scaling`` is put in one form; integral numbers and booleans are compared as
    integers, as Python's ``==`` does.
    """
    defaults = defaults_table().class_defaults(model_type)
    derived = _derived_head_dim(config, defaults)
    heads = config.get("num_attention_heads", defaults.get("num_attention_heads"))
    body: list[tuple[str, Any]] = []
    for key, value in config.items():
        if key in IGNORED_KEYS:
            continue
        if key == "head_dim" and (value is None or value == derived):
            continue
        if key == "num_key_value_heads" and (value is None or value == heads):
            continue
        if key == "layer_types" and isinstance(value, list) and all(t == "full_attention" for t in value):
            continue
        default = defaults.get(key, _MISSING)
        if default is not _MISSING and (default == value or _same_value(key, default, value)):
            continue
        if key == "rope_scaling" and isinstance(value, dict):
            value = _rope(value)
        body.append((key, _canonical(value)))
    body.sort()
    # repr of plain values is deterministic and several times faster than json.dumps(sort_keys=True).
    text = repr((model_type, tuple(body)))
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:32]


def _canonical(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or value is None:
        return value
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is bool:
        return int(value)
    if kind is list:
        return value if all(type(v) is str for v in value) else [_canonical(v) for v in value]
    if kind is dict:
        return ("dict", tuple(sorted((str(k), _canonical(v)) for k, v in value.items())))
    return value
