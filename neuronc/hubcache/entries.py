"""One registry entry: what its file says, read as hostile input, and how optimum-neuron writes one.

Entry formats read: single-model entries (config + ``neuron`` dict, with or without the reserved
``_entry_class``/``_model_id``/``_task`` keys of optimum-neuron >= 0.2), NxD, transformers-neuronx
and traced neuron dicts, and diffusers pipelines (the ``unet``'s or ``transformer``'s neuron
config). Every file goes through ``neuronc.jsonfile.parse_json`` (bounded size and nesting, 64-bit
integers, no NaN) and every field neuronc uses is type-checked; a file that fails is an
``EntryError`` with a one-line reason, which lookups report and skip.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neuronc.hubcache.paths import (
    REGISTRY_DIR,
    Layout,
    RegistryPath,
    normalize_dtype,
    normalize_target,
)
from neuronc.jsonfile import InvalidJsonError, JsonFields, expect_object, expect_type, get_field, get_int, parse_json

RESERVED_KEYS = ("_entry_class", "_model_id", "_task")
MULTI_MODEL_CLASS = "MultiModelCacheEntry"
# Real entries are 2 to 20 KiB (a diffusers pipeline is the largest); nothing honest comes near this.
MAX_ENTRY_BYTES = 1024 * 1024
# Batch sizes, lengths and core counts: no compiled graph has more than 2**31 of anything.
_MAX_SHAPE = 2**31 - 1
_MAX_TEXT = 512


class EntryError(ValueError):
    """A registry file that cannot be used; the message is the one-line reason (the path is kept apart)."""


@dataclass(frozen=True)
class EntryFields:
    """What one registry file says of its configuration, checked field by field (``check_entry``)."""

    entry_class: str | None
    model_id: str | None
    task: str | None
    model_type: str | None
    config: dict[str, Any]
    neuron: dict[str, Any]
    batch_size: int
    sequence_length: int | None
    tp_degree: int
    dtype: str | None
    target: str | None
    compiler_version: str
    max_context_length: int | None
    checkpoint_revision: str | None


@dataclass(frozen=True)
class CacheEntry(EntryFields):
    """One cached configuration, labelled with the versions and paths it was found under."""

    hash: str
    path: str
    layout: Layout
    compiler_folder: str
    optimum_version: str
    digest_folder: str | None
    hash_verified: bool
    aliases: tuple[str, ...] = ()

    @property
    def registry(self) -> str:
        return f"{self.compiler_folder}/{REGISTRY_DIR}/{self.optimum_version}"

    @property
    def is_multi_model(self) -> bool:
        return self.entry_class == MULTI_MODEL_CLASS

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (docs/cache-lookup.md)."""
        return {
            "hash": self.hash,
            "model_id": self.model_id,
            "task": self.task,
            "model_type": self.model_type,
            "batch_size": self.batch_size,
            "sequence_length": self.sequence_length,
            "tp_degree": self.tp_degree,
            "dtype": self.dtype,
            "target": self.target,
            "max_context_length": self.max_context_length,
            "compiler_version": self.compiler_version,
            "optimum_neuron_version": self.optimum_version,
            "checkpoint_revision": self.checkpoint_revision,
            "layout": str(self.layout),
            "path": self.path,
            "aliases": list(self.aliases),
            "hash_verified": self.hash_verified,
        }


@dataclass(frozen=True)
class EntryProblem(JsonFields):
    """A registry file that could not be used, and why."""

    path: str
    reason: str


def parse_entry(location: RegistryPath, data: bytes, aliases: Sequence[str] = ()) -> CacheEntry:
    """Turn one registry file into a CacheEntry; raise EntryError with a one-line reason if unusable."""
    return CacheEntry(
        **vars(check_entry(location, data)),
        hash=location.stem,
        path=location.path,
        layout=location.layout,
        compiler_folder=location.compiler_folder,
        optimum_version=location.optimum_version,
        digest_folder=location.digest,
        hash_verified=hashlib.sha512(data).hexdigest()[:20] == location.stem,
        aliases=tuple(aliases),
    )


