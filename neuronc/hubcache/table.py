"""The parsed registry as a table: one row per entry, with what a lookup needs to find its candidates.

A row is an entry's primary file (the arch-digest one; other paths of the same entry are its
aliases), its model id, task and ``arch_key`` fingerprint: enough to decide which entries can be
related to a model without their configs. Those few are read again in full (``Registry.entry``).
The record of one registry file is as small: ``(model_id, task, arch_key)``, or the reason it
cannot be used; the persistent index (``neuronc.hubcache.index``) stores records, not entries.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neuronc.hubcache.arch import arch_key
from neuronc.hubcache.entries import MULTI_MODEL_CLASS, EntryError, check_entry
from neuronc.hubcache.paths import REGISTRY_DIR, RegistryPath, is_digest, registry_sort_key

# (model_id, task, arch_key) of a usable entry file, or why the file cannot be used.
FileRecord = tuple[str | None, str | None, str | None] | str


def record_of(
    model_id: str | None,
    task: str | None,
    model_type: str | None,
    config: Mapping[str, Any],
    *,
    multi_model: bool = False,
) -> FileRecord:
    """What the index keeps of a parsed entry."""
    key = None if multi_model else arch_key(model_type, config)
    return (model_id, sys.intern(task) if task is not None else None, key)  # one task object: marshal writes it once


def read_record(location: RegistryPath, data: bytes) -> FileRecord:
    """Parse and check one registry file into its record (the checks of ``parse_entry``, no entry built)."""
    try:
        f = check_entry(location, data)
    except EntryError as exc:
        return str(exc)
    return record_of(f.model_id, f.task, f.model_type, f.config, multi_model=f.entry_class == MULTI_MODEL_CLASS)


@dataclass
class EntryTable:
    """Entries (one row per entry, aliases folded in), the problems found, and the registries seen."""

    paths: Sequence[str] = field(default_factory=list)  # the primary file of each row
    model_ids: list[str | None] = field(default_factory=list)
    tasks: list[str | None] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    aliases: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.model_ids)

    def candidates(self, model_id: str | None, key: str | None) -> list[int]:
        """Rows written for ``model_id`` or whose arch_key is ``key``, in table order."""
        if key is None:
            return [row for row, m in enumerate(self.model_ids) if m == model_id and m is not None]
        return [
            row
            for row, (m, k) in enumerate(zip(self.model_ids, self.keys, strict=True))
            if k == key or (m == model_id and m is not None)
        ]

    @classmethod
    def build(
        cls, records: Mapping[str, FileRecord], problems: Sequence[tuple[str, str]] = ()
    ) -> tuple[EntryTable, list[tuple[str, tuple[str, ...]]]]:
        """Group records into entries (the arch-digest file is the primary one, the others its aliases).

        A primary file that cannot be used is a problem and its entry is left out, aliases and all;
        ``problems`` (files that are not entries at all) are added as they are. Also returns each
        row's (primary path, alias paths), for callers that store rows their own way.
        """
        groups: dict[tuple[str, str, str], list[tuple[bool, str]]] = {}
        registries: set[str] = set()
        for path in records:
            # Every recorded path parsed as a registry path when it was recorded: split it again
            # rather than parse it (this runs for every entry each time the index changes).
            parts = path.split("/")
            compiler, version, stem = parts[0], parts[2], parts[-1][: -len(".json")]
            registries.add(f"{compiler}/{REGISTRY_DIR}/{version}")
            alias = not (len(parts) == 5 and is_digest(parts[3]))
            groups.setdefault((compiler, version, stem), []).append((alias, path))
        primaries: list[tuple[str, tuple[str, ...]]] = []
        for members in groups.values():
            members.sort()
            primaries.append((members[0][1], tuple(path for _, path in members[1:])))
        primaries.sort()
        table = cls(problems=list(problems), paths=[])
        rows: list[tuple[str, tuple[str, ...]]] = []
        aliases: dict[int, tuple[str, ...]] = {}
        for primary, alias_paths in primaries:
            record = records[primary]
            if isinstance(record, str):
                table.problems.append((primary, record))
                continue
            if alias_paths:
                aliases[len(rows)] = alias_paths
            rows.append((primary, alias_paths))
            table.model_ids.append(record[0])
            table.tasks.append(record[1])
            table.keys.append(record[2])
        table.paths = [primary for primary, _ in rows]
        table.aliases = aliases
        table.problems.sort()
        table.registries = sorted(registries, key=registry_sort_key)
        return table, rows
