"""`cache synchronize --to DIR`: the publications written into a directory, every target checked first.

A shared offline cache is written by several users: anyone who can write into it may plant a link
where a folder or a file goes, a file where a folder goes, a FIFO. So: every target under ``DIR`` is
checked before the first byte is written (no link at any component below ``DIR``, folders where
folders go, regular writable files or nothing where files go, every source a regular file, room
for all of it); then each file is written with ``fsutil.atomic_write_at`` into a folder opened one
component at a time without following links (a link planted between the check and the write is
refused, never written through), under a temporary name of its own that a failure or Ctrl-C
removes. A bundle's module files go first and its registry entry last, so a failure part way
leaves whole files and never an entry whose graphs are missing.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.errors import InvalidInputError, NeuroncError, printable
from neuronc.fsutil import atomic_write_at, check_free_space, file_kind, open_regular, output_error

if TYPE_CHECKING:
    from neuronc.hubcache.publish import BundlePublication

HINT = "choose another --to DIR, or remove what stands in the way"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def targets(publications: Sequence[BundlePublication]) -> list[tuple[str, bytes | Path]]:
    """(repository path, content) of every publishable bundle: module files first, registry entries last."""
    modules: list[tuple[str, bytes | Path]] = []
    entries: list[tuple[str, bytes | Path]] = []
    for pub in publications:
        if pub.publishable:
            for path, content in pub.contents().items():
                (entries if isinstance(content, bytes) else modules).append((path, content))
    return sorted(modules) + entries


def write_tree(publications: Sequence[BundlePublication], directory: Path) -> list[str]:
    """Write the publishable bundles' files under ``directory`` (the repository's paths); the paths written."""
    planned = targets(publications)
    if not planned:
        return []
    check_targets(planned, directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise output_error(directory, exc, what="the cache tree", hint=HINT) from None
    written: list[str] = []
    try:
        for rel, content in planned:
            _write_one(root, directory, rel, content)
            written.append(rel)
    finally:
        os.close(root)
    return sorted(written)


def check_targets(planned: Sequence[tuple[str, bytes | Path]], directory: Path) -> None:
    """Raise (exit 2, or 5 for room) before anything is written when any target cannot be written safely."""
    shown = printable(str(directory))
    try:
        info = os.stat(directory)  # DIR itself may be a link the user chose; below it, nothing may be
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise output_error(directory, exc, what="the cache tree", hint=HINT) from None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise InvalidInputError(f"--to {shown}: is {file_kind(info.st_mode)}, not a directory", hint=HINT)
    needed = 0
    for rel, content in planned:
        parts = rel.split("/")
        if any(part in ("", ".", "..") or "\0" in part for part in parts):
            raise InvalidInputError(f"--to {shown}: {printable(rel)} is not a path below it")
        if info is not None:
            _check_path(directory, parts)
        needed += len(content) if isinstance(content, bytes) else _source_size(content)
    check_free_space(directory, needed, what="the cache tree")


def _check_path(directory: Path, parts: list[str]) -> None:
    current = directory
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise output_error(current, exc, what="the cache tree", hint=HINT) from None
        rel = "/".join(parts[: index + 1])
        last = index == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            raise _link_error(directory, rel)
        if not last and not stat.S_ISDIR(info.st_mode):
            raise _in_the_way(directory, rel, f"is {file_kind(info.st_mode)} where a folder goes")
        if last and not stat.S_ISREG(info.st_mode):
            raise _in_the_way(directory, rel, f"is {file_kind(info.st_mode)} where a file goes")
        if last and not info.st_mode & 0o222:
            raise _in_the_way(directory, rel, "is read-only: not replaced")


def _source_size(path: Path) -> int:
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError as exc:
        raise InvalidInputError(f"{printable(str(path))}: cannot read it: {exc.strerror or exc}") from None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _write_one(root: int, directory: Path, rel: str, content: bytes | Path) -> None:
    parts = rel.split("/")
    try:
        folder = _open_below(root, parts[:-1])
        try:
            try:
                info = os.lstat(parts[-1], dir_fd=folder)
            except FileNotFoundError:
                info = None
            if info is not None and not stat.S_ISREG(info.st_mode):  # planted since the check
                raise _in_the_way(directory, rel, f"is {file_kind(info.st_mode)} where a file goes")
            if isinstance(content, bytes):
                atomic_write_at(folder, parts[-1], content)
            else:
                source = open_regular(content, follow_symlinks=False)
                try:
                    atomic_write_at(folder, parts[-1], source)
                finally:
                    os.close(source)
        finally:
            os.close(folder)
    except NeuroncError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(directory, rel) from None
        raise output_error(directory / rel, exc, what="the cache tree", hint=HINT) from None


def _open_below(root: int, parts: Sequence[str]) -> int:
    """The folder ``root/parts...``, created where missing, opened one component at a time, never through a link."""
    fd = os.dup(root)
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _link_error(directory: Path, rel: str) -> InvalidInputError:
    return InvalidInputError(
        f"--to {printable(str(directory))}: {printable(rel)} is a symbolic link: refusing to write through it "
        "(nothing below --to may be a link)",
        hint=HINT,
    )


def _in_the_way(directory: Path, rel: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"--to {printable(str(directory))}: {printable(rel)} {what}", hint=HINT)
