"""Small file-system helpers every layer uses: atomic writes, safe opens and walks, sizes, free space.

Bundle-specific access (opening paths inside a bundle without following links at any step) lives
in ``neuronc.bundle.fs``; this module is for files neuronc writes or reads that are not bundles.
Kept free of heavy imports.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from neuronc.errors import (
    DISK_FULL,
    DiskFullError,
    EnvironmentIncompatibleError,
    InvalidInputError,
    NeuroncError,
    foreign_row,
    safe_text,
)

# O_NONBLOCK: opening a FIFO must not hang the reader; the fstat below then refuses it.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegularFileError(InvalidInputError):
    """A path that should be a regular file is a FIFO, a device, a socket or a directory."""

    kind = "not_a_regular_file"


def file_kind(mode: int) -> str:
    """What a stat mode is, in words."""
    for test, word in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return word
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> int:
    """Open a regular file for reading; refuse FIFOs, devices, sockets and directories without blocking.

    Raises FileNotFoundError / PermissionError as ``os.open`` does, NotRegularFileError (exit 2)
    for anything that is not a regular file.
    """
    flags = _READ_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            msg = f"{os.fspath(path)}: is {file_kind(mode)}, not a regular file"
            raise NotRegularFileError(msg)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes_limited(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> bytes:
    """A regular file's bytes, refusing files larger than ``limit`` (InvalidInputError, exit 2)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            msg = f"{os.fspath(path)}: {what} is {format_bytes(size)}; the limit is {format_bytes(limit)}"
            raise InvalidInputError(msg)
        # Plain os.read (no buffered file object: this runs for every file of large trees), asking
        # for the size fstat gave plus one byte, then for whatever the file grew by, up to the limit.
        chunks = [os.read(fd, size + 1)]
        total = len(chunks[0])
        while chunks[-1] and total <= limit:
            chunks.append(os.read(fd, limit + 1 - total))
            total += len(chunks[-1])
    finally:
        os.close(fd)
    if total > limit:  # grew while we read it
        msg = f"{os.fspath(path)}: {what} is larger than {format_bytes(limit)}"
        raise InvalidInputError(msg)
    return chunks[0] if len(chunks) <= 2 else b"".join(chunks)


