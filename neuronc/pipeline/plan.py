"""The CI view of a set of builds, beside `compile` in the pipeline: `neuronc plan` (store, HF Neuron
cache and pre-flight per build and graph) and `neuronc matrix` (one CI job per bundle, with the runner it needs)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from neuronc.backends.base import Backend, GraphSpec
from neuronc.build import Build
from neuronc.errors import NeuroncError, foreign_row, short_reason
from neuronc.pipeline.context import UNRESOLVED, ResolvedBuild
from neuronc.preflight import Estimate, estimate
from neuronc.spec import BuildSpec


class CacheStatus(StrEnum):
    """Whether a cache (the bundle store, the Hugging Face Neuron cache) holds a build."""

    HIT = "hit"
    MISS = "miss"
    OTHER_TOOLCHAIN = "other-toolchain"
    NOT_APPLICABLE = "n/a"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class HfCacheStatus:
    """The Hugging Face Neuron cache's answer for one build (advisory: never an error)."""

    status: CacheStatus
    source: str | None
    # Why the status is unknown, or what the lookup found.
    reason: str | None = None
    hits: int = 0
    nearest: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        detail: Any = (
            self.reason
            if self.reason is not None
            else {"hits": self.hits, "nearest": self.nearest, "notes": list(self.notes)}
        )
        return {"status": str(self.status), "source": self.source, "detail": detail}


@dataclass(frozen=True)
class PlannedGraph:
    """One graph a build would compile, and what `neuronc plan` says about it."""

    graph: GraphSpec
    # The build's store status (hit, miss, other-toolchain, unresolved) and HF Neuron cache status.
    store: str
    hf_cache: str
    # The pre-flight's host memory for compiling this graph (None: unknown).
    host_compile_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.graph.to_json(),
            "store": self.store,
            "hf_cache": self.hf_cache,
            "host_compile_bytes": self.host_compile_bytes,
        }


@dataclass
class BuildPlan:
    """What `neuronc plan` says about one build."""

    spec: BuildSpec
    config_hash: str
    toolchain_key: str
    toolchain_label: str
    toolchain_missing: list[str]
    store: dict[str, Any]
    hf_cache: HfCacheStatus
    estimate: Estimate
    graphs: list[PlannedGraph]
    backend: Backend
    # The Neuron SDK release the build is judged against (the support matrix); None outside the SDK.
    neuron_sdk: dict[str, Any] | None = None
    # The build as resolved for this plan (`plan --executor ray` places it without resolving again).
    context: ResolvedBuild | None = None

    @property
    def label(self) -> str:
        return self.estimate.label

    @property
    def resolved(self) -> bool:
        """Whether the build's key is known (a hub model's revision resolved)."""
        return self.config_hash != UNRESOLVED

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "profile": spec.profile_path,
            "build": spec.build_index,
            "name": spec.name,
            "matrix": dict(spec.matrix_values),
            "model": spec.model.id,
            "backend": spec.backend,
            "target": spec.target,
            "tp_degree": spec.tp_degree,
            "batch_size": spec.batch_size,
            "key": self.config_hash[:12] if self.resolved else UNRESOLVED,
            "config_hash": self.config_hash,
            "revision": self.context.revision if self.context is not None else None,
            "toolchain_key": self.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "toolchain_missing": list(self.toolchain_missing),
            "store": dict(self.store),
            "hf_cache": self.hf_cache.to_json(),
            "preflight": self.estimate.to_json(),
            "graphs": [g.to_json() for g in self.graphs],
            "neuron_sdk": self.neuron_sdk,
        }


