"""Lookups: which cached configurations exist for a model, and does a build hit the cache.

Entries are related to a model in three ways:

- ``model``: written for this model id, and its architecture fields equal the model's config (or the
  config is not available, so only the id could be checked);
- ``architecture``: written for another model id with the same architecture (a fine-tune, a copy);
  optimum-neuron's compiled graphs are keyed by architecture and shapes, not by weights, so these
  are hits too, as optimum-neuron's own lookup reports them;
- ``model-config-differs``: written for this model id, but the architecture fields differ (another
  revision of the model, say). Never a hit; shown so that nothing cached for the id is hidden.

Architecture fields are compared directly, tolerating the differences optimum-neuron 0.4.5's arch
digest does not (``dtype`` in the digest, ``head_dim: null``, keys an older transformers did not
write), so entries the digest hides are found, and flagged ``visible_to_optimum_neuron: false``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.hubcache.configs import CACHE_WHITE_LIST, ModelArch, normalize_config
from neuronc.hubcache.registry import (
    COMPILER_PREFIX,
    OPTIMUM_NEURON_VERSION,
    PINNED_COMPILER,
    CacheEntry,
    Query,
    Registry,
    normalize_dtype,
    normalize_target,
    version_key,
    version_matches,
)
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.hubcache.sources import RegistrySource
    from neuronc.spec import BuildSpec

DEFAULT_TASK = "text-generation"
RELATIONS = ("model", "architecture", "model-config-differs")
SHAPE_FIELDS = ("target", "tp_degree", "batch_size", "sequence_length", "dtype")
_DTYPES_EXPORTED = ("bfloat16", "float16", "float32")
# Never architecture: the dtype is compared through the neuron config; the rest is bookkeeping.
_IGNORED_KEYS = frozenset({*CACHE_WHITE_LIST, "dtype", "torch_dtype", "neuron", "_entry_class", "_model_id", "_task"})


# --------------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """Exact-match filters on entries (documented in docs/cache-lookup.md).

    Shapes are compared exactly, as optimum-neuron's own lookup does (its help text says "at least",
    its code tests equality). ``instance_type`` is normalised the way optimum-neuron normalises
    targets (inf2 and trn1n are trn1), dtypes accept bf16/fp16/fp32. Versions match by dotted
    prefix: ``2.21`` matches compiler ``2.21.33363.0+82129205``.
    """

    instance_type: str | None = None
    tp_degree: int | None = None
    batch_size: int | None = None
    sequence_length: int | None = None
    dtype: str | None = None
    compiler_version: str | None = None
    optimum_neuron_version: str | None = None

    @property
    def target(self) -> str | None:
        return normalize_target(self.instance_type) if self.instance_type else None

    @property
    def shape_filters(self) -> bool:
        return any(
            v is not None
            for v in (self.instance_type, self.tp_degree, self.batch_size, self.sequence_length, self.dtype)
        )

    def rejects(self, entry: CacheEntry) -> list[str]:
        """The filter names this entry fails (empty: accepted)."""
        failed = []
        if self.target is not None and entry.target != self.target:
            failed.append("target")
        if self.tp_degree is not None and entry.tp_degree != self.tp_degree:
            failed.append("tp_degree")
        if self.batch_size is not None and entry.batch_size != self.batch_size:
            failed.append("batch_size")
        if self.sequence_length is not None and entry.sequence_length != self.sequence_length:
            failed.append("sequence_length")
        if self.dtype is not None and entry.dtype != normalize_dtype(self.dtype):
            failed.append("dtype")
        if self.compiler_version is not None and not version_matches(entry.compiler_version, self.compiler_version):
            failed.append("compiler_version")
        if self.optimum_neuron_version is not None and not version_matches(
            entry.optimum_version, self.optimum_neuron_version
        ):
            failed.append("optimum_neuron_version")
        return failed

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "target": self.target,
            "tp_degree": self.tp_degree,
            "batch_size": self.batch_size,
            "sequence_length": self.sequence_length,
            "dtype": normalize_dtype(self.dtype) if self.dtype else None,
            "compiler_version": self.compiler_version,
            "optimum_neuron_version": self.optimum_neuron_version,
        }


# --------------------------------------------------------------------------------------------------
# Architecture comparison
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchCheck:
    """How an entry's architecture compares with a model's: equal or not, and what was tolerated."""

    same: bool
    differing: tuple[str, ...] = ()
    tolerated: tuple[str, ...] = ()


def compare_arch(entry: CacheEntry, arch: ModelArch) -> ArchCheck:
    """Compare an entry's config with the model's normalised config, field by field."""
    if entry.entry_class == "MultiModelCacheEntry" or entry.model_type != arch.model_type:
        return ArchCheck(False, ("model_type",))
    if entry.task is not None and entry.task != arch.task:
        return ArchCheck(False, ("task",))
    theirs, ours = entry.config, arch.config
    defaults = _class_defaults(arch.model_type)
    differing: list[str] = []
    tolerated: list[str] = []
    for key in sorted((set(theirs) | set(ours)) - _IGNORED_KEYS):
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
        derived = _derived_head_dim(ours)
        if all(v is None or v == derived for v in present):
            return f"head_dim: {_show(a)} in the entry, {_show(b)} in the model config (both mean {derived})"
        return None
    if key == "num_key_value_heads" and all(v in (None, ours.get("num_attention_heads")) for v in present):
        return f"num_key_value_heads: {_show(a)} vs {_show(b)} (defaults to num_attention_heads)"
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
            return f"{key}: absent from the {side}, where it has its default {value!r}"
    return None


def _derived_head_dim(config: Mapping[str, Any]) -> int | None:
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads:
        return hidden // heads
    return None


def _show(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    return "null" if value is None else repr(value)


def _class_defaults(model_type: str) -> dict[str, Any]:
    from neuronc.hubcache._config_defaults import BASE_DEFAULTS, CLASS_DEFAULTS

    table = CLASS_DEFAULTS.get(model_type)
    if table is None:
        return dict(BASE_DEFAULTS)
    return {**BASE_DEFAULTS, **table["overrides"]}


# --------------------------------------------------------------------------------------------------
# Matches
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """An entry related to a model: how, whether optimum-neuron 0.4.5's lookup can see it, and notes."""

    entry: CacheEntry
    relation: str
    visible_to_optimum_neuron: bool | None
    notes: tuple[str, ...] = ()
    differing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = self.entry.to_json()
        data["relation"] = self.relation
        data["visible_to_optimum_neuron"] = self.visible_to_optimum_neuron
        data["architecture_differs"] = list(self.differing)
        data["notes"] = list(self.notes)
        return data


