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
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from neuronc.errors import InvalidInputError, printable
from neuronc.fsutil import tree_bytes

# libneuronxla's default persistent cache (aws-neuron/aws-neuron-sdk
# about-neuron/arch/neuron-features/neuron-caching.rst).
DEFAULT_COMPILE_CACHE = "/var/tmp/neuron-compile-cache"

COMPILER_PREFIX = "neuronxcc-"
MODULE_PREFIX = "MODULE_"
COMPILER_PROCESS = b"neuronx-cc"


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
    unreadable: tuple[tuple[str, str], ...] = ()  # (path, why): folders left out, never removed

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
            "unreadable": [{"path": path, "reason": why} for path, why in self.unreadable],
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
    nor truncate the file. Opened without blocking and without following a link: a FIFO named
    ``*.lock`` (the cache is shared by every user of a host) is never waited on. A lock file that is
    not a regular file, or that cannot be opened, is counted as held (never removed).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def entry_names(entry: Path) -> set[str]:
    """The names in one ``MODULE_*`` folder (OSError when it cannot be listed: another user's folder)."""
    with os.scandir(entry) as it:
        return {e.name for e in it}


def classify(entry: Path, names: set[str] | None = None) -> tuple[EntryState, tuple[str, ...], bool]:
    """The state of one ``MODULE_*`` folder, its lock files, and whether it is locked by nobody (stale).

    Locks are looked at before the log: a folder with ``model.log`` and no NEFF whose lock a live
    process holds is a compile under way (a retry of a failed graph), "locked", never "failed".
    """
    if names is None:
        try:
            names = entry_names(entry)
        except OSError:
            names = set()
    locks = tuple(sorted(n for n in names if n.endswith(".lock")))
    if "model.neff" in names and "model.done" in names:
        return EntryState.COMPLETE, locks, False
    held = any(lock_held(entry / name) for name in locks)
    if "model.log" in names and "model.neff" not in names and not held:
        return EntryState.FAILED, locks, False
    if locks:
        return EntryState.LOCKED, locks, not held
    return EntryState.EMPTY, locks, False


