"""Manifest fields from the pipeline's inputs: derived keys, graphs, shards, stages, host."""

from __future__ import annotations

import platform
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from neuronc.bundle._manifest import SCHEMA_VERSION, FileEntry

FIELDS = frozenset(
    {
        "backend",
        "target",
        "profile",
        "spec",
        "config_key",
        "config_hash",
        "hashed_fields",
        "hashed_inputs",
        "toolchain",
        "toolchain_key",
        "graphs",
        "shards",
        "weights",
        "stages",
        "extra",
        "created_at",
        "host",
        "neuronc_version",
    }
)


def host_info() -> dict[str, str]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def manifest_data(
    fields: Mapping[str, Any], files: Mapping[str, FileEntry], recorded_stages: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Turn the pipeline's inputs into manifest data (filling what can be derived)."""
    from neuronc import __version__
    from neuronc.keys import toolchain_key

    unknown = sorted(set(fields) - FIELDS)
    if unknown:
        msg = f"unknown manifest fields: {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})"
        raise ValueError(msg)
    f = dict(fields)
    spec = f.pop("spec", None)
    if spec is not None:
        f.setdefault("profile", spec.normalized())
        f.setdefault("backend", spec.backend)
        f.setdefault("target", spec.target)
    key = f.pop("config_key", None)
    if key is not None:
        f.setdefault("config_hash", key.hash)
        f.setdefault("hashed_inputs", dict(key.inputs))
        f.setdefault("hashed_fields", list(key.fields))
    profile = f.get("profile") or {}
    f.setdefault("backend", profile.get("backend"))
    f.setdefault("target", profile.get("target"))
    toolchain = dict(f.get("toolchain") or {})
    expected_key = toolchain_key(toolchain)
    if f.get("toolchain_key") not in (None, expected_key):
        msg = "toolchain_key does not match toolchain (compute it with neuronc.keys.toolchain_key)"
        raise ValueError(msg)
    by_path = dict(files)
    graphs = [_graph(g) for g in f.get("graphs") or ()]
    shards = [_shard(s, by_path) for s in f.get("shards") or ()]
    stages = _stages(f.get("stages")) + [dict(s) for s in recorded_stages]
    return {
        "schema_version": SCHEMA_VERSION,
        "neuronc_version": f.get("neuronc_version") or __version__,
        "created_at": f.get("created_at") or datetime.now(UTC).isoformat(timespec="seconds"),
        "host": f.get("host") or host_info(),
        "backend": f.get("backend"),
        "target": f.get("target"),
        "profile": profile,
        "config_hash": f.get("config_hash"),
        "hashed_fields": list(f.get("hashed_fields") or []),
        "hashed_inputs": dict(f.get("hashed_inputs") or {}),
        "toolchain": toolchain,
        "toolchain_key": expected_key,
        "graphs": graphs,
        "shards": shards,
        "weights": f.get("weights"),
        "stages": stages,
        # Sort by path so the manifest is byte-identical across runs.
        "files": [by_path[p].model_dump() for p in sorted(by_path)],
        "extra": dict(f.get("extra") or {}),
    }


def _graph(graph: Any) -> dict[str, Any]:
    if isinstance(graph, Mapping):
        data = dict(graph)
    else:  # neuronc.backends.base.CompiledGraph (or anything shaped like it)
        spec = getattr(graph, "graph", graph)
        data = {
            "role": spec.role,
            "batch": spec.batch,
            "bucket": spec.bucket,
            "artifact": getattr(graph, "artifact", None),
            "compile_seconds": getattr(graph, "compile_seconds", 0.0),
            "cache_hit": getattr(graph, "cache_hit", False),
            "name": spec.name,
        }
    if "name" not in data:
        from neuronc.backends.base import GraphSpec

        data["name"] = GraphSpec(data["role"], data["batch"], data["bucket"]).name
    data["compile_seconds"] = float(data.get("compile_seconds") or 0.0)
    return data


def _shard(shard: Any, files: Mapping[str, FileEntry]) -> dict[str, Any]:
    data = dict(shard) if isinstance(shard, Mapping) else {"rank": shard.rank, "file": shard.file}
    entry = files.get(data["file"])
    if entry is not None:
        data.setdefault("bytes", entry.size)
        data.setdefault("sha256", entry.sha256)
    return data


def _stages(stages: Any) -> list[dict[str, Any]]:
    if not stages:
        return []
    if isinstance(stages, Mapping):
        return [{"name": name, **dict(values)} for name, values in stages.items()]
    return [dict(s) for s in stages]
