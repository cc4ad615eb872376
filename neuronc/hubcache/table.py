"""The parsed registry as a table: one summary row per entry, and the maps a lookup searches.

A row is everything a lookup needs to decide whether an entry can matter (ids, shapes, versions,
the ``arch_key`` fingerprint) without the entry's config; the few entries that can matter are read
again in full (``Registry.entry``). Rows are plain tuples so that the persistent index
(``neuronc.hubcache.index``) stores and loads them with ``marshal`` as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from neuronc.hubcache.arch import arch_key
from neuronc.hubcache.entries import CacheEntry, EntryError, parse_entry
from neuronc.hubcache.paths import Layout, RegistryPath, parse_registry_path, registry_sort_key


class EntrySummary(NamedTuple):
    """One entry without its config: what the index keeps per registry file (``aliases`` per entry)."""

    path: str
    layout: str
    compiler_folder: str
    compiler_version: str
    optimum_version: str
    hash: str
    digest_folder: str | None
    model_id: str | None
    task: str | None
    model_type: str | None
    entry_class: str | None
    batch_size: int
    sequence_length: int | None
    tp_degree: int
    dtype: str | None
    target: str | None
    max_context_length: int | None
    checkpoint_revision: str | None
    hash_verified: bool
    arch_key: str | None
    aliases: tuple[str, ...] = ()

    @property
    def entry_key(self) -> tuple[str, str, str]:
        return (self.compiler_folder, self.optimum_version, self.hash)


# A registry file's record: its summary as a plain tuple (no aliases), or why it cannot be used.
FileRecord = tuple[object, ...] | str


def summarize(entry: CacheEntry) -> tuple[object, ...]:
    """The plain-tuple summary of a parsed entry (``EntrySummary`` fields, ``aliases`` left out)."""
    key = None if entry.is_multi_model else arch_key(entry.model_type, entry.config)
    return (
        entry.path,
        str(entry.layout),
        entry.compiler_folder,
        entry.compiler_version,
        entry.optimum_version,
        entry.hash,
        entry.digest_folder,
        entry.model_id,
        entry.task,
        entry.model_type,
        entry.entry_class,
        entry.batch_size,
        entry.sequence_length,
        entry.tp_degree,
        entry.dtype,
        entry.target,
        entry.max_context_length,
        entry.checkpoint_revision,
        entry.hash_verified,
        key,
    )


def read_record(location: RegistryPath, data: bytes) -> FileRecord:
    """Parse one registry file into its record."""
    try:
        return summarize(parse_entry(location, data))
    except EntryError as exc:
        return str(exc)


@dataclass
class EntryTable:
    """Entries (one row per entry, aliases folded in), problems, and the maps lookups search."""

    rows: list[tuple[object, ...]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)
    by_model_id: dict[str, list[int]] = field(default_factory=dict)
    by_arch: dict[str, list[int]] = field(default_factory=dict)

    def summary(self, row: int) -> EntrySummary:
        return EntrySummary._make(self.rows[row])

    def candidates(self, model_id: str | None, key: str | None) -> list[int]:
        """Rows written for ``model_id`` or whose arch_key is ``key``, in table order."""
        found = set(self.by_model_id.get(model_id, ())) if model_id is not None else set()
        if key is not None:
            found.update(self.by_arch.get(key, ()))
        return sorted(found)

    def to_plain(self) -> tuple[object, ...]:
        return (self.rows, self.problems, self.registries, self.by_model_id, self.by_arch)

    @classmethod
    def from_plain(cls, plain: tuple[object, ...]) -> EntryTable:
        rows, problems, registries, by_model_id, by_arch = plain
        return cls(rows, problems, registries, by_model_id, by_arch)  # type: ignore[arg-type]

    @classmethod
    def build(cls, records: Mapping[str, FileRecord], problems: Iterable[tuple[str, str]] = ()) -> EntryTable:
        """Group records into entries (the arch-digest file is the primary one, the others its aliases).

        A primary file that cannot be used is a problem and its entry is left out, aliases and all;
        ``problems`` (files that are not entries at all) are added as they are.
        """
        table = cls(problems=list(problems))
        groups: dict[tuple[str, str, str], list[tuple[bool, str]]] = {}
        registries: set[str] = set()
        for path, record in records.items():
            if isinstance(record, tuple):
                compiler, version, stem, layout = record[2], record[4], record[5], record[1]
            else:
                location = parse_registry_path(path)
                if location is None:  # recorded by an older index: not an entry
                    continue
                compiler, version, stem, layout = (
                    location.compiler_folder,
                    location.optimum_version,
                    location.stem,
                    str(location.layout),
                )
            registries.add(f"{compiler}/0_REGISTRY/{version}")
            groups.setdefault((str(compiler), str(version), str(stem)), []).append((layout != Layout.ARCH_DIGEST, path))
        primaries: list[tuple[str, tuple[str, ...]]] = []
        for members in groups.values():
            members.sort()
            primaries.append((members[0][1], tuple(path for _, path in members[1:])))
        primaries.sort()
        for primary, aliases in primaries:
            record = records[primary]
            if isinstance(record, str):
                table.problems.append((primary, record))
                continue
            row = len(table.rows)
            table.rows.append((*record, aliases))
            model_id, key = record[7], record[19]
            if isinstance(model_id, str):
                table.by_model_id.setdefault(model_id, []).append(row)
            if isinstance(key, str):
                table.by_arch.setdefault(key, []).append(row)
        table.problems.sort()
        table.registries = sorted(registries, key=registry_sort_key)
        return table
