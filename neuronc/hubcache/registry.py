"""Registry entries of a Neuron cache repository: where they live, what they say, and which to read.

A cache repository (``aws-neuron/optimum-neuron-cache`` or a private one) mirrors libneuronxla's
compile cache: one ``neuronxcc-<compiler version>/`` folder per compiler, each with
``0_REGISTRY/<optimum-neuron version>/`` holding one small JSON per compiled configuration. The
layouts read here, newest first (see docs/cache-lookup.md):

- ``arch-digest``: ``<ver>/<arch_digest>/<hash>.json`` (optimum-neuron 0.4.5 and later);
- ``alias``: ``<ver>/<model_type>/<org>/<name>/<hash>.json`` beside it (0.4.5; incomplete by design);
- ``model-type``: the same shape as the only index (0.2 to 0.4.4, and 0.0.18);
- ``model-type-mode``: ``<ver>/{inference,training}/<model_type>/<org>/<name>/<hash>.json`` (0.0.19 to 0.1.x).

The file name is the entry hash, ``sha512(file bytes)[:20]``, so an alias and its primary file are
the same entry: entries are de-duplicated by (compiler folder, optimum-neuron version, hash).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COMPILER_PREFIX = "neuronxcc-"
REGISTRY_DIR = "0_REGISTRY"
# optimum-neuron 0.4.5 pins neuronx-cc==2.21.33363.0 and reads only its own registry folder.
OPTIMUM_NEURON_VERSION = "0.4.5"
PINNED_COMPILER = "2.21.33363.0"
RESERVED_KEYS = ("_entry_class", "_model_id", "_task")
LAYOUTS = ("arch-digest", "alias", "model-type", "model-type-mode")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_MODES = ("inference", "training")
_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "torch.float16": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "torch.float32": "float32",
}
# optimum-neuron's INSTANCE_VALUE_MAP: inf2 and trn1n run trn1 artifacts (same NeuronCore-v2).
_TARGETS = {"inf2": "trn1", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2"}


def normalize_dtype(value: str) -> str:
    """Canonical dtype name: bf16/bfloat16/torch.bfloat16 -> bfloat16, fp16 -> float16, fp32 -> float32."""
    return _DTYPES.get(value.strip().lower(), value.strip().lower())


def normalize_target(value: str) -> str:
    """optimum-neuron's target for an instance type: inf2, trn1n and trn1 -> trn1; trn2 -> trn2."""
    return _TARGETS.get(value.strip().lower(), value.strip().lower())


@functools.lru_cache(maxsize=1024)
def version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a version string such as 0.4.5, 0.0.25.dev0 or 2.21.33363.0+82129205."""
    release = version.split("+", 1)[0]
    return tuple(int(part) for part in re.findall(r"\d+", release.split(".dev")[0]))


def version_matches(version: str | None, wanted: str) -> bool:
    """Whether ``version`` starts with the dotted components of ``wanted`` (2.21 matches 2.21.33363.0+82...)."""
    if version is None:
        return False
    if version == wanted:
        return True
    have = re.split(r"[.+]", version)
    want = re.split(r"[.+]", wanted)
    return have[: len(want)] == want


@dataclass(frozen=True)
class RegistryPath:
    """A registry file's path, parsed."""

    path: str
    compiler_folder: str
    optimum_version: str
    layout: str
    stem: str
    digest: str | None = None
    model_type: str | None = None
    model_id: str | None = None

    @property
    def compiler_version(self) -> str:
        return self.compiler_folder[len(COMPILER_PREFIX) :]

    @property
    def registry(self) -> str:
        """The registry folder: ``neuronxcc-<ver>/0_REGISTRY/<optimum-neuron ver>``."""
        return f"{self.compiler_folder}/{REGISTRY_DIR}/{self.optimum_version}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.compiler_folder, self.optimum_version, self.stem)