def compilers_running(proc: Path = Path("/proc")) -> list[int]:
    """The process ids of every ``neuronx-cc`` running on this host (as far as /proc shows them).

    optimum-neuron's cleanup asks ``pgrep -c neuronx-cc`` before it removes locks (its
    ``cache/cleanup.py``); libneuronxla's own lock discipline is closed source, so a lock nobody
    holds with ``flock`` may still belong to a compile. Matched on the process name and on the
    first two words of its command line (``python .../neuronx-cc compile ...``).
    """
    found: list[int] = []
    try:
        pids = [int(p.name) for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            comm = (proc / str(pid) / "comm").read_bytes().strip()
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")[:2]
        except OSError:
            continue  # gone, or not ours to read
        if comm == COMPILER_PROCESS or any(os.path.basename(a) == COMPILER_PROCESS for a in argv):
            found.append(pid)
    return found


def installed_compiler_version() -> str | None:
    """The installed neuronx-cc's version, from its distribution metadata (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("neuronx-cc")
    except PackageNotFoundError:
        return None


def cache_status(root: Path, source: str = "--cache-dir", current: str | None = None) -> CacheStatus:
    """Every ``MODULE_*`` entry of the cache, classified; usage per compiler folder.

    A folder that cannot be listed (another user's 0700 folder in the shared cache) is reported in
    ``unreadable`` and left alone; the cache directory itself unreadable is an error (exit 2).
    """
    current = current if current is not None else installed_compiler_version()
    entries: list[Entry] = []
    versions: list[VersionUsage] = []
    unreadable: list[tuple[str, str]] = []
    if not root.is_dir():
        return CacheStatus(root, source, current, (), ())
    try:
        folders = sorted(p for p in _listing(root) if p.name.startswith(COMPILER_PREFIX) and _is_dir(p))
    except OSError as exc:
        raise InvalidInputError(
            f"{printable(str(root))}: cannot read the compile cache: {exc.strerror or exc}",
            hint="run as a user who can read it, or pass --cache-dir DIR",
        ) from None
    for folder in folders:
        usage = VersionUsage(folder.name, current=_is_current(folder.name, current))
        usage.bytes = tree_bytes(folder)
        try:
            modules = sorted(p for p in _listing(folder) if p.name.startswith(MODULE_PREFIX) and _is_dir(p))
        except OSError as exc:
            unreadable.append((str(folder), f"cannot read: {exc.strerror or exc}"))
            modules = []
        for module in modules:
            try:
                names = entry_names(module)
            except OSError as exc:
                unreadable.append((str(module), f"cannot read: {exc.strerror or exc}"))
                continue
            state, locks, stale = classify(module, names)
            entries.append(Entry(module, folder.name, state, tree_bytes(module), locks, stale))
            usage.counts[str(state)] += 1
        versions.append(usage)
    return CacheStatus(root, source, current, tuple(entries), tuple(versions), tuple(unreadable))


def _listing(directory: Path) -> list[Path]:
    with os.scandir(directory) as it:
        return [directory / e.name for e in it]


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


@dataclass
class CleanupPlan:
    """What ``cleanup`` removes, and what it leaves although asked, with why (``(path, reason)``)."""

    removals: list[Removal] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def plan_cleanup(
    status: CacheStatus,
    *,
    failed: bool,
    stale_locks: bool,
    old_versions: bool,
    empty: bool = False,
    compilers: list[int] | None = None,
) -> CleanupPlan:
    """What ``cleanup`` removes. A complete entry only inside an old compiler folder, and only with ``old_versions``.

    Never removed: a lock a process holds, or a folder holding one; and while any ``neuronx-cc``
    runs (``compilers``, default: ``compilers_running()``), no lock file and no folder with a lock
    file in it, stale or not (libneuronxla may lock in a way ``flock`` does not see). optimum-neuron's
    cleanup skips only the stale locks then, and removes a failed entry whatever its locks.
    """
    running = compilers_running() if compilers is None else compilers
    busy = f"a neuronx-cc is running (pid {', '.join(map(str, running[:5]))}): its locks may be live"
    plan = CleanupPlan()
    old = set()
    if old_versions:
        if status.current_compiler is None:
            raise InvalidInputError(
                "--old-versions: no neuronx-cc installed here, so no compiler version is the current one",
                hint="run it where the compiler is installed",
            )
        for usage in status.versions:
            if usage.current is not False:
                continue
            locked = [e for e in status.entries if e.compiler_folder == usage.folder and e.locks]
            path = status.root / usage.folder
            if any(not e.stale and e.state == EntryState.LOCKED for e in locked):
                plan.skipped.append((str(path), "an entry in it is locked by a live process"))
            elif locked and running:
                plan.skipped.append((str(path), busy))
            else:
                old.add(usage.folder)
                plan.removals.append(Removal(path, "old compiler version", usage.bytes))
    for entry in status.entries:
        if entry.compiler_folder in old:
            continue
        wanted = (
            (entry.state == EntryState.FAILED and failed)
            or (entry.state == EntryState.LOCKED and entry.stale and stale_locks)
            or (entry.state == EntryState.EMPTY and empty)
        )
        if not wanted:
            continue
        if entry.locks and running:
            plan.skipped.append((str(entry.path), busy))
        elif entry.state == EntryState.LOCKED:
            for name in entry.locks:
                plan.removals.append(Removal(entry.path / name, "stale lock", _size(entry.path / name)))
        else:
            plan.removals.append(Removal(entry.path, str(entry.state), entry.size))
    return plan


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def apply_cleanup(removals: list[Removal]) -> list[str]:
    """Remove what ``plan_cleanup`` listed; the problems (one line each) of what could not be removed.

    A removed folder's lock files are looked at once more just before: one a process has taken
    since the plan keeps its folder. Folders are removed without recursion (an entry nested 1,000
    levels deep is no traceback) and without following a link.
    """
    problems = []
    for removal in removals:
        path = removal.path
        try:
            if _is_dir(path):
                if removal.reason != "old compiler version" and classify(path)[0] == EntryState.LOCKED:
                    problems.append(f"{printable(str(path))}: locked by a live process since it was listed; kept")
                    continue
                problems.extend(f"{printable(p)}: {why}" for p, why in remove_tree(path))
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{printable(str(path))}: {exc.strerror or exc}")
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
        try:
            modules = _listing(folder)
        except OSError:
            continue  # another user's folder: none of its entries is this export's
        for module in modules:
            done = (module / "model.done").is_file() and (module / "model.neff").is_file()
            if module.name.startswith(MODULE_PREFIX) and done:
                found.add(f"{folder.name}/{module.name}")
    return found


def remove_tree(path: Path) -> list[tuple[str, str]]:
    """Remove a folder without following links and without recursion (``shutil.rmtree`` recurses once
    per level); the ``(path, reason)`` of each thing that could not be removed."""
    problems: list[tuple[str, str]] = []
    stack: list[tuple[str, bool]] = [(os.fspath(path), False)]  # (folder, its children already taken care of)
    while stack:
        current, emptied = stack.pop()
        try:
            if emptied:
                os.rmdir(current)
                continue
            with os.scandir(current) as it:
                children = list(it)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append((current, exc.strerror or str(exc)))
            continue
        stack.append((current, True))
        for child in children:
            try:
                if child.is_dir(follow_symlinks=False):
                    stack.append((child.path, False))
                else:
                    os.unlink(child.path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append((child.path, exc.strerror or str(exc)))
    return problems