def relate(
    entries: Iterable[CacheEntry], model_id: str | None, arch: ModelArch | None, task: str
) -> tuple[list[Match], dict[str, int]]:
    """The entries related to a model, and a count of its entries for other tasks."""
    matches: list[Match] = []
    other_tasks: dict[str, int] = {}
    memo: dict[tuple[str, str], ArchCheck] = {}
    for entry in entries:
        same_id = model_id is not None and entry.model_id == model_id
        entry_task = entry.task or task
        if entry_task != task:
            if same_id:
                other_tasks[entry_task] = other_tasks.get(entry_task, 0) + 1
            continue
        if arch is None:
            if same_id:
                matches.append(Match(entry, "model", None, ("architecture not checked: no model config",)))
            continue
        if entry.layout == "arch-digest" and entry.digest_folder is not None:
            key = (entry.registry, entry.digest_folder)
            check = memo.get(key)
            if check is None:
                check = memo[key] = compare_arch(entry, arch)
        else:
            check = compare_arch(entry, arch)
        if check.same:
            relation = "model" if same_id else "architecture"
        elif same_id:
            relation = "model-config-differs"
        else:
            continue
        visible, notes = _visibility(entry, arch, check)
        matches.append(Match(entry, relation, visible, notes, check.differing))
    return matches, other_tasks


