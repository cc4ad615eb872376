"""The inductor graph cache: one compiled graph per key, shared by every build on this machine.

A graph's key covers everything the compiled graph depends on (its role and shape, max_length, the
dtype, the model config, the toolchain, the Inductor options) and nothing else, so changing one
bucket recompiles one graph. Entries live in ``$NEURONC_GRAPH_CACHE`` (``off`` disables it; default
``$XDG_CACHE_HOME/neuronc/graphs``) as ``<key[:2]>/<key>/``; a new entry is built in ``tmp/`` and
renamed into place, so a reader sees a complete entry or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronc.backends.base import GraphSpec
from neuronc.backends.inductor.format import GRAPH_FORMAT, graph_files
from neuronc.fsutil import disk_full_as_error

GRAPH_CACHE_ENV = "NEURONC_GRAPH_CACHE"
# config.json fields that do not change a compiled graph.
_CONFIG_IGNORED = frozenset({"_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures"})
# What a killed build leaves in tmp/ is removed after a day: no live build is that slow.
_TMP_MAX_AGE_SECONDS = 24 * 3600


def graph_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """Where compiled graphs are cached: $NEURONC_GRAPH_CACHE (``off`` disables), else the user cache."""
    for source in (env or {}, os.environ):
        value = source.get(GRAPH_CACHE_ENV)
        if value:
            return None if value.lower() in {"off", "0", "false", "none"} else Path(value).expanduser()
    from neuronc.locations import user_cache_dir

    return user_cache_dir() / "graphs"


def normalized_model_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.json without the fields that cannot change a compiled graph."""
    return {k: v for k, v in config.items() if k not in _CONFIG_IGNORED}


def graph_cache_key(
    graph: GraphSpec,
    *,
    max_length: int,
    dtype: str,
    model_config: Mapping[str, Any],
    toolchain: Mapping[str, str | None],
    inductor_config: Mapping[str, Any] | None = None,
) -> str:
    """SHA-256 of everything one compiled graph depends on; other buckets are not part of it."""
    from neuronc.keys import canonical_json, sha256_text

    data = {
        "format": GRAPH_FORMAT,
        "graph": {"role": graph.role, "batch": graph.batch, "bucket": graph.bucket},
        "max_length": max_length,
        "dtype": dtype,
        "model_config": normalized_model_config(model_config),
        "toolchain": dict(toolchain),
        "inductor_config": dict(inductor_config or {}),
    }
    return sha256_text(canonical_json(data))


def entry_dir(cache_root: Path, key: str) -> Path:
    return cache_root / key[:2] / key


def new_tmp_dir(cache_root: Path, key: str) -> Path:
    """A fresh directory in the cache's tmp/ to build one graph in (renamed into place when done)."""
    return cache_root / "tmp" / f"{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_entry(entry: Path, name: str, key: str) -> dict[str, Any] | None:
    """The metadata of a complete, intact cache entry, or None (missing, partial, corrupted)."""
    package, meta_name, constants = graph_files(name)
    try:
        meta = json.loads((entry / meta_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("cache_key") != key or not (entry / constants).is_file():
        return None
    try:
        if sha256_file(entry / package) != meta.get("package_sha256"):
            return None
    except OSError:
        return None
    return meta


def publish(out_dir: Path, cache_root: Path | None, name: str, key: str) -> Path:
    """Move a freshly built graph into the cache (atomically); return where its files now are."""
    if cache_root is None:
        return out_dir
    entry = entry_dir(cache_root, key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(out_dir, entry)
    except OSError:
        # Another build published the same key first, or a broken entry is in the way.
        if cached_entry(entry, name, key) is None:
            trash = cache_root / "tmp" / f"trash-{secrets.token_hex(6)}"
            with contextlib.suppress(OSError):
                os.rename(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
            try:
                os.rename(out_dir, entry)
            except OSError:
                return out_dir
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
    return entry


def install(entry: Path, name: str, artifacts_dir: Path, logs_dir: Path, *, cache_hit: bool, key: str) -> None:
    """Copy one graph's files from the cache (or the work dir) into the bundle.

    A full disk here is the bundle's file system filling, not a compiler failure: DiskFullError
    (exit 5) naming the file and its size, never a CompileError that sends people to the logs.
    """
    for file_name in graph_files(name):
        source, target = entry / file_name, artifacts_dir / file_name
        with disk_full_as_error(target, _size(source)):
            shutil.copyfile(source, target)
    if cache_hit:
        cached_log = entry / f"{name}.log"
        header = f"# neuronc inductor: graph {name} reused from the graph cache ({entry}), key {key}\n"
        body = cached_log.read_text(encoding="utf-8", errors="replace") if cached_log.is_file() else ""
        text = header + body
        with disk_full_as_error(logs_dir / f"{name}.log", len(text)):
            (logs_dir / f"{name}.log").write_text(text, encoding="utf-8")


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def sweep_tmp(tmp: Path, max_age_seconds: float = _TMP_MAX_AGE_SECONDS) -> None:
    """Remove what killed builds left in the cache's tmp/."""
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > max_age_seconds:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass
