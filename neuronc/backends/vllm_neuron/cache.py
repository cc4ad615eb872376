"""The compile cache a vllm-neuron compile leaves in its staging ``VLLM_CACHE_ROOT``, checked and kept.

Each entry is ``neuron/compile_cache/<32 hex>/`` holding ``graph.hlo``, ``graph_<key>.neff``, an
``.artifact_metadata_v<N>.json`` whose ``cache_key`` is the directory's name, and, written last,
``.compilation_complete`` (facts.py). The plugin loads an entry only when all of them are there and
the key matches (else RuntimeError), so an incomplete entry is a failed compile, not a bundle. Lock
files and hit markers are the compiling process's, never the bundle's: they are removed. Everything
else under the cache root (vLLM's own caches) is kept as the compile left it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from neuronc.backends.vllm_neuron.facts import (
    ACCESSED_FILE,
    CACHE_SUBDIR,
    COMPLETE_FILE,
    ENTRY_NAME,
    HLO_FILE,
    LOCK_METADATA,
    METADATA_FILE,
    METADATA_KEY_FIELD,
    NEFF_FILE,
)
from neuronc.errors import CompileError
from neuronc.jsonfile import JsonFields

# Staging names the plugin's remote fetch and retries leave behind (``<key>.tmp.<pid>``, ``.trash.<pid>``).
_STAGING_MARKERS = (".tmp.", ".trash.")


@dataclass(frozen=True)
class CacheEntry(JsonFields):
    """One compiled graph in the cache: its key and its NEFF (relative to the cache root)."""

    key: str
    neff: str
    neff_bytes: int


def entry_problem(entry: Path) -> str | None:
    """Why the plugin would not load this entry, or None."""
    key = entry.name
    for name in (HLO_FILE, NEFF_FILE.format(key=key), COMPLETE_FILE):
        if not (entry / name).is_file():
            return f"no {name}"
    metadata = [p for p in entry.iterdir() if METADATA_FILE.match(p.name)]
    if not metadata:
        return "no .artifact_metadata_v*.json"
    for path in metadata:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"{path.name}: {exc}"
        if not isinstance(data, dict) or data.get(METADATA_KEY_FIELD) != key:
            return f"{path.name}: {METADATA_KEY_FIELD} is not {key}"
    return None


def scan(cache_root: Path) -> tuple[list[CacheEntry], list[str]]:
    """The complete entries under ``cache_root`` and the problems of the others (nothing changed)."""
    compile_cache = cache_root / CACHE_SUBDIR
    entries: list[CacheEntry] = []
    problems: list[str] = []
    if not compile_cache.is_dir():
        return entries, [f"no {CACHE_SUBDIR}/ under the cache root"]
    for child in sorted(compile_cache.iterdir()):
        if child.is_dir() and ENTRY_NAME.match(child.name):
            problem = entry_problem(child)
            if problem is not None:
                problems.append(f"{CACHE_SUBDIR}/{child.name}: {problem}")
                continue
            neff = child / NEFF_FILE.format(key=child.name)
            rel = neff.relative_to(cache_root).as_posix()
            entries.append(CacheEntry(child.name, rel, neff.stat().st_size))
    return entries, problems


def collect(cache_root: Path, dest: Path) -> list[CacheEntry]:
    """Check the compile's cache, drop what belongs to the compiling process, move it to ``dest``.

    CompileError when an entry is incomplete or there is none: the plugin would compile again (or,
    with the fail-fast variable, refuse to start) where this bundle is served.
    """
    entries, problems = scan(cache_root)
    if problems or not entries:
        what = problems or ["the plugin wrote no compiled graph"]
        raise CompileError(
            f"the vllm-neuron compile left no usable compile cache in {cache_root}",
            details=what[:20],
            hint="the compile log (logs/compile.log) says why the engine stopped",
        )
    compile_cache = cache_root / CACHE_SUBDIR
    for child in list(compile_cache.iterdir()):
        if LOCK_METADATA.match(child.name) or any(marker in child.name for marker in _STAGING_MARKERS):
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
    for entry in entries:
        (cache_root / entry.neff).parent.joinpath(ACCESSED_FILE).unlink(missing_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(cache_root), str(dest))
    return entries


__all__ = ["CacheEntry", "collect", "entry_problem", "scan"]
