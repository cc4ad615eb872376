"""The local Neuron compile cache: its entries by state, disk use per compiler version, and cleanup.

(`neuronc cache status` / `cache cleanup`; `neuronc.hubcache.publish` publishes its entries. Nothing
here imports torch, transformers or the Neuron SDK.)

libneuronxla keeps one ``neuronxcc-<compiler version>/MODULE_<graph hash>+<flags hash>/`` folder per
compiled graph (docs/compile-cache.md). The states, as optimum-neuron classifies them
(huggingface/optimum-neuron ``optimum/neuron/cache/cleanup.py`` ``_classify_entry``, after 0.4.5):

- complete: ``model.neff`` and ``model.done``;
- failed: ``model.log`` and no NEFF — a "poisoned" entry: later compiles of the same graph read
  the failure back instead of compiling;
- locked: a ``*.lock`` file; stale when no process holds it any more (the compile died);
- empty: anything else (an HLO with no result).

``cleanup`` removes failed entries, stale locks and (asked for) old compiler versions; it never
removes a complete entry unless ``--old-versions`` names its whole compiler folder.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from neuronc.errors import InvalidInputError
from neuronc.fsutil import tree_bytes

# libneuronxla's default persistent cache (aws-neuron/aws-neuron-sdk
# about-neuron/arch/neuron-features/neuron-caching.rst).
DEFAULT_COMPILE_CACHE = "/var/tmp/neuron-compile-cache"

COMPILER_PREFIX = "neuronxcc-"
MODULE_PREFIX = "MODULE_"


class EntryState(StrEnum):
    COMPLETE = "complete"
    FAILED = "failed"
    LOCKED = "locked"
    EMPTY = "empty"


@dataclass(frozen=True)
class Entry:
    """One ``MODULE_*`` folder of the cache."""

    path: Path
    compiler_folder: str
    state: EntryState
    size: int
    locks: tuple[str, ...] = ()
    stale: bool = False  # locked, and no process holds the lock any more

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "name": self.path.name,
            "compiler_folder": self.compiler_folder,
            "state": str(self.state),
            "bytes": self.size,
            "locks": list(self.locks),
            "stale": self.stale,
        }


@dataclass
class VersionUsage:
    """Entries and bytes of one compiler version's folder."""

    folder: str
    bytes: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {str(s): 0 for s in EntryState})
    current: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "bytes": self.bytes, "entries": dict(self.counts), "current": self.current}


@dataclass(frozen=True)
class CacheStatus:
    root: Path
    source: str
    current_compiler: str | None
    entries: tuple[Entry, ...]
    versions: tuple[VersionUsage, ...]

    def count(self, state: EntryState) -> int:
        return sum(1 for e in self.entries if e.state == state)

    @property
    def stale_locks(self) -> int:
        return sum(1 for e in self.entries if e.stale)

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.root),
            "source": self.source,
            "exists": self.root.is_dir(),
            "current_compiler_version": self.current_compiler,
            "counts": {str(s): self.count(s) for s in EntryState},
            "stale_locks": self.stale_locks,
            "bytes": sum(v.bytes for v in self.versions),
            "versions": [v.to_json() for v in self.versions],
            "entries": [e.to_json() for e in self.entries],
        }