def plan_builds(
    builds: Sequence[Build],
    *,
    store: Any = None,
    snapshot: str | os.PathLike[str] | None = None,
    online: bool = False,
    jobs: int | None = None,
    host_ram: int | None = None,
) -> list[BuildPlan]:
    """Describe each build: store status, HF Neuron cache status, and the pre-flight estimate.

    ``store`` is anything ``neuronc.store.open_store`` accepts (None: the default store).
    The HF Neuron cache is consulted from ``snapshot`` (a local copy of the cache repo) or, with
    ``online``, the Hub; without either, or when the lookup cannot be made, its status is "unknown".
    Nothing here raises for a build that does not fit: see ``Estimate.fits``.
    """
    from neuronc.backends.support import release_json
    from neuronc.pipeline.context import resolve_build
    from neuronc.store import open_store

    resolved = open_store(store)
    hf_statuses = hf_cache_statuses(builds, snapshot=snapshot, online=online)
    plans: list[BuildPlan] = []
    for index, build in enumerate(builds):
        ctx = resolve_build(build, strict=False)
        spec = ctx.spec
        availability = ctx.availability
        missing = sorted(name for name, version in ctx.versions.items() if version is None)
        if ctx.config_key is None:
            reason = ctx.unresolved.message if ctx.unresolved is not None else UNRESOLVED
            store_status: dict[str, Any] = {"status": UNRESOLVED, "store": resolved.location, "note": reason}
        else:
            store_status = resolved.probe(ctx.config_key.hash, ctx.toolchain_key).to_json()
            if store_status["status"] != "hit":
                from neuronc.pipeline.rebind import rebind_plan

                store_status |= rebind_plan(resolved, ctx) or {}
        if not availability.available:
            store_status["note"] = (
                f"the {spec.backend} toolchain is not installed here ({availability.reason}); "
                "a hit is judged for the versions installed here, the compile runner's may differ"
            )
        hf = hf_statuses[index]
        plan = ctx.plan
        # Sized from config.json at the commit the key names (ctx.model_config), as compile sizes it.
        est = estimate(
            spec, ctx.model_config, backend=ctx.backend, graphs=len(plan.graphs), jobs=jobs, host_ram=host_ram
        )
        graphs = [
            PlannedGraph(graph, str(store_status["status"]), str(hf.status), est.host_compile_per_graph_bytes)
            for graph in plan.graphs
        ]
        plans.append(
            BuildPlan(
                spec=spec,
                config_hash=ctx.key_text,
                toolchain_key=ctx.toolchain_key,
                toolchain_label=ctx.toolchain_label,
                toolchain_missing=missing,
                store=store_status,
                hf_cache=hf,
                estimate=est,
                graphs=graphs,
                backend=ctx.backend,
                neuron_sdk=release_json(ctx.backend.rules.release_for(spec), spec.backend),
                context=ctx,
            )
        )
    return plans


def hf_cache_statuses(
    builds: Sequence[Build], *, snapshot: str | os.PathLike[str] | None = None, online: bool = False
) -> list[HfCacheStatus]:
    """Whether the Hugging Face Neuron cache has each build: hit | miss | n/a | unknown (never raises).

    One registry load for all builds, through ``neuronc.hubcache.lookup_builds`` with a snapshot
    (``--snapshot DIR``) or the Hub (``--online``). A snapshot that cannot be read or an
    unreachable Hub gives "unknown" with the reason: the cache is advisory.
    """
    if snapshot is None and not online:
        unchecked = HfCacheStatus(CacheStatus.UNKNOWN, None, reason="not checked (pass --snapshot DIR or --online)")
        return [unchecked] * len(builds)
    source_name = str(snapshot) if snapshot is not None else "hub"
    from neuronc.hubcache import HubSource, LookupStatus, SnapshotSource, lookup_builds

    try:
        source: Any = SnapshotSource(snapshot) if snapshot is not None else HubSource.from_environment()
        results, _ = lookup_builds(list(builds), source)
    except NeuroncError as exc:  # the cache is advisory: a bad snapshot or an offline miss is "unknown"
        failed = HfCacheStatus(CacheStatus.UNKNOWN, source_name, reason=f"lookup failed: {exc.message}")
        return [failed] * len(builds)
    except Exception as exc:
        if foreign_row(exc) is None:
            raise
        failed = HfCacheStatus(CacheStatus.UNKNOWN, source_name, reason=f"lookup failed: {short_reason(exc)}")
        return [failed] * len(builds)
    by_result = {
        LookupStatus.HIT: CacheStatus.HIT,
        LookupStatus.MISS: CacheStatus.MISS,
        LookupStatus.NOT_APPLICABLE: CacheStatus.NOT_APPLICABLE,
    }
    return [
        HfCacheStatus(
            by_result.get(result.status, CacheStatus.UNKNOWN),
            source_name,
            hits=len(result.hits),
            nearest=len(result.nearest),
            notes=tuple(str(n) for n in result.notes),
        )
        for result in results
    ]