def parse_registry_path(path: str) -> RegistryPath | None:
    """Parse ``neuronxcc-*/0_REGISTRY/<ver>/.../<hash>.json``; None for anything else."""
    if not path.startswith(COMPILER_PREFIX) or not path.endswith(".json"):
        return None
    # Paths come from a server or a directory listing and may be written to disk: plain names only.
    if "//" in path or "/./" in path or "/../" in path or "\\" in path:
        return None
    parts = path.split("/")
    if len(parts) < 5 or parts[1] != REGISTRY_DIR:
        return None
    compiler, version, rest = parts[0], parts[2], parts[3:]
    stem = rest[-1][: -len(".json")]
    if not stem:
        return None
    if len(rest) == 2 and _HEX64.match(rest[0]):
        return RegistryPath(path, compiler, version, "arch-digest", stem, digest=rest[0])
    layout = "alias" if version_key(version) >= version_key(OPTIMUM_NEURON_VERSION) else "model-type"
    if rest[0] in _MODES:
        layout = "model-type-mode"
        rest = rest[1:]
    if len(rest) < 3:
        return None
    model_type, model_id = rest[0], "/".join(rest[1:-1])
    return RegistryPath(path, compiler, version, layout, stem, model_type=model_type, model_id=model_id)


# --------------------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One cached configuration, labelled with the versions and paths it was found under."""

    hash: str
    path: str
    layout: str
    compiler_folder: str
    compiler_version: str
    optimum_version: str
    model_id: str | None
    task: str | None
    model_type: str | None
    entry_class: str | None
    config: dict[str, Any]
    neuron: dict[str, Any]
    batch_size: int
    sequence_length: int | None
    tp_degree: int
    dtype: str | None
    target: str | None
    max_context_length: int | None
    checkpoint_revision: str | None
    digest_folder: str | None
    hash_verified: bool
    aliases: tuple[str, ...] = ()

    @property
    def registry(self) -> str:
        return f"{self.compiler_folder}/{REGISTRY_DIR}/{self.optimum_version}"

    def field(self, name: str) -> Any:
        """A comparable field by its public name (batch_size, sequence_length, tp_degree, dtype, target ...)."""
        return getattr(self, name)

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
            "layout": self.layout,
            "path": self.path,
            "aliases": list(self.aliases),
            "hash_verified": self.hash_verified,
        }


@dataclass(frozen=True)
class EntryProblem:
    """A registry file that could not be used, and why."""

    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


class _Broken(Exception):
    pass


def parse_entry(location: RegistryPath, data: bytes, aliases: Sequence[str] = ()) -> CacheEntry:
    """Turn one registry file into a CacheEntry; raise ValueError with a one-line reason if unusable."""
    try:
        return _parse_entry(location, data, tuple(aliases))
    except _Broken as exc:
        raise ValueError(str(exc)) from None


