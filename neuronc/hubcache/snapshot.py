"""A local copy of a cache repository (``--snapshot DIR``), read through the persistent index.

``SnapshotSource(dir)`` reads a copy with the repository's layout (made by ``neuronc cache mirror``,
a git sparse checkout, or a local compile cache such as ``/var/tmp/neuron-compile-cache``).

The first lookup walks ``neuronxcc-*/0_REGISTRY/`` (``fsutil.walk_files``: regular files only,
links followed only inside the snapshot, no loops, FIFOs and devices never opened), parses every
entry and saves the index. Later lookups re-check each directory's and each file's identity
(mtime; size and mtime for files) with one ``stat`` each, list again only the directories that
changed, parse only the files that are new or changed, and save the index when anything did.
What cannot be read (special files, links out of the tree, names that are not entry names,
broken entries) is reported per file and skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from neuronc.errors import InvalidInputError
from neuronc.fsutil import scan_dir, walk_files
from neuronc.hubcache.entries import MAX_ENTRY_BYTES
from neuronc.hubcache.index import IndexFile, racy_before, read_limited
from neuronc.hubcache.paths import (
    COMPILER_PREFIX,
    MIRROR_METADATA,
    REGISTRY_DIR,
    RegistryPath,
    is_registry_candidate,
    parse_registry_path,
    path_problem,
    printable,
)
from neuronc.hubcache.registry import IndexInfo, IndexState, Query, Registry, SourceInfo, SourceKind
from neuronc.hubcache.sources import local_model_config
from neuronc.hubcache.table import EntryTable, FileRecord, read_record
from neuronc.hubcache.tree import MetadataRecord, PackedTree, TreeState, parent_of
from neuronc.progress import NULL_PROGRESS, ProgressSink

_UNKNOWN = -1  # an mtime recorded too close to the scan to be trusted: checked again next time


class SnapshotSource:
    """A local copy of a cache repository (or a local compile cache) with the repository's layout."""

    def __init__(self, root: str | os.PathLike[str], *, index_dir: Path | None = None) -> None:
        self.root = Path(root).expanduser()
        shown = printable(os.fspath(root))
        if not self.root.exists():
            raise InvalidInputError(
                f"{shown}: no such snapshot directory", hint="make one with `neuronc cache mirror DIR`"
            )
        if not self.root.is_dir():
            hint = "--snapshot takes the directory `neuronc cache mirror DIR` wrote"
            raise InvalidInputError(f"{shown}: not a directory", hint=hint)
        self._real = os.path.realpath(self.root)
        self._index = IndexFile("snapshot", self._real, index_dir)
        self._metadata: tuple[str | None, str | None, str | None, str | None] | None = None  # repo, revision, date
        self._notes: list[str] = []

    def info(self) -> SourceInfo:
        meta = self._metadata
        return SourceInfo(
            SourceKind.SNAPSHOT,
            path=printable(str(self.root)),
            repo=meta[0] if meta else None,
            revision=meta[1] if meta else None,
            mirrored_at=meta[2] if meta else None,
        )

    def load(self, query: Query = Query(), progress: ProgressSink = NULL_PROGRESS) -> Registry:
        """Every entry of the snapshot (the query does not narrow a local read: the index holds them all)."""
        table, files, has_registry, info = self._current_table(progress)
        registry = Registry(self.info(), table, self._read, files, list(self._notes), info)
        if not has_registry:
            registry.notes.append(f"no {COMPILER_PREFIX}*/{REGISTRY_DIR} folder under {printable(str(self.root))}")
        return registry

    def locations(self) -> list[RegistryPath]:
        """Every registry entry's files in the snapshot (symlinked aliases of a local compile cache included)."""
        table, _, _, _ = self._current_table(NULL_PROGRESS)
        paths = [*table.paths, *(a for aliases in table.aliases.values() for a in aliases)]
        return [loc for loc in map(parse_registry_path, sorted(paths)) if loc is not None]

    def _read(self, rel: str) -> bytes:
        return read_limited(f"{self._real}/{rel}", MAX_ENTRY_BYTES)

    def model_config(self, model_id: str, revision: str | None) -> tuple[dict[str, Any] | None, str]:
        """The model's config.json from a local directory or the local Hugging Face cache: never online."""
        config, where = local_model_config(model_id, revision)
        if config is None:
            where = (
                "no config.json in a local directory or the local Hugging Face cache, and --snapshot never goes online"
            )
        return config, where

    # -- the index ----------------------------------------------------------------------------------
    def _current_table(self, progress: ProgressSink) -> tuple[EntryTable, int, bool, IndexInfo]:
        """The table (from the index when nothing changed), files listed, whether any registry exists."""
        cutoff = racy_before()
        packed = PackedTree.from_plain(self._index.load())
        if packed is not None:
            dirs_changed, files_changed = packed.changes(self._real)
            if not dirs_changed and not files_changed and not _metadata_changed(self._real, packed.metadata):
                self._set_metadata(packed.metadata)
                has_registry = any(_is_registry_dir(rel) for rel in packed.dir_rels())
                return packed.table(), len(packed.file_names), has_registry, IndexInfo(IndexState.WARM)
            scanner = _Scanner(self._real, packed.unpack(), cutoff)
            scanner.update(dirs_changed, files_changed)
            kind = IndexState.UPDATED
        else:
            scanner = _Scanner(self._real, TreeState(), cutoff)
            scanner.scan_root()
            kind = IndexState.REBUILT if self._index.found_invalid else IndexState.BUILT
        scanner.read_metadata(self._notes)
        parsed = scanner.parse_pending(progress)
        state = scanner.state
        table, rows = state.table()
        saved = self._index.save(PackedTree.pack(state, table, rows).to_plain())
        self._set_metadata(state.metadata)
        has_registry = any(_is_registry_dir(rel) for rel in state.dirs)
        return table, len(state.files), has_registry, IndexInfo(kind, parsed, saved)

    def _set_metadata(self, record: MetadataRecord | None) -> None:
        self._metadata = record[2] if record is not None else None


