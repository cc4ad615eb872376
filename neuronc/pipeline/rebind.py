"""Rebind: a build whose graphs a stored bundle already holds takes them from there and stages only its
own weights; no compiler runs.

Two builds with one graphs key (``neuronc.keys``) compile to the same graphs: the same architecture,
shapes, options, flags and toolchain; only the weights differ (a fine-tune, a retrain, another Hub
repo of the same architecture). Where the backend's compiled artifacts are known not to hold the
weights (``weights_binding.embeds is False``, with its upstream source) and neuronc stages the
weights itself (the backend reads neuronc's rank shards), the rebound bundle is the stored bundle's
artifacts plus this build's weights, model files and profile, under this build's own bundle key.
The stored bundle is never changed. A build whose weights do not have the stored bundle's tensor
names, shapes and dtypes is compiled instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.bundle import Graph
from neuronc.keys import KEY_SCHEME
from neuronc.pipeline.context import ResolvedBuild
from neuronc.pipeline.timing import StageClock
from neuronc.store import BundleStore

if TYPE_CHECKING:
    from neuronc.bundle import Manifest
    from neuronc.pipeline.run import BuildOptions
    from neuronc.store import StoreEntry


@dataclass(frozen=True)
class Rebound:
    """A published rebound bundle and the stored bundle its graphs came from."""

    bundle: Path
    graphs: list[Graph]
    source: dict[str, str]


def rebind_refusal(ctx: ResolvedBuild) -> str | None:
    """Why this build's graphs may not come from another build's bundle (None: they may)."""
    from neuronc.backends.weights_binding import weights_binding_of

    binding = weights_binding_of(ctx.backend)
    if binding.embeds is not False:
        return f"{ctx.backend.name}: {binding.describe()}"
    if not ctx.backend.toolchain.consumes_rank_shards:
        return (
            f"{ctx.backend.name} writes its weights in its own format while it compiles: staging them needs a compile"
        )
    return None


def graphs_source(store: BundleStore, ctx: ResolvedBuild) -> StoreEntry | None:
    """The newest stored bundle with this build's graphs key and toolchain (None: none, or rebind refused)."""
    key = ctx.config
    if rebind_refusal(ctx) is not None or key.embeds_weights is not False:
        return None
    for entry in store.list():
        manifest = entry.manifest
        if manifest.toolchain_key == ctx.toolchain_key and _graphs_key(manifest) == key.graphs_hash:
            return entry
    return None


# The stages of a build that a rebind runs again (the rest - pre-flight, compile - it does not run).
_STAGING_STAGES = frozenset({"resolve", "split", "model_files"})


def rebind_plan(store: BundleStore, ctx: ResolvedBuild) -> dict[str, Any] | None:
    """What `neuronc plan` adds to the store's status of a build a compile would rebind (None: it would
    not): the bundle the
    graphs would come from, and the expected time (that bundle's own weights-staging stages: the same
    architecture, so the same bytes to split and copy)."""
    entry = graphs_source(store, ctx)
    if entry is None:
        return None
    manifest = entry.manifest
    seconds = sum(s.wall_seconds for s in manifest.stages if s.name in _STAGING_STAGES)
    return {
        "status": "rebind",
        "graphs_from": {"config_hash": manifest.config_hash, "bundle": entry.location},
        "expected_seconds": round(seconds, 3),
        "note": f"graphs from {manifest.config_hash[:12]}; only the weights are staged (about {seconds:.1f} s)",
    }


def _graphs_key(manifest: Manifest) -> str | None:
    keys = manifest.extra.get("keys")
    if not isinstance(keys, Mapping) or keys.get("scheme") != KEY_SCHEME or keys.get("embeds_weights") is not False:
        return None  # an older scheme, or graphs that may hold their weights
    graphs = keys.get("graphs")
    return graphs if isinstance(graphs, str) else None


class LayoutMismatch(Exception):
    """The build's weights are not laid out as the stored bundle's (names, shapes, dtypes)."""


def rebind_into_store(
    ctx: ResolvedBuild, store: BundleStore, options: BuildOptions, clock: StageClock, entry: StoreEntry
) -> Rebound | None:
    """Stage this build's weights beside ``entry``'s graphs and publish under this build's key.

    None when the weights do not fit the stored graphs (the caller compiles instead); nothing is
    left behind either way.
    """
    from neuronc.model.source import resolve_checkpoint
    from neuronc.pipeline.stages import add_model_files, add_profile, build_record, split_weights

    source_dir = Path(entry.location) if Path(entry.location).is_dir() else store.fetch(_entry_key(entry))
    source = entry.manifest
    spec = ctx.spec
    writer = store.writer(ctx.config.hash, ctx.toolchain_key)
    staging = Path(writer.path)
    try:
        with clock.stage("resolve", "resolve checkpoint"):
            model_dir, weights_source = resolve_checkpoint(spec, ctx.model_dir, ctx.revision)
        shards = []
        if spec.weights == "presharded":
            with clock.stage("split", f"split weights (tp={spec.tp_degree})", quiet=True):
                shards = split_weights(model_dir, staging / "weights", ctx, writer, options)
            _check_layout(source_dir, staging)
        with clock.stage("rebind", f"take {len(source.graphs)} compiled graphs from {source.config_hash[:12]}"):
            for file in source.files:
                if file.path.startswith("artifacts/"):
                    writer.add_file(file.path, role=file.role, source_path=source_dir / file.path)
            add_model_files(model_dir, writer)
            add_profile(ctx, writer)
        graphs = [Graph(**{**g.model_dump(), "compile_seconds": 0.0, "cache_hit": True}) for g in source.graphs]
        origin = {"config_hash": source.config_hash, "toolchain_key": source.toolchain_key, "bundle": entry.location}
        extra = {k: v for k, v in source.extra.items() if k not in ("keys", "rebound")} | {"rebound": origin}
        with clock.stage("publish", "write manifest and publish"):
            record = build_record(ctx, clock, graphs=graphs, shards=shards, source=weights_source, extra=extra)
            bundle = writer.finish(record)
    except LayoutMismatch:
        return None
    finally:
        writer.abort()
    return Rebound(bundle, graphs, origin)


def _entry_key(entry: StoreEntry) -> str:
    return f"{entry.manifest.config_hash}@{entry.manifest.toolchain_key}"


def _check_layout(source_dir: Path, staging: Path) -> None:
    """LayoutMismatch unless the staged rank shards hold the tensors of the stored bundle's, one for one."""
    ours, theirs = _layout(staging / "weights"), _layout(source_dir / "weights")
    if ours != theirs:
        raise LayoutMismatch


def _layout(weights_dir: Path) -> dict[str, dict[str, tuple[str, tuple[int, ...]]]]:
    from neuronc.checkpoint import read_safetensors_header

    layout: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(weights_dir.glob("*.safetensors")):
            layout[path.name] = {e.name: (e.dtype, tuple(e.shape)) for e in read_safetensors_header(path).entries}
    return layout


__all__ = ["Rebound", "graphs_source", "rebind_into_store", "rebind_plan", "rebind_refusal"]
