"""Model lookups: which cached configurations exist for a model.

Entries are related to a model in three ways (``Relation``):

- ``model``: written for this model id, and its architecture fields equal the model's config (or the
  config is not available, so only the id could be checked);
- ``architecture``: written for another model id with the same architecture (a fine-tune, a copy);
  optimum-neuron's compiled graphs are keyed by architecture and shapes, not by weights, so these
  are hits too, as optimum-neuron's own lookup reports them;
- ``model-config-differs``: written for this model id, but the architecture fields differ (another
  revision of the model, say). Never a hit; shown so that nothing cached for the id is hidden.

Architecture fields are compared directly (``arch.compare_arch``), tolerating the differences
optimum-neuron 0.4.5's arch digest does not, so entries the digest hides are found, and flagged
``visible_to_optimum_neuron: false`` with the reasons (``Hidden``). Only the entries the index
says can be related (same model id, or same ``arch_key``) are read in full and compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import InvalidInputError
from neuronc.hubcache.arch import ArchCheck, arch_key, compare_arch, show
from neuronc.hubcache.configs import ConfigError, ModelArch, normalize_config
from neuronc.hubcache.entries import CacheEntry
from neuronc.hubcache.paths import (
    COMPILER_PREFIX,
    OPTIMUM_NEURON_VERSION,
    PINNED_COMPILER,
    Layout,
    normalize_dtype,
    normalize_target,
    printable,
    version_key,
    version_matches,
)
from neuronc.hubcache.registry import Query, Registry
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.hubcache.sources import RegistrySource

DEFAULT_TASK = "text-generation"
_DTYPES_EXPORTED = ("bfloat16", "float16", "float32")


class Relation(StrEnum):
    MODEL = "model"
    ARCHITECTURE = "architecture"
    CONFIG_DIFFERS = "model-config-differs"


_RELATION_ORDER = (Relation.MODEL, Relation.ARCHITECTURE, Relation.CONFIG_DIFFERS)


class Hidden(StrEnum):
    """Why optimum-neuron 0.4.5's own lookup cannot see an entry neuronc found."""

    OTHER_VERSION = "other-optimum-neuron-version"
    OTHER_COMPILER = "other-compiler"
    ALIAS_ONLY = "alias-only"
    DTYPE = "dtype"
    HEAD_DIM = "head_dim"
    DIGEST = "digest"


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