def read_fd_upto(fd: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes from an open descriptor, 1 MiB a read: more than ``limit`` says the
    file is (or grew) larger than the caller accepts."""
    chunks = []
    left = limit + 1
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, *, fsync: bool = True, mode: int = 0o644, through: bool = False
) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    Readers see the old file or the new one, never half of one; the temporary file is removed on any
    failure. Whatever stood at ``path`` (a link, a FIFO) is replaced: what neuronc keeps for itself
    (caches, indexes, mirrors) is always a regular file of its own. With ``through`` (a path a user
    named: ``write_output``) only a regular file is replaced; a symbolic link, a character device, a
    FIFO is opened and written, as a shell's ``>`` does: the link stays a link (its target gets the
    bytes), ``/dev/stdout`` stays the terminal or pipe it is, a device stays a device. A full disk is
    a DiskFullError (exit 5) naming the path and the size; a directory at ``path`` is
    IsADirectoryError, a parent that is a file NotADirectoryError.
    """
    target = Path(path)
    try:
        info = os.lstat(target)
    except OSError:
        info = None  # absent; or a parent is missing or not a directory: the steps below say which
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    if through and info is not None and not stat.S_ISREG(info.st_mode):
        _write_through(target, data, mode)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a parent is a file (or a link to one): say so, not "File exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target.parent)) from None
    try:
        directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a folder one may write but not list: a path-only descriptor still names it
        directory = os.open(target.parent, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        atomic_write_at(directory, target.name, data, fsync=fsync, mode=mode)
    except OSError as exc:
        if foreign_row(exc) is DISK_FULL:
            raise disk_full_error(target, len(data), exc) from None
        raise
    finally:
        os.close(directory)


def atomic_write_at(directory: int, name: str, source: bytes | int, *, fsync: bool = True, mode: int = 0o644) -> int:
    """Write ``source`` (bytes, or an open descriptor to copy from) as ``name`` in the open ``directory``.

    Through a temporary file of a unique name, created exclusively (``O_EXCL | O_NOFOLLOW``: a link
    planted at any name is never written through), and a rename over ``name``; the temporary file
    is removed on any failure, Ctrl-C included. The bytes written.
    """
    import secrets  # lazily: a store hit never writes a temporary file

    tmp = f".{name[:200]}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
    written = 0
    try:
        try:
            chunks = iter([source]) if isinstance(source, bytes) else iter(lambda: os.read(source, 1 << 20), b"")
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
                written += len(chunk)
            if fsync:
                os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    if fsync:
        with contextlib.suppress(OSError):
            os.fsync(directory)
    return written


def _write_through(target: Path, data: bytes, mode: int) -> None:
    """Open what stands at ``target`` (following links) and write ``data`` into it (truncating a regular file)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        if foreign_row(exc) is DISK_FULL:
            raise disk_full_error(target, len(data), exc) from None
        raise


# OSError numbers that mean "this path cannot be written" (the user's choice of path) rather than a broken host.
_UNWRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG}
    | {errno.ENXIO, errno.ENOENT, errno.ELOOP, errno.ETXTBSY, errno.EINVAL}
)


def write_output(
    path: str | os.PathLike[str], data: bytes, *, what: str, fsync: bool = False, mode: int = 0o644
) -> None:
    """Write a file a user named (``--out``, ``--report``): ``atomic_write_bytes`` replacing only a regular
    file (links, devices and FIFOs are written through), with one error line (``output_error``) where
    it cannot be written."""
    try:
        atomic_write_bytes(path, data, fsync=fsync, mode=mode, through=True)
    except OSError as exc:
        raise output_error(path, exc, what=what) from None


def output_error(
    path: str | os.PathLike[str],
    exc: OSError,
    *,
    what: str,
    needed: int | None = None,
    hint: str = "choose another path",
) -> NeuroncError:
    """One error line for an OSError writing ``what`` (``needed`` bytes, when known) at a path a user named.

    A path that cannot be written (a directory, a file's child, no permission, a read-only file
    system) is InvalidInputError (exit 2) with ``hint`` (the flag that names the path); a full disk
    or device is DiskFullError (exit 5); any other OSError (EIO) is EnvironmentIncompatibleError (exit 5).
    """
    if foreign_row(exc) is DISK_FULL:
        return disk_full_error(path, needed, exc)
    shown, reason = safe_text(os.fspath(path), 1000), exc.strerror or str(exc)
    culprit = os.fspath(exc.filename) if exc.filename is not None else None
    if isinstance(exc, FileExistsError) and culprit is not None and culprit != os.fspath(path):
        reason = os.strerror(errno.ENOTDIR)  # mkdir of a parent that is a file
    where = f" ({safe_text(culprit)})" if culprit is not None and culprit != os.fspath(path) else ""
    msg = f"{shown}: cannot write {what}: {reason}{where}"
    if exc.errno in _UNWRITABLE:
        return InvalidInputError(msg, hint=hint)
    return EnvironmentIncompatibleError(msg)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, fsync: bool = True, mode: int = 0o644) -> None:
    """``atomic_write_bytes`` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync, mode=mode)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def format_bytes(value: int | float | None, *, unit: str | None = None) -> str:
    """Bytes for people, in binary units with one decimal: ``512 B``, ``1.5 KiB``, ``2.0 GiB``; ``?`` if unknown.

    ``unit`` fixes the unit (``"GiB"``, ``"MiB"``) where numbers are compared side by side.
    """
    if value is None:
        return "?"
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    amount = float(value)
    if unit is not None:
        return f"{amount / 1024 ** units.index(unit):.1f} {unit}"
    for name in units:
        if abs(amount) < 1024 or name == "TiB":
            return f"{int(amount)} B" if name == "B" else f"{amount:.1f} {name}"
        amount /= 1024
    raise AssertionError("unreachable")


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 shard``, ``2 shards``: a count and the right form of its noun."""
    word = singular if count == 1 else (plural_form or f"{singular}s")
    return f"{count} {word}"


def tree_bytes(path: Path) -> int:
    """Bytes used by the regular files under ``path``: links are not followed, unreadable folders are
    counted as empty, and the walk keeps its own stack (a tree nested thousands of levels deep is no
    RecursionError)."""
    total = 0
    stack = [os.fspath(path)]
    while stack:
        current = stack.pop()
        try:
            info = os.lstat(current)
            if not stat.S_ISDIR(info.st_mode):
                total += info.st_size if stat.S_ISREG(info.st_mode) else 0
                continue
            with os.scandir(current) as it:
                stack.extend(entry.path for entry in it)
        except OSError:
            continue
    return total


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free for an unprivileged writer on the file system holding ``path`` (or its nearest parent)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def disk_full_error(
    path: str | os.PathLike[str], needed: int | None, exc: BaseException | None = None
) -> DiskFullError:
    """The one-line error for a write that does not fit: the path, the space needed and the space free."""
    free = free_bytes(path)
    need = f"needs {format_bytes(needed)}" if needed else "needs more space"
    have = f", {format_bytes(free)} free" if free is not None else ""
    msg = f"{safe_text(os.fspath(path), 1000)}: no space left on device ({need}{have})"  # any bytes: shown safe
    details = [str(exc)] if exc is not None and str(exc) else []
    return DiskFullError(msg, hint=DISK_FULL.hint, details=details)


def check_free_space(path: str | os.PathLike[str], needed: int, *, what: str) -> None:
    """Raise DiskFullError before writing ``needed`` bytes under ``path`` if they cannot fit."""
    free = free_bytes(path)
    if free is not None and needed > free:
        error = disk_full_error(path, needed)
        error.message = (
            f"{safe_text(os.fspath(path), 1000)}: not enough space for {what}: needs {format_bytes(needed)}, "
            f"{format_bytes(free)} free"
        )
        raise error


@contextlib.contextmanager
def disk_full_as_error(path: str | os.PathLike[str], needed: int | None = None) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised inside the block into DiskFullError (exit 5) naming ``path`` and ``needed``."""
    try:
        yield
    except OSError as exc:
        if foreign_row(exc) is not DISK_FULL:
            raise
        raise disk_full_error(path, needed, exc) from exc


@dataclass(frozen=True)
class TreeEntry:
    """A regular file found by ``walk_files`` or ``scan_dir``: its path relative to the root, size and mtime."""

    rel: str
    fspath: str
    size: int
    mtime_ns: int = 0

    @property
    def path(self) -> Path:
        return Path(self.fspath)


@dataclass
class DirScan:
    """One level of a directory: its regular files, its sub-directories, and what was skipped and why."""

    files: list[TreeEntry] = field(default_factory=list)
    dirs: list[tuple[str, str]] = field(default_factory=list)  # (rel, path to enter)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rel, reason)


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def scan_dir(directory: str | os.PathLike[str], *, within: str | os.PathLike[str], prefix: str = "") -> DirScan:
    """List one directory safely: nothing is opened, FIFOs/devices/sockets and links out of ``within`` are skipped.

    ``within`` must be a resolved path (``os.path.realpath``); links are followed only when they
    resolve inside it. ``rel`` of each result is ``prefix + name``. An unreadable directory is
    one skipped entry (``prefix`` without its slash, or ``.``).
    """
    # Plain strings, not pathlib: this runs once per file of trees with tens of thousands of them.
    base = os.fspath(within)
    scan = DirScan()
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        scan.skipped.append((prefix.rstrip("/") or ".", f"cannot read: {exc.strerror or exc}"))
        return scan
    for entry in entries:
        rel = f"{prefix}{entry.name}"
        try:
            if entry.is_symlink():
                resolved = os.path.realpath(entry.path)
                if not _inside(resolved, base):
                    scan.skipped.append((rel, "a symbolic link out of the tree"))
                    continue
                info = os.stat(resolved)
                target = resolved
            elif entry.is_dir(follow_symlinks=False):  # the directory's own type: no system call
                scan.dirs.append((rel, entry.path))
                continue
            else:
                info = entry.stat(follow_symlinks=False)
                target = entry.path
        except FileNotFoundError:
            scan.skipped.append((rel, "a broken symbolic link" if entry.is_symlink() else "removed while listed"))
            continue
        except OSError as exc:
            scan.skipped.append((rel, f"cannot read: {exc.strerror or exc}"))
            continue
        if stat.S_ISDIR(info.st_mode):
            scan.dirs.append((rel, target))
        elif stat.S_ISREG(info.st_mode):
            scan.files.append(TreeEntry(rel, target, info.st_size, info.st_mtime_ns))
        else:
            scan.skipped.append((rel, f"{file_kind(info.st_mode)}, not a regular file"))
    return scan


def walk_files(
    root: str | os.PathLike[str],
    *,
    max_depth: int = 32,
    max_entries: int = 1_000_000,
    within: str | os.PathLike[str] | None = None,
    on_skip: Callable[[str, str], None] | None = None,
    on_dir: Callable[[str, int], None] | None = None,
) -> Iterator[TreeEntry]:
    """Regular files under ``root``, sorted per directory; safe on hostile trees.

    Symbolic links are followed only when they resolve inside ``within`` (default: ``root``; the
    Hugging Face cache links snapshot files to blobs beside them, so pass the repository folder as
    ``root`` for those); FIFOs, devices and sockets are skipped without being opened; a directory
    is never entered twice (no loops); depth and entry count are bounded. ``on_skip(rel, reason)``
    hears about everything skipped, ``on_dir(rel, mtime_ns)`` about every directory entered (``""``
    is ``root``).
    """
    base = os.path.realpath(root)
    limit = os.path.realpath(within) if within is not None else base

    def skip(rel: str, reason: str) -> None:
        if on_skip is not None:
            on_skip(rel, reason)

    if not _inside(base, limit):
        skip(".", "a symbolic link out of the tree")
        return
    seen: set[tuple[int, int]] = set()
    count = 0
    stack: list[tuple[str, str, int]] = [(base, "", 0)]
    while stack:
        directory, prefix, depth = stack.pop()
        try:
            info = os.stat(directory)
        except OSError as exc:
            skip(prefix.rstrip("/") or ".", f"cannot read: {exc.strerror or exc}")
            continue
        if (info.st_dev, info.st_ino) in seen:
            skip(prefix.rstrip("/") or ".", "a directory already walked (a link loop)")
            continue
        seen.add((info.st_dev, info.st_ino))
        if on_dir is not None:
            on_dir(prefix.rstrip("/"), info.st_mtime_ns)
        scan = scan_dir(directory, within=limit, prefix=prefix)
        count += len(scan.files) + len(scan.dirs) + len(scan.skipped)
        if count > max_entries:
            skip(prefix.rstrip("/") or ".", f"more than {max_entries} entries; the rest is not read")
            return
        for rel, reason in scan.skipped:
            skip(rel, reason)
        yield from scan.files
        subdirs: list[tuple[str, str, int]] = []
        for rel, path in scan.dirs:
            if depth + 1 < max_depth:
                subdirs.append((path, f"{rel}/", depth + 1))
            else:
                skip(rel, f"nested more than {max_depth} levels deep")
        stack.extend(reversed(subdirs))