def _visibility(entry: CacheEntry, arch: ModelArch, check: ArchCheck) -> tuple[bool, tuple[str, ...]]:
    notes = list(check.tolerated)
    if entry.optimum_version != OPTIMUM_NEURON_VERSION:
        notes.append(f"optimum-neuron {entry.optimum_version} registry: 0.4.5 reads only its own")
        return False, tuple(notes)
    if not entry.compiler_folder.startswith(COMPILER_PREFIX + PINNED_COMPILER):
        notes.append(f"compiler {entry.compiler_version}: optimum-neuron 0.4.5 reads only neuronxcc-{PINNED_COMPILER}*")
        return False, tuple(notes)
    if entry.layout != "arch-digest":
        notes.append("alias file only (no arch-digest file): optimum-neuron 0.4.5 cannot find it")
        return False, tuple(notes)
    if entry.digest_folder == arch.digest:
        return True, tuple(notes)
    reasons = []
    if entry.config.get("dtype") != arch.config.get("dtype"):
        reasons.append(
            f"config dtype {entry.config.get('dtype')} in the entry, {arch.config.get('dtype')} in the checkpoint"
        )
    if "head_dim" in arch.config and arch.config["head_dim"] is None and entry.config.get("head_dim") is not None:
        reasons.append("head_dim is null in the checkpoint config and filled in at export")
    if not reasons:
        reasons.append("fields outside the architecture comparison differ")
    notes.append("hidden from optimum-neuron 0.4.5's lookup (arch digest differs: " + "; ".join(reasons) + ")")
    return False, tuple(notes)


def _sort_key(match: Match) -> tuple[Any, ...]:
    # Relation first, newest optimum-neuron and compiler next, then the shapes.
    e = match.entry
    return (
        RELATIONS.index(match.relation),
        tuple(-x for x in version_key(e.optimum_version)),
        tuple(-x for x in version_key(e.compiler_version)),
        e.target or "",
        e.tp_degree,
        e.batch_size,
        e.sequence_length or 0,
        e.dtype or "",
        e.model_id or "",
        e.hash,
    )


# --------------------------------------------------------------------------------------------------
# Model lookups
# --------------------------------------------------------------------------------------------------


@dataclass
class ModelContext:
    """What is known about the model being looked up: its id (None for a local dir) and architecture."""

    model_id: str | None
    task: str
    arch: ModelArch | None
    config_source: str
    notes: list[str] = field(default_factory=list)

    def query(self) -> Query:
        ids = frozenset({self.model_id}) if self.model_id else frozenset()
        if self.arch is None:
            return Query(model_ids=ids)
        digests = {self.arch.digest} | {self.arch.export_digest(d) for d in _DTYPES_EXPORTED}
        return Query(model_ids=ids, model_types=frozenset({self.arch.model_type}), digests=frozenset(digests))