@dataclass(frozen=True)
class Match:
    """An entry related to a model: how, whether optimum-neuron 0.4.5's lookup can see it, and notes."""

    entry: CacheEntry
    relation: Relation
    visible_to_optimum_neuron: bool | None
    notes: tuple[str, ...] = ()
    differing: tuple[str, ...] = ()
    hidden: tuple[Hidden, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = self.entry.to_json()
        data["relation"] = str(self.relation)
        data["visible_to_optimum_neuron"] = self.visible_to_optimum_neuron
        data["hidden_because"] = [str(h) for h in self.hidden]
        data["architecture_differs"] = [printable(key) for key in self.differing]
        data["notes"] = list(self.notes)
        return data


@dataclass
class ModelContext:
    """What is known about the model being looked up: its id (None for a local dir) and architecture."""

    model_id: str | None
    task: str
    arch: ModelArch | None
    config_source: str
    notes: list[str] = field(default_factory=list)

    @property
    def arch_key(self) -> str | None:
        return arch_key(self.arch.model_type, self.arch.config) if self.arch is not None else None

    def query(self) -> Query:
        ids = frozenset({self.model_id}) if self.model_id else frozenset()
        if self.arch is None:
            return Query(model_ids=ids)
        digests = {self.arch.digest} | {self.arch.export_digest(d) for d in _DTYPES_EXPORTED}
        return Query(model_ids=ids, model_types=frozenset({self.arch.model_type}), digests=frozenset(digests))


def relate(registry: Registry, context: ModelContext) -> tuple[list[Match], dict[str, int]]:
    """The entries related to a model, and a count of its entries for other tasks."""
    matches: list[Match] = []
    other_tasks: dict[str, int] = {}
    model_id, arch, task = context.model_id, context.arch, context.task
    table = registry.table
    for row in table.candidates(model_id, context.arch_key):
        same_id = model_id is not None and table.model_ids[row] == model_id
        entry_task = table.tasks[row] or task
        if entry_task != task:
            if same_id:
                other_tasks[entry_task] = other_tasks.get(entry_task, 0) + 1
            continue
        entry = registry.entry(row)
        if entry is None:
            continue
        if arch is None:
            matches.append(Match(entry, Relation.MODEL, None, ("architecture not checked: no model config",)))
            continue
        check = compare_arch(entry, arch)
        if check.same:
            relation = Relation.MODEL if same_id else Relation.ARCHITECTURE
        elif same_id:
            relation = Relation.CONFIG_DIFFERS
        else:
            continue
        visible, hidden, notes = _visibility(entry, arch, check)
        matches.append(Match(entry, relation, visible, notes, check.differing, hidden))
    return matches, other_tasks


def _visibility(
    entry: CacheEntry, arch: ModelArch, check: ArchCheck
) -> tuple[bool, tuple[Hidden, ...], tuple[str, ...]]:
    notes = list(check.tolerated)
    if entry.optimum_version != OPTIMUM_NEURON_VERSION:
        notes.append(f"optimum-neuron {entry.optimum_version} registry: 0.4.5 reads only its own")
        return False, (Hidden.OTHER_VERSION,), tuple(notes)
    if not entry.compiler_folder.startswith(COMPILER_PREFIX + PINNED_COMPILER):
        notes.append(f"compiler {entry.compiler_version}: optimum-neuron 0.4.5 reads only neuronxcc-{PINNED_COMPILER}*")
        return False, (Hidden.OTHER_COMPILER,), tuple(notes)
    if entry.layout != Layout.ARCH_DIGEST:
        notes.append("alias file only (no arch-digest file): optimum-neuron 0.4.5 cannot find it")
        return False, (Hidden.ALIAS_ONLY,), tuple(notes)
    if entry.digest_folder == arch.digest:
        return True, (), tuple(notes)
    hidden: list[Hidden] = []
    reasons = []
    if entry.config.get("dtype") != arch.config.get("dtype"):
        hidden.append(Hidden.DTYPE)
        reasons.append(
            f"config dtype {show(entry.config.get('dtype'))} in the entry, "
            f"{show(arch.config.get('dtype'))} in the checkpoint"
        )
    if "head_dim" in arch.config and arch.config["head_dim"] is None and entry.config.get("head_dim") is not None:
        hidden.append(Hidden.HEAD_DIM)
        reasons.append("head_dim is null in the checkpoint config and filled in at export")
    if not reasons:
        hidden.append(Hidden.DIGEST)
        reasons.append("fields outside the architecture comparison differ")
    notes.append("hidden from optimum-neuron 0.4.5's lookup (arch digest differs: " + "; ".join(reasons) + ")")
    return False, tuple(hidden), tuple(notes)


def sort_key(match: Match) -> tuple[Any, ...]:
    """Relation first, newest optimum-neuron and compiler next, then the shapes."""
    e = match.entry
    return (
        _RELATION_ORDER.index(match.relation),
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


def model_context(
    model_id: str,
    source: RegistrySource,
    *,
    task: str = DEFAULT_TASK,
    revision: str | None = None,
    base_dir: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> ModelContext:
    """Find the model's config (local dir, local HF cache, or the source) and normalise it.

    Raises CheckpointError or InvalidInputError (exit 2) naming the file when the config.json found
    cannot be used (not JSON, too deep, a field no config class accepts).
    """
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
        try:
            arch = normalize_config(config, task)
        except ConfigError as exc:
            msg = f"config.json of {printable(model_id)} ({where}): {exc}"
            raise InvalidInputError(msg, hint="fix the config.json, or look the model up by its Hub id") from None
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
    if not isinstance(model_type, str):
        return "config.json has no model_type: architecture not compared, entries matched by model id only"
    return (
        f"model type '{printable(model_type)}' is outside neuronc's table and {why}: "
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
        return any(m.relation != Relation.CONFIG_DIFFERS for m in self.matches)

    def to_json(self) -> dict[str, Any]:
        arch = self.context.arch
        return {
            "schema_version": 1,
            "kind": "model",
            "model": printable(self.model),
            "model_id": self.context.model_id,
            "task": self.context.task,
            "model_type": arch.model_type if arch else None,
            "arch_digest": arch.digest if arch else None,
            "digest_method": arch.method if arch else None,
            "config_source": self.context.config_source,
            "source": self.registry.source.to_json(),
            "filters": self.filters.to_json(),
            "hit": self.hit,
            "related_entries": self.related,
            "entries": [m.to_json() for m in self.matches],
            "other_tasks": self.other_tasks,
            "stats": self.registry.stats().to_json(),
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
        InvalidInputError: a bad snapshot path, repository or config.json. CacheMissError: offline without a copy.
    """
    context = model_context(model_id, source, task=task, revision=revision, config=config)
    registry = source.load(context.query(), progress)
    matches, other_tasks = relate(registry, context)
    kept = sorted((m for m in matches if not filters.rejects(m.entry)), key=sort_key)
    notes = [*context.notes, *registry.notes]
    return LookupResult(model_id, context, filters, kept, len(matches), registry, other_tasks, notes)