def check_entry(location: RegistryPath, data: bytes) -> EntryFields:
    """Parse and check one registry file, field by field (``parse_entry`` without building the entry)."""
    try:
        doc = parse_json(data, where=location.path, max_bytes=MAX_ENTRY_BYTES)
    except InvalidJsonError as exc:
        raise EntryError(exc.message.removeprefix(f"{location.path}: ")) from None
    _field(expect_object, doc, "entry")
    entry_class = _text(doc, "_entry_class")
    model_id = _text(doc, "_model_id") or location.model_id
    task = _text(doc, "_task")
    has_task = "_task" in doc
    # The document becomes the config: drop the reserved keys and the neuron dict in place.
    for key in RESERVED_KEYS:
        doc.pop(key, None)
    neuron_value = doc.pop("neuron", None)
    config = doc
    if entry_class == MULTI_MODEL_CLASS or (entry_class is None and neuron_value is None and _is_multi(doc)):
        neuron = _multi_model_neuron(config)
        model_type = location.model_type or ("stable-diffusion" if "unet" in config else None)
    else:
        if neuron_value is None:
            raise EntryError("entry: field 'neuron' is missing")
        neuron = _field(expect_type, neuron_value, dict, "entry: field 'neuron'")
        model_type = _text(config, "model_type") or location.model_type
    if not has_task:  # legacy entries keep the task in the neuron dict
        task = _text(neuron, "task", "neuron")
    batch_size = _first_int(neuron, ("batch_size", "static_batch_size"), required=True)
    assert batch_size is not None
    dtype_value = _first_text(neuron, ("torch_dtype", "dtype", "auto_cast_type", "float_dtype"))
    target_value = _first_text(neuron, ("target", "instance_type"))
    return EntryFields(
        entry_class=entry_class,
        model_id=model_id,
        task=task,
        model_type=model_type,
        config=config,
        neuron=neuron,
        batch_size=batch_size,
        sequence_length=_first_int(neuron, ("sequence_length", "static_sequence_length")),
        tp_degree=_first_int(neuron, ("tp_degree", "tensor_parallel_size", "num_cores")) or 1,
        dtype=normalize_dtype(dtype_value) if dtype_value else None,
        target=normalize_target(target_value) if target_value else None,
        compiler_version=_first_text(neuron, ("neuronxcc_version", "compiler_version")) or location.compiler_version,
        max_context_length=_first_int(neuron, ("max_context_length",)),
        checkpoint_revision=_text(neuron, "checkpoint_revision", "neuron"),
    )


def _field(check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A ``neuronc.jsonfile`` accessor whose InvalidJsonError becomes this entry's EntryError."""
    try:
        return check(*args, **kwargs)
    except InvalidJsonError as exc:
        raise EntryError(exc.message) from None


def _is_multi(doc: Mapping[str, Any]) -> bool:
    return any(isinstance(v, dict) and isinstance(v.get("neuron"), dict) for v in doc.values())


def _multi_model_neuron(config: Mapping[str, Any]) -> dict[str, Any]:
    # optimum-neuron reports the unet's (or transformer's) neuron config for a pipeline
    # (optimum/neuron/cache/entries/multi_model.py).
    for name in ("unet", "transformer"):
        component = config.get(name)
        if isinstance(component, dict) and isinstance(component.get("neuron"), dict):
            return dict(component["neuron"])
    raise EntryError("multi-model entry without a 'unet' or 'transformer' neuron config")


def _text(doc: Mapping[str, Any], key: str, where: str = "entry") -> str | None:
    """An optional string field that neuronc prints: printable UTF-8, at most _MAX_TEXT characters."""
    value = doc.get(key)
    if value is None:
        return None
    if type(value) is str and len(value) <= _MAX_TEXT and value.isascii() and value.isprintable():
        return value  # the usual case, decided without the checks below
    text: str = _field(get_field, doc, key, str, where)
    if len(text) > _MAX_TEXT or not text.isprintable() or not _encodes(text):
        raise EntryError(f"{where}: field '{key}' must be printable text of at most {_MAX_TEXT} characters")
    return text


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON)
        return False
    return True


def _first_int(neuron: Mapping[str, Any], keys: Sequence[str], *, required: bool = False) -> int | None:
    for key in keys:
        if neuron.get(key) is not None:
            value: int = _field(get_int, neuron, key, "neuron", minimum=1, maximum=_MAX_SHAPE)
            return value
    if required:
        raise EntryError(f"neuron: field '{keys[0]}' is missing")
    return None


def _first_text(neuron: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if neuron.get(key) is not None:
            return _text(neuron, key, "neuron")
    return None


# --------------------------------------------------------------------------------------------------
# Writing entries (what optimum-neuron 0.4.5's ModelCacheEntry.serialize() and .hash produce)
# --------------------------------------------------------------------------------------------------


def serialize_entry(
    config: Mapping[str, Any],
    neuron: Mapping[str, Any] | None,
    *,
    model_id: str,
    task: str | None,
    entry_class: str = "SingleModelCacheEntry",
) -> str:
    """The registry file text: normalised config + ``neuron`` + reserved keys, ``indent=2``, sorted keys.

    optimum/neuron/cache/entries/cache_entry.py (0.4.5): ``json.dumps(self.to_dict(), indent=2, sort_keys=True)``.
    """
    body = dict(config)
    if neuron is not None:
        body["neuron"] = dict(neuron)
    body["_entry_class"] = entry_class
    body["_model_id"] = model_id
    body["_task"] = task
    return json.dumps(body, indent=2, sort_keys=True)


def entry_hash(text: str | bytes) -> str:
    """The entry hash (and file name): the first 20 hex digits of the sha512 of the file text."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha512(data).hexdigest()[:20]