def _parse_entry(location: RegistryPath, data: bytes, aliases: tuple[str, ...]) -> CacheEntry:
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise _Broken("not UTF-8 text") from None
    except ValueError as exc:
        raise _Broken(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _Broken(f"expected a JSON object, got {type(doc).__name__}")
    entry_class = _opt_str(doc, "_entry_class")
    model_id = _opt_str(doc, "_model_id") or location.model_id
    task = _opt_str(doc, "_task")
    has_task = "_task" in doc
    # The document becomes the config: drop the reserved keys and the neuron dict in place.
    for key in RESERVED_KEYS:
        doc.pop(key, None)
    neuron_value = doc.pop("neuron", None)
    config = doc
    if entry_class == "MultiModelCacheEntry" or (entry_class is None and neuron_value is None and _is_multi(doc)):
        neuron = _multi_model_neuron(config)
        model_type = location.model_type or ("stable-diffusion" if "unet" in config else None)
    else:
        if neuron_value is None:
            raise _Broken("missing field 'neuron'")
        if not isinstance(neuron_value, dict):
            raise _Broken(f"field 'neuron' must be an object, got {type(neuron_value).__name__}")
        neuron = neuron_value
        model_type_value = config.get("model_type", location.model_type)
        if model_type_value is not None and not isinstance(model_type_value, str):
            raise _Broken(f"field 'model_type' must be a string, got {model_type_value!r}")
        model_type = model_type_value
    if not has_task:  # legacy entries keep the task in the neuron dict
        task = _opt_str(neuron, "task", "neuron.")
    batch_size = _first_int(neuron, ("batch_size", "static_batch_size"), required=True)
    assert batch_size is not None
    sequence_length = _first_int(neuron, ("sequence_length", "static_sequence_length"))
    tp_degree = _first_int(neuron, ("tp_degree", "tensor_parallel_size", "num_cores")) or 1
    dtype_value = _first_str(neuron, ("torch_dtype", "dtype", "auto_cast_type", "float_dtype"))
    target_value = _first_str(neuron, ("target", "instance_type"))
    compiler = _first_str(neuron, ("neuronxcc_version", "compiler_version")) or location.compiler_version
    digest_ok = hashlib.sha512(data).hexdigest()[:20] == location.stem
    return CacheEntry(
        hash=location.stem,
        path=location.path,
        layout=location.layout,
        compiler_folder=location.compiler_folder,
        compiler_version=compiler,
        optimum_version=location.optimum_version,
        model_id=model_id,
        task=task,
        model_type=model_type,
        entry_class=entry_class,
        config=config,
        neuron=neuron,
        batch_size=batch_size,
        sequence_length=sequence_length,
        tp_degree=tp_degree,
        dtype=normalize_dtype(dtype_value) if dtype_value else None,
        target=normalize_target(target_value) if target_value else None,
        max_context_length=_first_int(neuron, ("max_context_length",)),
        checkpoint_revision=_opt_str(neuron, "checkpoint_revision", "neuron."),
        digest_folder=location.digest,
        hash_verified=digest_ok,
        aliases=aliases,
    )


def _is_multi(doc: Mapping[str, Any]) -> bool:
    return any(isinstance(v, dict) and isinstance(v.get("neuron"), dict) for v in doc.values())


def _multi_model_neuron(config: Mapping[str, Any]) -> dict[str, Any]:
    # optimum-neuron reports the unet's (or transformer's) neuron config for a pipeline.
    for name in ("unet", "transformer"):
        component = config.get(name)
        if isinstance(component, dict) and isinstance(component.get("neuron"), dict):
            return dict(component["neuron"])
    raise _Broken("multi-model entry without a 'unet' or 'transformer' neuron config")


def _opt_str(doc: Mapping[str, Any], key: str, prefix: str = "") -> str | None:
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    raise _Broken(f"field '{prefix}{key}' must be a string, got {value!r}")


def _first_int(neuron: Mapping[str, Any], keys: Sequence[str], *, required: bool = False) -> int | None:
    for key in keys:
        if key in neuron and neuron[key] is not None:
            value = neuron[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _Broken(f"field 'neuron.{key}' must be a positive integer, got {value!r}")
            return value
    if required:
        raise _Broken(f"missing field 'neuron.{keys[0]}'")
    return None


def _first_str(neuron: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if key in neuron and neuron[key] is not None:
            value = neuron[key]
            if not isinstance(value, str):
                raise _Broken(f"field 'neuron.{key}' must be a string, got {value!r}")
            return value
    return None


# --------------------------------------------------------------------------------------------------
# Which files a query needs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """What a lookup is about; lets a source read (or download) only the files that can matter.

    Selected: alias and model-type files of ``model_types`` (and of ``model_ids``' own model types),
    every arch-digest folder that is one of ``digests``, shares a hash with a selected alias, belongs
    to one of those model types (through any alias in it), or belongs to no alias at all.
    ``Query.everything()`` selects every registry file.
    """

    model_ids: frozenset[str] = frozenset()
    model_types: frozenset[str] = frozenset()
    digests: frozenset[str] = frozenset()
    all_files: bool = False

    @classmethod
    def everything(cls) -> Query:
        return cls(all_files=True)

    def merge(self, other: Query) -> Query:
        return Query(
            self.model_ids | other.model_ids,
            self.model_types | other.model_types,
            self.digests | other.digests,
            self.all_files or other.all_files,
        )


def select_paths(locations: Iterable[RegistryPath], query: Query) -> list[RegistryPath]:
    """The registry files a query needs, one per entry (arch-digest path first, then aliases)."""
    locations = list(locations)
    if query.all_files:
        return locations
    model_types = set(query.model_types)
    for loc in locations:
        if loc.model_id is not None and loc.model_id in query.model_ids and loc.model_type:
            model_types.add(loc.model_type)
    picked_hashes: set[tuple[str, str, str]] = set()
    attributed: dict[tuple[str, str], set[str]] = {}  # (registry, stem) -> model types of its aliases
    for loc in locations:
        if loc.layout != "arch-digest" and loc.model_type is not None:
            attributed.setdefault((loc.registry, loc.stem), set()).add(loc.model_type)
            if loc.model_type in model_types or (loc.model_id is not None and loc.model_id in query.model_ids):
                picked_hashes.add(loc.key)
    folders: dict[tuple[str, str], list[RegistryPath]] = {}
    for loc in locations:
        if loc.layout == "arch-digest" and loc.digest is not None:
            folders.setdefault((loc.registry, loc.digest), []).append(loc)
    picked_folders: set[tuple[str, str]] = set()
    for (registry, digest), members in folders.items():
        types: set[str] = set()
        for loc in members:
            types |= attributed.get((registry, loc.stem), set())
        if (
            digest in query.digests
            or not types
            or types & model_types
            or any(loc.key in picked_hashes for loc in members)
        ):
            picked_folders.add((registry, digest))
    selected = []
    for loc in locations:
        if loc.layout == "arch-digest":
            if (loc.registry, loc.digest) in picked_folders:
                selected.append(loc)
        elif loc.key in picked_hashes:
            selected.append(loc)
    return selected


def group_by_entry(locations: Iterable[RegistryPath]) -> list[tuple[RegistryPath, tuple[str, ...]]]:
    """One (primary location, alias paths) per entry; the arch-digest path is the primary one."""
    groups: dict[tuple[str, str, str], list[RegistryPath]] = {}
    for loc in locations:
        groups.setdefault(loc.key, []).append(loc)
    result = []
    for members in groups.values():
        members.sort(key=lambda loc: (loc.layout != "arch-digest", loc.path))
        result.append((members[0], tuple(m.path for m in members[1:])))
    result.sort(key=lambda item: item[0].path)
    return result


# --------------------------------------------------------------------------------------------------
# A loaded registry
# --------------------------------------------------------------------------------------------------


@dataclass
class Registry:
    """The entries a source provided for a query, with what was skipped and where it came from."""

    source: dict[str, Any]
    entries: list[CacheEntry] = field(default_factory=list)
    problems: list[EntryProblem] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)
    files_listed: int = 0
    notes: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        return {
            "registries": self.registries,
            "registry_files_listed": self.files_listed,
            "entries_read": len(self.entries),
            "skipped": len(self.problems),
        }


def build_registry(
    source: dict[str, Any],
    locations: Sequence[RegistryPath],
    query: Query,
    read: Callable[[RegistryPath], bytes | None],
    *,
    selected: Sequence[RegistryPath] | None = None,
) -> Registry:
    """Select the files a query needs (unless given), read each entry once, parse, collect problems."""
    registry = Registry(source=source, files_listed=len(locations))
    registry.registries = sorted({loc.registry for loc in locations}, key=_registry_sort_key)
    if selected is None:
        selected = select_paths(locations, query)
    for primary, aliases in group_by_entry(selected):
        try:
            data = read(primary)
        except OSError as exc:
            registry.problems.append(EntryProblem(primary.path, f"cannot read: {exc.strerror or exc}"))
            continue
        if data is None:
            continue
        try:
            registry.entries.append(parse_entry(primary, data, aliases))
        except ValueError as exc:
            registry.problems.append(EntryProblem(primary.path, str(exc)))
    return registry


def _registry_sort_key(registry: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    compiler, _, version = registry.split("/", 2)
    return (version_key(version.split("/")[-1]), version_key(compiler[len(COMPILER_PREFIX) :]))


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
    """The registry file text: normalised config + ``neuron`` + reserved keys, ``indent=2``, sorted keys."""
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
