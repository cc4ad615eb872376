"""A loaded registry (what a source provides to lookups) and which files a query needs.

``Registry`` wraps an ``EntryTable`` (summaries from the persistent index, or parsed just now) with
where it came from and a reader that gives any entry in full when a lookup needs its config.
``Query``/``select_paths`` say which files of a Hub listing can matter to a lookup, so that only
those are downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from neuronc.hubcache.entries import CacheEntry, EntryProblem, parse_entry
from neuronc.hubcache.paths import Layout, RegistryPath, parse_registry_path
from neuronc.hubcache.table import EntryTable


class SourceKind(StrEnum):
    SNAPSHOT = "snapshot"
    HUB = "hub"


@dataclass(frozen=True)
class SourceInfo:
    """Where a registry came from (the ``source`` object of ``--json``)."""

    kind: SourceKind
    repo: str | None = None
    revision: str | None = None
    path: str | None = None
    mirrored_at: str | None = None
    repo_from: str | None = None
    endpoint: str | None = None
    offline: bool = False
    from_local_copy: bool = False

    @property
    def name(self) -> str:
        """The snapshot directory or the repository, for messages."""
        return (self.path if self.kind == SourceKind.SNAPSHOT else self.repo) or "?"

    def to_json(self) -> dict[str, Any]:
        if self.kind == SourceKind.SNAPSHOT:
            return {
                "kind": str(self.kind),
                "path": self.path,
                "repo": self.repo,
                "revision": self.revision,
                "mirrored_at": self.mirrored_at,
            }
        return {
            "kind": str(self.kind),
            "repo": self.repo,
            "repo_from": self.repo_from,
            "endpoint": self.endpoint,
            "revision": self.revision,
            "offline": self.offline,
            "from_local_copy": self.from_local_copy,
        }


class IndexState(StrEnum):
    """What the persistent index did for this lookup."""

    WARM = "warm"  # valid as found: nothing parsed
    UPDATED = "updated"  # some files were new or changed and were parsed
    BUILT = "built"  # there was none: every file parsed
    REBUILT = "rebuilt"  # it did not validate (corrupt, another version): every file parsed
    OFF = "off"  # not used (a query-scoped Hub selection that was not cached)


@dataclass(frozen=True)
class IndexInfo:
    state: IndexState
    parsed: int = 0
    saved: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"state": str(self.state), "parsed": self.parsed, "saved": self.saved}


@dataclass
class Registry:
    """The entries a source provided, with what was skipped and where it came from."""

    source: SourceInfo
    table: EntryTable
    read: Callable[[str], bytes] | None = None  # a registry path's bytes, for entries needed in full
    files_listed: int = 0
    notes: list[str] = field(default_factory=list)
    index: IndexInfo = IndexInfo(IndexState.OFF)
    late_problems: list[EntryProblem] = field(default_factory=list)
    _entries: dict[int, CacheEntry | None] = field(default_factory=dict, repr=False)

    @property
    def registries(self) -> list[str]:
        return self.table.registries

    @property
    def problems(self) -> list[EntryProblem]:
        return [EntryProblem(path, reason) for path, reason in self.table.problems] + self.late_problems

    def __len__(self) -> int:
        return len(self.table)

    def entry(self, row: int) -> CacheEntry | None:
        """Row ``row`` in full (its file read again); None, with a problem recorded, if it no longer parses."""
        if row not in self._entries:
            self._entries[row] = self._load(self.table.paths[row], self.table.aliases.get(row, ()))
        return self._entries[row]

    def _load(self, path: str, aliases: tuple[str, ...]) -> CacheEntry | None:
        location = parse_registry_path(path)
        if location is None or self.read is None:
            return None
        try:
            return parse_entry(location, self.read(path), aliases)
        except OSError as exc:
            self.late_problems.append(EntryProblem(path, f"cannot read: {exc.strerror or exc}"))
        except ValueError as exc:  # EntryError, or no longer a regular file of a sane size
            self.late_problems.append(EntryProblem(path, f"changed since it was indexed: {exc}"))
        return None

    @property
    def entries(self) -> list[CacheEntry]:
        """Every entry in full (reads every file: for the Python API and tests, not for lookups)."""
        return [entry for row in range(len(self)) if (entry := self.entry(row)) is not None]

    def stats(self) -> RegistryStats:
        return RegistryStats(self.registries, self.files_listed, len(self), len(self.problems), self.index)


@dataclass(frozen=True)
class RegistryStats:
    registries: list[str]
    files_listed: int
    entries_read: int
    skipped: int
    index: IndexInfo

    def to_json(self) -> dict[str, Any]:
        return {
            "registries": self.registries,
            "registry_files_listed": self.files_listed,
            "entries_read": self.entries_read,
            "skipped": self.skipped,
            "index": self.index.to_json(),
        }


# --------------------------------------------------------------------------------------------------
# Which files a query needs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """What a lookup is about; lets a source read (or download) only the files that can matter.

    Selected: alias and model-type files of ``model_types`` (and of ``model_ids``' own model types),
    every arch-digest folder that is one of ``digests``, shares a hash with a selected alias, belongs
    to one of those model types (through any alias in it), or belongs to no alias at all.
    ``Query.everything()`` selects every registry file.
    """

    model_ids: frozenset[str] = frozenset()
    model_types: frozenset[str] = frozenset()
    digests: frozenset[str] = frozenset()
    all_files: bool = False

    @classmethod
    def everything(cls) -> Query:
        return cls(all_files=True)

    def merge(self, other: Query) -> Query:
        return Query(
            self.model_ids | other.model_ids,
            self.model_types | other.model_types,
            self.digests | other.digests,
            self.all_files or other.all_files,
        )


def select_paths(locations: Iterable[RegistryPath], query: Query) -> list[RegistryPath]:
    """The registry files a query needs (arch-digest files and aliases alike)."""
    locations = list(locations)
    if query.all_files:
        return locations
    model_types = set(query.model_types)
    for loc in locations:
        if loc.model_id is not None and loc.model_id in query.model_ids and loc.model_type:
            model_types.add(loc.model_type)
    picked_hashes: set[tuple[str, str, str]] = set()
    attributed: dict[tuple[str, str], set[str]] = {}  # (registry, stem) -> model types of its aliases
    for loc in locations:
        if loc.layout != Layout.ARCH_DIGEST and loc.model_type is not None:
            attributed.setdefault((loc.registry, loc.stem), set()).add(loc.model_type)
            if loc.model_type in model_types or (loc.model_id is not None and loc.model_id in query.model_ids):
                picked_hashes.add(loc.key)
    folders: dict[tuple[str, str], list[RegistryPath]] = {}
    for loc in locations:
        if loc.layout == Layout.ARCH_DIGEST and loc.digest is not None:
            folders.setdefault((loc.registry, loc.digest), []).append(loc)
    picked_folders: set[tuple[str, str]] = set()
    for (registry, digest), members in folders.items():
        types: set[str] = set()
        for loc in members:
            types |= attributed.get((registry, loc.stem), set())
        if (
            digest in query.digests
            or not types
            or types & model_types
            or any(loc.key in picked_hashes for loc in members)
        ):
            picked_folders.add((registry, digest))
    selected = []
    for loc in locations:
        if loc.layout == Layout.ARCH_DIGEST:
            if (loc.registry, loc.digest) in picked_folders:
                selected.append(loc)
        elif loc.key in picked_hashes:
            selected.append(loc)
    return selected