def hf_cache_status(
    build: Build, *, snapshot: str | os.PathLike[str] | None = None, online: bool = False
) -> HfCacheStatus:
    """``hf_cache_statuses`` for one build."""
    return hf_cache_statuses([build], snapshot=snapshot, online=online)[0]


# ------------------------------------------------------------------------------------------------
# The CI matrix
# ------------------------------------------------------------------------------------------------

# GitHub Actions refuses a job matrix of more than 256 combinations.
GITHUB_MATRIX_LIMIT = 256


@dataclass(frozen=True)
class MatrixEntry:
    """One CI job: a bundle to build, its whole identity for ``compile --only KEY --revision COMMIT``
    (the key and the commit the hub model's revision resolved to), and the runner it needs."""

    profile: str | None
    build: int
    # None when the model's revision cannot be resolved here (``unresolved`` says why).
    config_hash: str | None
    # The commit the key was computed at (None for a local model directory, or unresolved).
    revision: str | None
    unresolved: str | None
    name: str
    model: str
    backend: str
    target: str
    tp_degree: int
    batch_size: int
    runner: str
    preflight: str
    graphs: int

    @property
    def key(self) -> str | None:
        return self.config_hash[:12] if self.config_hash is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "build": self.build,
            "key": self.key,
            "config_hash": self.config_hash,
            "revision": self.revision,
            "name": self.name,
            "model": self.model,
            "backend": self.backend,
            "target": self.target,
            "tp_degree": self.tp_degree,
            "batch_size": self.batch_size,
            "runner": self.runner,
            "preflight": self.preflight,
            "graphs": self.graphs,
        }


def matrix_entries(builds: Sequence[Build]) -> list[MatrixEntry]:
    """One entry per bundle, ready for a CI job matrix: profile, build index, key, expected runner.

    ``key`` is the config hash prefix ``neuronc compile --only`` takes and ``revision`` the commit
    ``--revision`` takes (the key names it: a job run after ``main`` moved builds this key, not
    ``main``'s new one); ``runner`` is the smallest
    instance of the target's family with tp NeuronCores and the estimated host RAM for compile
    (``cpu`` for the CPU target).
    """
    from neuronc.hardware import choose_runner
    from neuronc.pipeline.context import resolve_build

    entries = []
    for build in builds:
        ctx = resolve_build(build, strict=False)
        spec = ctx.spec
        est = estimate(spec, ctx.model_config, backend=ctx.backend, graphs=len(ctx.plan.graphs))
        host = max(est.host_compile_bytes or 0, est.host_split_bytes or 0) or None
        entries.append(
            MatrixEntry(
                profile=spec.profile_path,
                build=spec.build_index,
                config_hash=ctx.config_key.hash if ctx.config_key is not None else None,
                revision=ctx.revision,
                unresolved=ctx.unresolved.message if ctx.unresolved is not None else None,
                name=spec.name or spec.model.id,
                model=spec.model.id,
                backend=spec.backend,
                target=str(spec.target),
                tp_degree=spec.tp_degree,
                batch_size=spec.batch_size,
                runner=choose_runner(spec.target, spec.tp_degree, host_bytes=host, options=spec.options),
                preflight=str(est.status),
                graphs=est.graphs,
            )
        )
    return entries


__all__ = [
    "GITHUB_MATRIX_LIMIT",
    "BuildPlan",
    "CacheStatus",
    "HfCacheStatus",
    "MatrixEntry",
    "PlannedGraph",
    "hf_cache_status",
    "hf_cache_statuses",
    "matrix_entries",
    "plan_builds",
]
