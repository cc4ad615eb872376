"""Build (profile) lookups: is each build of a profile in the cache, and if not, what is nearest.

Each build maps to the fields optimum-neuron's entries carry (``Wanted``); a hit needs all of them
equal and the entry's architecture equal to the model's. The nearest entries are ranked by the
number of differing fields, then by how far the numbers are (on a log scale), then newest first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.hubcache.lookup import Filters, Match, ModelContext, Relation, model_context, relate, sort_key
from neuronc.hubcache.paths import normalize_target, printable
from neuronc.hubcache.registry import Query, Registry
from neuronc.jsonfile import JsonFields
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.build import Build
    from neuronc.hubcache.sources import RegistrySource
    from neuronc.spec import BuildSpec

SHAPE_FIELDS = ("target", "tp_degree", "batch_size", "sequence_length", "dtype")


class LookupStatus(StrEnum):
    """What the Hugging Face Neuron cache holds for one build (not ``pipeline.BuildStatus``: what a build did)."""

    HIT = "hit"
    MISS = "miss"
    NOT_APPLICABLE = "not-applicable"


@dataclass(frozen=True)
class Wanted(JsonFields):
    """The optimum-neuron entry fields a build maps to (target normalised as optimum-neuron does)."""

    target: str | None
    tp_degree: int
    batch_size: int
    sequence_length: int
    dtype: str
    max_context_length: int | None
    task: str

    @classmethod
    def of(cls, spec: BuildSpec) -> Wanted:
        return cls(
            target=normalize_target(spec.target) if spec.target != "cpu" else None,
            tp_degree=spec.tp_degree,
            batch_size=spec.batch_size,
            sequence_length=spec.sequence.max_length,
            dtype=spec.dtype,
            max_context_length=spec.sequence.max_context_length,
            task=spec.model.task,
        )


@dataclass(frozen=True)
class FieldDiff(JsonFields):
    """One field where a cached entry differs from what a build wants."""

    field: str
    entry: Any
    wanted: Any


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
    status: LookupStatus
    wanted: Wanted
    hits: list[Match]
    nearest: list[Nearest]
    notes: list[str] = field(default_factory=list)

    @property
    def hit(self) -> bool:
        return self.status == LookupStatus.HIT

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.spec.build_index,
            "name": self.spec.name,
            "matrix": self.spec.matrix_values,
            "model_id": self.spec.model.id,
            "revision": self.spec.model.revision,
            "backend": self.spec.backend,
            "status": str(self.status),
            "wanted": self.wanted.to_json(),
            "hits": [m.to_json() for m in self.hits],
            "nearest": [n.to_json() for n in self.nearest],
            "notes": self.notes,
        }


# Backends whose compiled artifacts live in a cache of their own, which the Hugging Face Neuron cache
# (neuronx-cc's cache of optimum-neuron exports) never holds.
_OWN_CACHE = {
    "vllm-neuron": "the vllm-neuron plugin keeps its NEFFs in its own compile cache ($VLLM_CACHE_ROOT), "
    "keyed by traced graph; the Hugging Face Neuron cache holds optimum-neuron exports only",
}


def _not_applicable(spec: BuildSpec) -> str | None:
    """Why the Hugging Face Neuron cache cannot hold this build (None when it can)."""
    if spec.target == "cpu":
        return "target cpu: the Neuron cache holds Neuron (inf2/trn1/trn2) artifacts only"
    return _OWN_CACHE.get(spec.backend)


def lookup_builds(
    builds: Sequence[Build],
    source: RegistrySource,
    constraints: Filters = Filters(),
    *,
    progress: ProgressSink = NULL_PROGRESS,
    nearest: int = 3,
) -> tuple[list[BuildLookup], Registry | None]:
    """Look up every build with one registry load; ``constraints`` (versions) must hold for a hit."""
    contexts: dict[tuple[str, str | None, str, str | None], ModelContext] = {}
    query = Query()
    specs = [build.spec for build in builds]
    for spec in specs:
        if _not_applicable(spec) is not None:
            continue
        key = (spec.model.id, spec.model.revision, spec.model.task, spec.profile_path)
        if key not in contexts:
            base_dir = Path(spec.profile_path).parent if spec.profile_path else None
            contexts[key] = model_context(
                spec.model.id, source, task=spec.model.task, revision=spec.model.revision, base_dir=base_dir
            )
            query = query.merge(contexts[key].query())
    registry = source.load(query, progress) if contexts else None
    # The entries related to each model, compared once per model (a matrix shares them across builds).
    related = {k: relate(registry, c)[0] for k, c in contexts.items()} if registry is not None else {}
    results = []
    for build in builds:
        spec = build.spec
        wanted = Wanted.of(spec)
        note = _not_applicable(spec)
        if note is not None:
            results.append(BuildLookup(spec, LookupStatus.NOT_APPLICABLE, wanted, [], [], [note]))
            continue
        key = (spec.model.id, spec.model.revision, spec.model.task, spec.profile_path)
        results.append(_lookup_one(build, wanted, contexts[key], related[key], constraints, nearest))
    return results, registry


def lookup_build(
    build: Build,
    source: RegistrySource,
    constraints: Filters = Filters(),
    *,
    progress: ProgressSink = NULL_PROGRESS,
) -> BuildLookup:
    """Whether one build is cached; on a miss, the nearest entries and the fields that differ."""
    results, _ = lookup_builds([build], source, constraints, progress=progress)
    return results[0]


def _lookup_one(
    build: Build,
    wanted: Wanted,
    context: ModelContext,
    matches: Sequence[Match],
    constraints: Filters,
    nearest_count: int,
) -> BuildLookup:
    spec = build.spec
    hits: list[Match] = []
    scored: list[tuple[tuple[Any, ...], Nearest]] = []
    for match in matches:
        diffs = _differences(match, wanted, constraints)
        if not diffs and match.relation != Relation.CONFIG_DIFFERS:
            hits.append(match)
        else:
            scored.append((_distance(diffs, match), Nearest(match, tuple(diffs))))
    hits.sort(key=sort_key)
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
    if not build.backend.toolchain.uses_hf_neuron_cache:
        notes.append(
            f"backend {spec.backend}: the Hugging Face Neuron cache is filled by optimum-neuron exports; "
            "a hit means optimum-neuron has compiled these shapes"
        )
    if not matches:
        notes.append("nothing cached for this model or its architecture")
    status = LookupStatus.HIT if hits else LookupStatus.MISS
    return BuildLookup(spec, status, wanted, hits, nearest[:nearest_count], notes)


def _differences(match: Match, wanted: Wanted, constraints: Filters) -> list[FieldDiff]:
    entry = match.entry
    diffs = [
        FieldDiff(name, getattr(entry, name), getattr(wanted, name))
        for name in SHAPE_FIELDS
        if getattr(entry, name) != getattr(wanted, name)
    ]
    if entry.max_context_length is not None and entry.max_context_length != wanted.max_context_length:
        diffs.append(FieldDiff("max_context_length", entry.max_context_length, wanted.max_context_length))
    for name in constraints.rejects(entry):
        if name in ("compiler_version", "optimum_neuron_version"):
            value = entry.compiler_version if name == "compiler_version" else entry.optimum_version
            diffs.append(FieldDiff(name, value, getattr(constraints, name)))
    if match.relation == Relation.CONFIG_DIFFERS:
        differing = ", ".join(printable(key) for key in match.differing)
        diffs.append(FieldDiff("architecture", differing, "the model's config.json"))
    return diffs


def _distance(diffs: Sequence[FieldDiff], match: Match) -> tuple[Any, ...]:
    spread = 0.0
    for diff in diffs:
        if isinstance(diff.entry, int) and isinstance(diff.wanted, int) and diff.entry > 0 and diff.wanted > 0:
            spread += abs(math.log2(diff.entry / diff.wanted))
        else:
            spread += 4.0
    return (len(diffs), spread, *sort_key(match))
