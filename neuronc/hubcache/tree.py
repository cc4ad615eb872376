"""What the index knows about a snapshot directory, in two forms.

``TreeState`` (dicts keyed by relative path) is what a scan builds and an update edits.
``PackedTree`` is what the index file stores and a warm lookup reads: folder names with the index
of their parent, file names with the index of their folder, sizes and mtimes as machine integers
(``array``), and per file only ``(model_id, task, arch_key)``. Loading it creates a few objects
per entry instead of dozens, and checking it against the directory needs one ``stat`` per folder
and per file and no other work (``PackedTree.changes``).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from neuronc.hubcache.table import EntryTable, FileRecord

MetadataRecord = tuple[int, int, tuple[str | None, str | None, str | None, str | None]]


@dataclass
class TreeState:
    """What the index knows about a snapshot: folders, registry files and their records, skips."""

    dirs: dict[str, int] = field(default_factory=dict)  # rel -> mtime_ns ("" is the root)
    files: dict[str, tuple[int, int, FileRecord]] = field(default_factory=dict)  # rel -> (size, mtime_ns, record)
    skips: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # folder rel -> [(rel, reason)]
    metadata: MetadataRecord | None = None

    def table(self) -> tuple[EntryTable, list[tuple[str, tuple[str, ...]]]]:
        problems = [item for items in self.skips.values() for item in items]
        return EntryTable.build({rel: record for rel, (_, _, record) in self.files.items()}, problems)


def parent_of(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


@dataclass
class PackedTree:
    """A TreeState and its table in the index's compact form."""

    dir_parents: array[int]
    dir_names: list[str]
    dir_mtimes: array[int]
    file_dirs: array[int]
    file_names: list[str]
    file_sizes: array[int]
    file_mtimes: array[int]
    model_ids: list[str | None]
    tasks: list[str | None]
    keys: list[str | None]
    file_problems: dict[int, str]
    skips: dict[str, list[tuple[str, str]]]
    metadata: MetadataRecord | None
    row_files: array[int]
    row_aliases: dict[int, tuple[int, ...]]
    problems: list[tuple[str, str]]
    registries: list[str]
    _dir_rels: list[str] | None = None

    @classmethod
    def pack(cls, state: TreeState, table: EntryTable, rows: list[tuple[str, tuple[str, ...]]]) -> PackedTree:
        dirs = sorted(state.dirs, key=lambda d: (d.count("/") if d else -1, d))  # parents first
        dir_index = {d: i for i, d in enumerate(dirs)}
        files = sorted(state.files)
        file_index = {f: i for i, f in enumerate(files)}
        file_dirs = array("q", [dir_index.get(parent_of(f), -1) for f in files])
        records = [state.files[f][2] for f in files]
        return cls(
            dir_parents=array("q", [dir_index[parent_of(d)] if d else -1 for d in dirs]),
            dir_names=[d.rsplit("/", 1)[-1] for d in dirs],
            dir_mtimes=array("q", [state.dirs[d] for d in dirs]),
            file_dirs=file_dirs,
            # A file whose folder is not known (never happens in a scan) keeps its whole path.
            file_names=[f.rsplit("/", 1)[-1] if d >= 0 else f for f, d in zip(files, file_dirs, strict=True)],
            file_sizes=array("q", [state.files[f][0] for f in files]),
            file_mtimes=array("q", [state.files[f][1] for f in files]),
            model_ids=[r[0] if isinstance(r, tuple) else None for r in records],
            tasks=[r[1] if isinstance(r, tuple) else None for r in records],
            keys=[r[2] if isinstance(r, tuple) else None for r in records],
            file_problems={i: r for i, r in enumerate(records) if isinstance(r, str)},
            skips=state.skips,
            metadata=state.metadata,
            row_files=array("q", [file_index[primary] for primary, _ in rows]),
            row_aliases={
                row: tuple(file_index[a] for a in aliases) for row, (_, aliases) in enumerate(rows) if aliases
            },
            problems=table.problems,
            registries=table.registries,
        )

    def to_plain(self) -> tuple[object, ...]:
        return (
            self.dir_parents.tobytes(),
            self.dir_names,
            self.dir_mtimes.tobytes(),
            self.file_dirs.tobytes(),
            self.file_names,
            self.file_sizes.tobytes(),
            self.file_mtimes.tobytes(),
            self.model_ids,
            self.tasks,
            self.keys,
            self.file_problems,
            self.skips,
            self.metadata,
            self.row_files.tobytes(),
            self.row_aliases,
            self.problems,
            self.registries,
        )

    @classmethod
    def from_plain(cls, plain: object) -> PackedTree | None:
        """The packed tree, or None when ``plain`` does not have its shape (then the index is rebuilt)."""
        if not (isinstance(plain, tuple) and len(plain) == 17):
            return None
        fields: list[Any] = list(plain)
        for i in (0, 2, 3, 5, 6, 13):
            fields[i] = _ints(plain[i])
            if fields[i] is None:
                return None
        if not all(isinstance(fields[i], list) for i in (1, 4, 7, 8, 9, 15, 16)):
            return None
        if not all(isinstance(fields[i], dict) for i in (10, 11, 14)):
            return None
        if not len(fields[0]) == len(fields[1]) == len(fields[2]):
            return None
        if not len(fields[3]) == len(fields[4]) == len(fields[5]) == len(fields[6]) == len(fields[9]):
            return None
        return cls(*fields)

    # -- reading it -------------------------------------------------------------------------------
    def dir_rels(self) -> list[str]:
        if self._dir_rels is None:
            rels: list[str] = []
            for parent, name in zip(self.dir_parents, self.dir_names, strict=True):
                if parent < 0:
                    rels.append(name)
                else:
                    base = rels[parent]
                    rels.append(f"{base}/{name}" if base else name)
            self._dir_rels = rels
        return self._dir_rels

    def file_rel(self, index: int) -> str:
        d = self.file_dirs[index]
        return f"{self.dir_rels()[d]}/{self.file_names[index]}" if d >= 0 else self.file_names[index]

    def changes(self, root: str) -> tuple[list[str], list[str]]:
        """The folders (mtime) and files (size, mtime) that are not as recorded: one stat each.

        Paths are looked up relative to an open descriptor of the root (fewer components for the
        kernel to resolve, 20,000 times over).
        """
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return self.dir_rels(), [self.file_rel(i) for i in range(len(self.file_names))]
        try:
            return self._changes(fd)
        finally:
            os.close(fd)

    def _changes(self, fd: int) -> tuple[list[str], list[str]]:
        stat = os.stat
        rels = self.dir_rels()
        dirs_changed = []
        for rel, mtime in zip(rels, self.dir_mtimes, strict=True):
            try:
                if stat(rel or ".", dir_fd=fd).st_mtime_ns == mtime:
                    continue
            except OSError:
                pass
            dirs_changed.append(rel)
        files_changed = []
        for i, (d, name, size, mtime) in enumerate(
            zip(self.file_dirs, self.file_names, self.file_sizes, self.file_mtimes, strict=True)
        ):
            try:
                info = stat(f"{rels[d]}/{name}" if d >= 0 else name, dir_fd=fd)
                if info.st_mtime_ns == mtime and info.st_size == size:
                    continue
            except OSError:
                pass
            files_changed.append(self.file_rel(i))
        return dirs_changed, files_changed

    def table(self) -> EntryTable:
        rows = self.row_files
        return EntryTable(
            paths=_RowPaths(self, rows),
            model_ids=[self.model_ids[f] for f in rows],
            tasks=[self.tasks[f] for f in rows],
            keys=[self.keys[f] for f in rows],
            aliases={row: tuple(self.file_rel(f) for f in files) for row, files in self.row_aliases.items()},
            problems=self.problems,
            registries=self.registries,
        )

    def unpack(self) -> TreeState:
        """Back to the editable form (an update is coming)."""
        rels = self.dir_rels()
        files: dict[str, tuple[int, int, FileRecord]] = {}
        for i in range(len(self.file_names)):
            problem = self.file_problems.get(i)
            record: FileRecord = problem if problem is not None else (self.model_ids[i], self.tasks[i], self.keys[i])
            files[self.file_rel(i)] = (self.file_sizes[i], self.file_mtimes[i], record)
        dirs = dict(zip(rels, self.dir_mtimes, strict=True))
        return TreeState(dirs, files, self.skips, self.metadata)


class _RowPaths(Sequence[str]):
    """Each row's primary path, made when asked (a lookup asks for a handful of 10,000)."""

    def __init__(self, tree: PackedTree, rows: array[int]) -> None:
        self._tree = tree
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._tree.file_rel(f) for f in self._rows[index]]
        return self._tree.file_rel(self._rows[index])

    def __iter__(self) -> Iterator[str]:
        return (self._tree.file_rel(f) for f in self._rows)


def _ints(value: object) -> array[int] | None:
    if not isinstance(value, bytes) or len(value) % 8:
        return None
    result = array("q")
    result.frombytes(value)
    return result