def resolve_cache_dir(explicit: Path | None = None, environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The local cache and why: ``--cache-dir``, ``NEURON_COMPILE_CACHE_URL``, or libneuronxla's default.

    An ``s3://`` cache is not a local one: exit 2 naming the variable.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return explicit, "--cache-dir"
    url = env.get("NEURON_COMPILE_CACHE_URL")
    if url:
        if url.startswith("s3://"):
            raise InvalidInputError(
                f"NEURON_COMPILE_CACHE_URL={url}: an S3 compile cache, not a local one",
                hint="pass --cache-dir DIR for a local cache",
            )
        return Path(url.removeprefix("file://")), "NEURON_COMPILE_CACHE_URL"
    return Path(DEFAULT_COMPILE_CACHE), "default"


def lock_held(path: Path) -> bool:
    """Whether a process holds ``path``'s lock (a stale lock: its process is gone, and so is its flock).

    Hand-written with ``fcntl`` rather than ``filelock``: this only probes, and must neither create
    nor truncate the file. A lock file we cannot open is counted as held (never removed).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def classify(entry: Path) -> tuple[EntryState, tuple[str, ...], bool]:
    """The state of one ``MODULE_*`` folder, its lock files, and whether it is locked by nobody (stale)."""
    names = {p.name for p in entry.iterdir()} if entry.is_dir() else set()
    locks = tuple(sorted(n for n in names if n.endswith(".lock")))
    if "model.neff" in names and "model.done" in names:
        return EntryState.COMPLETE, locks, False
    if "model.log" in names and "model.neff" not in names:
        return EntryState.FAILED, locks, False
    if locks:
        return EntryState.LOCKED, locks, not any(lock_held(entry / name) for name in locks)
    return EntryState.EMPTY, locks, False


def installed_compiler_version() -> str | None:
    """The installed neuronx-cc's version, from its distribution metadata (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("neuronx-cc")
    except PackageNotFoundError:
        return None


def cache_status(root: Path, source: str = "--cache-dir", current: str | None = None) -> CacheStatus:
    """Every ``MODULE_*`` entry of the cache, classified; usage per compiler folder."""
    current = current if current is not None else installed_compiler_version()
    entries: list[Entry] = []
    versions: list[VersionUsage] = []
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.name.startswith(COMPILER_PREFIX) and _is_dir(p)):
            usage = VersionUsage(folder.name, current=_is_current(folder.name, current))
            usage.bytes = tree_bytes(folder)
            for module in sorted(p for p in folder.iterdir() if p.name.startswith(MODULE_PREFIX) and _is_dir(p)):
                state, locks, stale = classify(module)
                entry = Entry(module, folder.name, state, tree_bytes(module), locks, stale)
                entries.append(entry)
                usage.counts[str(state)] += 1
            versions.append(usage)
    return CacheStatus(root, source, current, tuple(entries), tuple(versions))


def _is_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _is_current(folder: str, current: str | None) -> bool | None:
    if current is None:
        return None
    return folder[len(COMPILER_PREFIX) :].split("+", 1)[0] == current.split("+", 1)[0]


@dataclass(frozen=True)
class Removal:
    path: Path
    reason: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "reason": self.reason, "bytes": self.bytes}


def plan_cleanup(
    status: CacheStatus, *, failed: bool, stale_locks: bool, old_versions: bool, empty: bool = False
) -> list[Removal]:
    """What ``cleanup`` removes. A complete entry only inside an old compiler folder, and only with ``old_versions``."""
    removals: list[Removal] = []
    old = set()
    if old_versions:
        if status.current_compiler is None:
            raise InvalidInputError(
                "--old-versions: no neuronx-cc installed here, so no compiler version is the current one",
                hint="run it where the compiler is installed",
            )
        for usage in status.versions:
            if usage.current is False:
                old.add(usage.folder)
                removals.append(Removal(status.root / usage.folder, "old compiler version", usage.bytes))
    for entry in status.entries:
        if entry.compiler_folder in old:
            continue
        if entry.state == EntryState.FAILED and failed:
            removals.append(Removal(entry.path, "failed", entry.size))
        elif entry.state == EntryState.LOCKED and entry.stale and stale_locks:
            for name in entry.locks:
                removals.append(Removal(entry.path / name, "stale lock", _size(entry.path / name)))
        elif entry.state == EntryState.EMPTY and empty:
            removals.append(Removal(entry.path, "empty", entry.size))
    return removals


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def apply_cleanup(removals: list[Removal]) -> list[str]:
    """Remove what ``plan_cleanup`` listed; the problems (one line each) of what could not be removed."""
    problems = []
    for removal in removals:
        try:
            if removal.path.is_dir() and not removal.path.is_symlink():
                shutil.rmtree(removal.path)
            else:
                removal.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{removal.path}: {exc.strerror or exc}")
    return problems


def complete_modules(root: str | os.PathLike[str] | None) -> set[str]:
    """``neuronxcc-<ver>/MODULE_*`` of every complete entry of a local cache (empty for none or s3://)."""
    if root is None or str(root).startswith("s3://"):
        return set()
    base = Path(str(root).removeprefix("file://"))
    found: set[str] = set()
    try:
        folders = [p for p in base.iterdir() if p.name.startswith(COMPILER_PREFIX) and _is_dir(p)]
    except OSError:
        return found
    for folder in folders:
        for module in folder.iterdir():
            done = (module / "model.done").is_file() and (module / "model.neff").is_file()
            if module.name.startswith(MODULE_PREFIX) and done:
                found.add(f"{folder.name}/{module.name}")
    return found