def _is_registry_dir(rel: str) -> bool:
    return rel.startswith(COMPILER_PREFIX) and rel.count("/") == 1 and rel.endswith(f"/{REGISTRY_DIR}")


def _metadata_changed(root: str, known: MetadataRecord | None) -> bool:
    try:
        info = os.stat(f"{root}/{MIRROR_METADATA}")
    except OSError:
        return known is not None
    return known is None or known[0] != info.st_size or known[1] != info.st_mtime_ns


class _Scanner:
    """Brings a TreeState up to date with the directory: full scans, or re-checks and local re-scans."""

    def __init__(self, root: str, state: TreeState, cutoff: int) -> None:
        self.root = root
        self.state = state
        self.cutoff = cutoff
        self.changed = False
        self.pending: dict[str, tuple[int, int, RegistryPath]] = {}  # files to parse: rel -> (size, mtime, where)
        self._kids: dict[str, tuple[list[str], list[str]]] | None = None
        self._previous: dict[str, tuple[int, int, FileRecord]] = {}  # records a full re-scan may reuse
        self._full = False  # scanning from the root (walk_files sees every folder once)
        self.needs_full_scan = False

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _mtime(self, mtime_ns: int) -> int:
        return _UNKNOWN if mtime_ns >= self.cutoff else mtime_ns

    def _skip(self, rel: str, reason: str) -> None:
        self.state.skips.setdefault(parent_of(rel), []).append((printable(rel), reason))

    # -- full scans -----------------------------------------------------------------------------------
    def scan_root(self) -> None:
        """Scan the snapshot from its root (records of files that did not change are kept)."""
        self._previous = {**self._previous, **self.state.files}
        self.state = TreeState(metadata=self.state.metadata)
        self.pending.clear()
        self._kids = None
        self.changed = True
        self._full = True
        self._rescan("")

    def _rescan(self, rel: str) -> None:
        """List one directory again (root, a compiler folder or a registry folder) and follow what is new."""
        state = self.state
        try:
            state.dirs[rel] = self._mtime(os.stat(self._path(rel)).st_mtime_ns)
        except OSError:
            self._drop(rel)
            return
        depth = rel.count("/") + 1 if rel else 0
        scan = scan_dir(self._path(rel), within=self.root, prefix=f"{rel}/" if rel else "")
        state.skips.pop(rel, None)
        subdirs = {sub: path for sub, path in scan.dirs}
        if depth == 0:  # the root: only neuronxcc-* folders matter
            wanted = {sub for sub in subdirs if sub.startswith(COMPILER_PREFIX)}
            skipped = [(sub, why) for sub, why in scan.skipped if sub.startswith(COMPILER_PREFIX)]
        elif depth == 1:  # a compiler folder: only its registry
            wanted = {sub for sub in subdirs if sub == f"{rel}/{REGISTRY_DIR}"}
            skipped = [(sub, why) for sub, why in scan.skipped if sub == f"{rel}/{REGISTRY_DIR}"]
        else:
            wanted = set(subdirs)
            skipped = list(scan.skipped)
            seen_files = set()
            for entry in scan.files:
                seen_files.add(entry.rel)
                self._file(entry.rel, entry.size, entry.mtime_ns)
            for gone in self._children(rel)[1]:
                if gone not in seen_files:
                    state.files.pop(gone, None)
        for sub, why in skipped:
            self._skip(sub, why)
        for gone in self._children(rel)[0]:
            if gone not in wanted and gone in state.dirs:
                self._drop(gone)
        for sub in sorted(wanted):
            if sub in state.dirs:
                continue  # known: checked on its own
            if depth == 0:
                self._rescan(sub)
            elif not self._full and os.path.islink(self._path(sub)):
                # A new link to a folder: only a whole walk knows every folder it may lead back to.
                self.needs_full_scan = True
            else:
                self._walk(sub, subdirs[sub])

    def _children(self, rel: str) -> tuple[list[str], list[str]]:
        """The directories and files known under ``rel`` (one level) before this update began."""
        if self._kids is None:
            kids: dict[str, tuple[list[str], list[str]]] = {}
            for d in self.state.dirs:
                if d:
                    kids.setdefault(parent_of(d), ([], []))[0].append(d)
            for f in self.state.files:
                kids.setdefault(parent_of(f), ([], []))[1].append(f)
            self._kids = kids
        return self._kids.get(rel, ([], []))

    def _walk(self, rel: str, path: str) -> None:
        """A new registry folder or sub-folder: walk it all (fsutil.walk_files)."""

        def on_dir(sub: str, mtime_ns: int) -> None:
            self.state.dirs[f"{rel}/{sub}" if sub else rel] = self._mtime(mtime_ns)

        def on_skip(sub: str, reason: str) -> None:
            self._skip(f"{rel}/{sub}" if sub != "." else rel, reason)

        for entry in walk_files(path, within=self.root, on_dir=on_dir, on_skip=on_skip):
            self._file(f"{rel}/{entry.rel}", entry.size, entry.mtime_ns)

    def _file(self, rel: str, size: int, mtime_ns: int) -> None:
        if not is_registry_candidate(rel):
            return
        location = parse_registry_path(rel)
        if location is None:
            self._skip(rel, path_problem(rel))
            return
        known = self.state.files.get(rel) or self._previous.get(rel)
        if known is None or known[0] != size or known[1] != mtime_ns or known[1] == _UNKNOWN:
            self.pending[rel] = (size, mtime_ns, location)
        else:
            self.state.files[rel] = known

    def _drop(self, rel: str) -> None:
        """Forget a directory and everything under it."""
        state = self.state
        prefix = f"{rel}/"
        for table in (state.dirs, state.files, state.skips):
            for key in [k for k in table if k == rel or k.startswith(prefix)]:
                del table[key]
        self.changed = True

    # -- re-checks ------------------------------------------------------------------------------------
    def update(self, dirs_changed: list[str], files_changed: list[str]) -> None:
        """List again the folders that changed, re-read the files that changed (found by PackedTree.changes)."""
        self.changed = True
        for rel in sorted(dirs_changed, key=lambda d: (d.count("/"), d)):  # parents first
            if rel in self.state.dirs:  # not dropped with a parent
                self._rescan(rel)
        for rel in files_changed:
            if rel in self.state.files and rel not in self.pending:
                path = self._path(rel)
                try:
                    info = os.stat(path)
                except OSError as exc:
                    del self.state.files[rel]
                    self._skip(
                        rel, "a broken symbolic link" if os.path.islink(path) else f"cannot read: {exc.strerror}"
                    )
                    continue
                location = parse_registry_path(rel)
                assert location is not None  # it was recorded as an entry path
                self.pending[rel] = (info.st_size, info.st_mtime_ns, location)
        if self.needs_full_scan:
            self.scan_root()

    def parse_pending(self, progress: ProgressSink) -> int:
        """Read and parse the new and changed files."""
        if not self.pending:
            return 0
        self.changed = True
        task = progress.task(f"indexing {len(self.pending)} registry files", total=len(self.pending))
        for rel, (size, mtime_ns, location) in sorted(self.pending.items()):
            record: FileRecord
            try:
                record = read_record(location, read_limited(self._path(rel), MAX_ENTRY_BYTES))
            except OSError as exc:
                record = f"cannot read: {exc.strerror or exc}"
            except ValueError as exc:  # not a regular file any more, or too large
                record = str(exc)
            self.state.files[rel] = (size, self._mtime(mtime_ns), record)
            task.advance()
        task.done()
        return len(self.pending)

    # -- mirror metadata ------------------------------------------------------------------------------
    def read_metadata(self, notes: list[str]) -> None:
        """``.neuronc-mirror.json`` (repository, revision, date), re-read only when it changed."""
        path = self._path(MIRROR_METADATA)
        try:
            info = os.stat(path)
        except OSError:
            if self.state.metadata is not None:
                self.state.metadata = None
                self.changed = True
            return
        known = self.state.metadata
        if known is not None and known[0] == info.st_size and known[1] == info.st_mtime_ns:
            return
        self.changed = True
        try:
            from neuronc.hubcache.mirror import read_mirror_metadata  # only when the file changed

            meta = read_mirror_metadata(Path(path))
        except InvalidInputError as exc:
            notes.append(f"ignored {exc.message}")
            self.state.metadata = None
            return
        fields = (meta.repo, meta.revision, meta.created_at, meta.endpoint)
        self.state.metadata = (info.st_size, self._mtime(info.st_mtime_ns), fields)