def model_context(
    model_id: str,
    source: RegistrySource,
    *,
    task: str = DEFAULT_TASK,
    revision: str | None = None,
    base_dir: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> ModelContext:
    """Find the model's config (local dir, local HF cache, or the source) and normalise it."""
    from neuronc.hubcache.sources import local_model_config
    from neuronc.model.files import local_model_dir

    local = local_model_dir(model_id, base_dir)
    hub_id: str | None = None if local is not None else model_id
    where = "given"
    if config is None and local is not None:
        config, where = local_model_config(model_id, revision, base_dir)
    elif config is None:
        config, where = source.model_config(model_id, revision)
    notes: list[str] = []
    arch = None
    if config is not None:
        arch = normalize_config(config, task)
        if arch is None:
            notes.append(_no_digest_note(config.get("model_type")))
    else:
        notes.append(f"architecture not checked, entries matched by model id only: {where}")
    return ModelContext(hub_id, task, arch, where, notes)


def _no_digest_note(model_type: Any) -> str:
    from neuronc.hfcompat import SDK_SERIES, transformers_version

    version = transformers_version()
    why = (
        "transformers is not installed"
        if version is None
        else f"transformers {version} is installed, and optimum-neuron 0.4.5 digests configs as {SDK_SERIES}.x "
        "serialises them"
    )
    return (
        f"model type {model_type!r} is outside neuronc's table and {why}: "
        "architecture not compared, entries matched by model id only"
    )


@dataclass
class LookupResult:
    """Every cached configuration related to one model (after filters), with provenance."""

    model: str
    context: ModelContext
    filters: Filters
    matches: list[Match]
    related: int
    registry: Registry
    other_tasks: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def hit(self) -> bool:
        return any(m.relation != "model-config-differs" for m in self.matches)

    def to_json(self) -> dict[str, Any]:
        arch = self.context.arch
        return {
            "schema_version": 1,
            "kind": "model",
            "model": self.model,
            "model_id": self.context.model_id,
            "task": self.context.task,
            "model_type": arch.model_type if arch else None,
            "arch_digest": arch.digest if arch else None,
            "digest_method": arch.method if arch else None,
            "config_source": self.context.config_source,
            "source": self.registry.source,
            "filters": self.filters.to_json(),
            "hit": self.hit,
            "related_entries": self.related,
            "entries": [m.to_json() for m in self.matches],
            "other_tasks": self.other_tasks,
            "stats": self.registry.stats(),
            "skipped": [p.to_json() for p in self.registry.problems],
            "notes": self.notes,
        }


def lookup_model(
    model_id: str,
    source: RegistrySource,
    filters: Filters = Filters(),
    *,
    task: str = DEFAULT_TASK,
    revision: str | None = None,
    config: Mapping[str, Any] | None = None,
    progress: ProgressSink = NULL_PROGRESS,
) -> LookupResult:
    """Every cached configuration for ``model_id`` (a Hub id or a local model directory).

    Args:
        model_id: Hub model id (``org/name``) or a local directory with a config.json.
        source: a ``SnapshotSource`` or ``HubSource``.
        filters: exact-match filters (``Filters``).
        task: the optimum-neuron task; entries of other tasks are counted in ``other_tasks``.
        revision: the model revision whose config.json to read (default: what is cached, or main).
        config: the model's config.json as a dict, when the caller already has it.

    Raises:
        InvalidInputError: a bad snapshot path or repository. CacheMissError: offline without a copy.
    """
    context = model_context(model_id, source, task=task, revision=revision, config=config)
    registry = source.load(context.query(), progress)
    matches, other_tasks = relate(registry.entries, context.model_id, context.arch, task)
    kept = sorted((m for m in matches if not filters.rejects(m.entry)), key=_sort_key)
    notes = [*context.notes, *registry.notes]
    return LookupResult(model_id, context, filters, kept, len(matches), registry, other_tasks, notes)


# --------------------------------------------------------------------------------------------------
# Build (profile) lookups
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDiff:
    """One field where a cached entry differs from what a build wants."""

    field: str
    entry: Any
    wanted: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "entry": self.entry, "wanted": self.wanted}


@dataclass(frozen=True)
class Nearest:
    """A near miss: the entry and the fields that keep it from being a hit."""

    match: Match
    differences: tuple[FieldDiff, ...]

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.match.to_json(), "differences": [d.to_json() for d in self.differences]}


@dataclass
class BuildLookup:
    """Whether one build of a profile is in the cache; on a miss, the nearest entries and why."""

    spec: BuildSpec
    status: str  # "hit" | "miss" | "not-applicable"
    wanted: dict[str, Any]
    hits: list[Match]
    nearest: list[Nearest]
    notes: list[str] = field(default_factory=list)

    @property
    def hit(self) -> bool:
        return self.status == "hit"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.spec.build_index,
            "name": self.spec.name,
            "matrix": self.spec.matrix_values,
            "model_id": self.spec.model.id,
            "revision": self.spec.model.revision,
            "backend": self.spec.backend,
            "status": self.status,
            "wanted": self.wanted,
            "hits": [m.to_json() for m in self.hits],
            "nearest": [n.to_json() for n in self.nearest],
            "notes": self.notes,
        }


def wanted_fields(spec: BuildSpec) -> dict[str, Any]:
    """The optimum-neuron entry fields a build maps to (target normalised as optimum-neuron does)."""
    return {
        "target": normalize_target(spec.target) if spec.target != "cpu" else None,
        "tp_degree": spec.tp_degree,
        "batch_size": spec.batch_size,
        "sequence_length": spec.sequence.max_length,
        "dtype": spec.dtype,
        "max_context_length": spec.sequence.max_context_length,
        "task": spec.model.task,
    }


