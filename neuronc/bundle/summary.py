"""What `neuronc inspect` shows: a bundle's manifest as one stable, JSON-ready summary."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TypedDict

from neuronc.bundle._manifest import BUNDLE_PLACEHOLDER, Manifest

# Values read from the manifest's free-form ``profile`` (any JSON; a bundle is untrusted data, so they
# are shown only through safe_text).
ProfileValue = object


class ModelJSON(TypedDict):
    id: str | None
    revision: str | None


class SequenceJSON(TypedDict):
    max_length: ProfileValue
    max_context_length: ProfileValue
    context_buckets: ProfileValue
    token_buckets: ProfileValue


class GraphJSON(TypedDict):
    name: str
    role: str
    batch: int
    bucket: int
    artifact: str | None
    bytes: int | None
    compile_seconds: float
    cache_hit: bool


class ShardJSON(TypedDict):
    rank: int
    file: str
    bytes: int
    sha256: str


class WeightsSourceJSON(TypedDict):
    id: str | None
    revision: str | None
    mode: str | None
    files: int


class KeysJSON(TypedDict):
    config_hash: str
    toolchain_key: str
    hashed_fields: list[str]


class TotalsJSON(TypedDict):
    files: int
    bytes: int
    bytes_by_role: dict[str, int]
    graphs: int
    shards: int
    compile_seconds: float
    wall_seconds: float


class BundleSummary(TypedDict):
    """``bundle_summary()``: what `neuronc inspect --json` reports before its checks."""

    bundle: str
    schema_version: str
    model: ModelJSON
    backend: str
    target: str
    tp_degree: int | None
    batch_size: int | None
    dtype: str | None
    weights_mode: ProfileValue
    sequence: SequenceJSON
    graphs: list[GraphJSON]
    shards: list[ShardJSON]
    weights_source: WeightsSourceJSON | None
    toolchain: dict[str, str | None]
    keys: KeysJSON
    stages: list[dict[str, object]]  # Stage.model_dump(): name, wall_seconds, peak_rss_bytes
    totals: TotalsJSON
    created_at: str
    host: dict[str, str]  # HostInfo.model_dump(): hostname, platform, machine, python
    neuronc_version: str
    load_snippet: str | None
    extra: dict[str, object]  # the manifest's backend-specific extra, as it holds it


def bundle_summary(manifest: Manifest, bundle_dir: str | os.PathLike[str]) -> BundleSummary:
    """Model, backend, target, shapes, graphs, shards, toolchain, keys and totals of one bundle."""
    seq = manifest.profile.get("sequence") if isinstance(manifest.profile.get("sequence"), dict) else {}
    assert isinstance(seq, dict)
    sizes = manifest.artifact_sizes()
    graphs: list[GraphJSON] = [
        {
            "name": g.name,
            "role": g.role,
            "batch": g.batch,
            "bucket": g.bucket,
            "artifact": g.artifact,
            "bytes": sizes.get(g.artifact.rstrip("/")) if g.artifact else None,
            "compile_seconds": g.compile_seconds,
            "cache_hit": g.cache_hit,
        }
        for g in manifest.graphs
    ]
    by_role: Counter[str] = Counter()
    for f in manifest.files:
        by_role[f.role] += f.size
    snippet = manifest.extra.get("load_snippet")
    if isinstance(snippet, str):
        # Backends store snippets with a placeholder path: show the bundle where it is now.
        snippet = snippet.replace(BUNDLE_PLACEHOLDER, str(Path(bundle_dir).resolve()))
    weights = manifest.weights
    return {
        "bundle": str(bundle_dir),
        "schema_version": manifest.schema_version,
        "model": {"id": manifest.model_id, "revision": manifest.model_revision},
        "backend": manifest.backend,
        "target": manifest.target,
        "tp_degree": manifest.tp_degree,
        "batch_size": manifest.batch_size,
        "dtype": manifest.dtype,
        "weights_mode": manifest.profile.get("weights"),
        "sequence": {
            "max_length": seq.get("max_length"),
            "max_context_length": seq.get("max_context_length"),
            "context_buckets": seq.get("context_buckets"),
            "token_buckets": seq.get("token_buckets"),
        },
        "graphs": graphs,
        "shards": [
            {"rank": s.rank, "file": s.file, "bytes": s.bytes, "sha256": s.sha256}
            for s in sorted(manifest.shards, key=lambda s: s.rank)
        ],
        "weights_source": None
        if weights is None
        else {"id": weights.id, "revision": weights.revision, "mode": weights.mode, "files": len(weights.files)},
        "toolchain": dict(manifest.toolchain),
        "keys": {
            "config_hash": manifest.config_hash,
            "toolchain_key": manifest.toolchain_key,
            "hashed_fields": list(manifest.hashed_fields),
        },
        "stages": [s.model_dump() for s in manifest.stages],
        "totals": {
            "files": len(manifest.files),
            "bytes": manifest.total_bytes,
            "bytes_by_role": dict(sorted(by_role.items())),
            "graphs": len(manifest.graphs),
            "shards": len(manifest.shards),
            "compile_seconds": round(sum(g.compile_seconds for g in manifest.graphs), 3),
            "wall_seconds": round(sum(s.wall_seconds for s in manifest.stages), 3),
        },
        "created_at": manifest.created_at,
        "host": manifest.host.model_dump(),
        "neuronc_version": manifest.neuronc_version,
        "load_snippet": snippet if isinstance(snippet, str) else None,
        "extra": manifest.extra,
    }
