"""On a store miss: the nearest bundle of the same model and backend, and what differs from it."""

from __future__ import annotations

from neuronc.keys import canonical_json, diff_inputs
from neuronc.pipeline.context import ResolvedBuild
from neuronc.pipeline.report import NearestBundle
from neuronc.store import BundleStore


def nearest_bundle(store: BundleStore, ctx: ResolvedBuild) -> NearestBundle | None:
    """The store's bundle of the same model and backend with the fewest differing hashed fields."""
    spec = ctx.spec
    identity = canonical_json(ctx.config.inputs.get("weights"))
    best: tuple[tuple[int, int, str], NearestBundle] | None = None
    for entry in store.list():
        manifest = entry.manifest
        # The same model: the same id as written, or the same checkpoint named another way (another
        # path to the same directory, a copy of it) — what the config hash itself compares.
        same_model = manifest.model_id == spec.model.id or (
            canonical_json(manifest.hashed_inputs.get("weights")) == identity
        )
        if manifest.backend != spec.backend or not same_model:
            continue
        differences = diff_inputs(manifest.hashed_inputs, ctx.config.inputs)
        toolchain = {
            name: {"a": manifest.toolchain.get(name), "b": ctx.versions.get(name)}
            for name in dict.fromkeys([*manifest.toolchain, *ctx.versions])
            if manifest.toolchain.get(name) != ctx.versions.get(name)
        }
        candidate = NearestBundle(
            config_hash=manifest.config_hash,
            toolchain_key=manifest.toolchain_key,
            bundle=entry.location,
            differences=differences,
            toolchain_differences=toolchain,
        )
        rank = (len(differences), len(toolchain), manifest.config_hash)
        if best is None or rank < best[0]:
            best = (rank, candidate)
    return best[1] if best else None


def nearest_lines(nearest: NearestBundle | None) -> list[str]:
    """'nearest bundle abc123: sequence.context_buckets [128] → [128, 256]' lines for people."""
    if nearest is None:
        return []
    lines = [f"nearest bundle in the store: {nearest.config_hash[:12]} ({nearest.bundle})"]
    for d in nearest.differences:
        lines.append(f"  {d['field']}: {_short(canonical_json(d['a']))} → {_short(canonical_json(d['b']))}")
    for name, change in nearest.toolchain_differences.items():
        lines.append(f"  toolchain {name}: {change['a']} → {change['b']}")
    if not nearest.differences and not nearest.toolchain_differences:
        lines.append("  same hashed inputs; different toolchain key")
    return lines


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