def lookup_builds(
    specs: Sequence[BuildSpec],
    source: RegistrySource,
    constraints: Filters = Filters(),
    *,
    progress: ProgressSink = NULL_PROGRESS,
    nearest: int = 3,
) -> tuple[list[BuildLookup], Registry | None]:
    """Look up every build with one registry load; ``constraints`` (versions) must hold for a hit."""
    contexts: dict[tuple[str, str | None, str, str | None], ModelContext] = {}
    query = Query()
    for spec in specs:
        if spec.target == "cpu":
            continue
        key = (spec.model.id, spec.model.revision, spec.model.task, spec.profile_path)
        if key not in contexts:
            base_dir = Path(spec.profile_path).parent if spec.profile_path else None
            contexts[key] = model_context(
                spec.model.id, source, task=spec.model.task, revision=spec.model.revision, base_dir=base_dir
            )
            query = query.merge(contexts[key].query())
    registry = source.load(query, progress) if contexts else None
    results = []
    for spec in specs:
        wanted = wanted_fields(spec)
        if spec.target == "cpu":
            note = "target cpu: the Neuron cache holds Neuron (inf2/trn1/trn2) artifacts only"
            results.append(BuildLookup(spec, "not-applicable", wanted, [], [], [note]))
            continue
        context = contexts[(spec.model.id, spec.model.revision, spec.model.task, spec.profile_path)]
        assert registry is not None
        results.append(_lookup_one(spec, wanted, context, registry, constraints, nearest))
    return results, registry


def lookup_build(
    spec: BuildSpec,
    source: RegistrySource,
    constraints: Filters = Filters(),
    *,
    progress: ProgressSink = NULL_PROGRESS,
) -> BuildLookup:
    """Whether one build is cached; on a miss, the nearest entries and the fields that differ."""
    results, _ = lookup_builds([spec], source, constraints, progress=progress)
    return results[0]


def _lookup_one(
    spec: BuildSpec,
    wanted: Mapping[str, Any],
    context: ModelContext,
    registry: Registry,
    constraints: Filters,
    nearest_count: int,
) -> BuildLookup:
    matches, _ = relate(registry.entries, context.model_id, context.arch, context.task)
    hits: list[Match] = []
    scored: list[tuple[tuple[Any, ...], Nearest]] = []
    for match in matches:
        diffs = _differences(match, wanted, constraints)
        if not diffs and match.relation != "model-config-differs":
            hits.append(match)
        else:
            scored.append((_distance(diffs, match), Nearest(match, tuple(diffs))))
    hits.sort(key=_sort_key)
    scored.sort(key=lambda item: item[0])
    nearest: list[Nearest] = []
    seen: set[tuple[Any, ...]] = set()
    for _, near in scored if not hits else ():
        # Entries that differ in the same way and come from the same release say the same thing.
        e = near.match.entry
        key = (near.differences, e.optimum_version, e.compiler_version, e.model_id)
        if key not in seen:
            seen.add(key)
            nearest.append(near)
    notes = list(context.notes)
    if spec.backend != "optimum-neuron":
        notes.append(
            f"backend {spec.backend}: the Hugging Face Neuron cache is filled by optimum-neuron exports; "
            "a hit means optimum-neuron has compiled these shapes"
        )
    if not matches:
        notes.append("nothing cached for this model or its architecture")
    status = "hit" if hits else "miss"
    return BuildLookup(spec, status, dict(wanted), hits, nearest[:nearest_count], notes)


def _differences(match: Match, wanted: Mapping[str, Any], constraints: Filters) -> list[FieldDiff]:
    entry = match.entry
    diffs = [
        FieldDiff(name, entry.field(name), wanted[name]) for name in SHAPE_FIELDS if entry.field(name) != wanted[name]
    ]
    if entry.max_context_length is not None and entry.max_context_length != wanted["max_context_length"]:
        diffs.append(FieldDiff("max_context_length", entry.max_context_length, wanted["max_context_length"]))
    for name in constraints.rejects(entry):
        if name in ("compiler_version", "optimum_neuron_version"):
            value = entry.compiler_version if name == "compiler_version" else entry.optimum_version
            diffs.append(FieldDiff(name, value, getattr(constraints, name)))
    if match.relation == "model-config-differs":
        diffs.append(FieldDiff("architecture", ", ".join(match.differing), "the model's config.json"))
    return diffs


def _distance(diffs: Sequence[FieldDiff], match: Match) -> tuple[Any, ...]:
    spread = 0.0
    for diff in diffs:
        if isinstance(diff.entry, int) and isinstance(diff.wanted, int) and diff.entry > 0 and diff.wanted > 0:
            spread += abs(math.log2(diff.entry / diff.wanted))
        else:
            spread += 4.0
    return (len(diffs), spread, *_sort_key(match))
