"""File access that cannot be tricked into leaving a bundle, hashing, fsync, and owner locks."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from neuronc.fsutil import tree_bytes

CHUNK = 1024 * 1024
STAGING_PREFIX = ".neuronc-staging-"
TRASH_PREFIX = ".neuronc-trash-"
LOCK_SUFFIX = ".lock"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted in a bundle must not hang the reader.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeEntry(Exception):
    """A bundle path leads somewhere a reader must not go (symlink, device, FIFO...)."""


class MissingEntry(Exception):
    """A bundle path does not exist."""


def open_root(bundle_dir: Path) -> int:
    """Open the bundle directory itself (a symlink to a bundle is fine: the user named it)."""
    return os.open(bundle_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_in_bundle(root_fd: int, rel: str, root: Path | None = None) -> int:
    """Open ``rel`` under ``root_fd`` for reading, refusing symlinks and non-regular files at every step."""
    parts = rel.split("/")
    current = os.dup(root_fd)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=current)
            except OSError as exc:
                _raise_for(exc, current, part, "/".join(parts[: i + 1]), root)
            os.close(current)
            current = nxt
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=current)
        except OSError as exc:
            _raise_for(exc, current, parts[-1], rel, root)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise UnsafeEntry(kind)
        return fd
    finally:
        os.close(current)


def _raise_for(exc: OSError, dir_fd: int, name: str, rel: str, root: Path | None) -> None:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR) and not _is_symlink(dir_fd, name):
        raise MissingEntry(rel) from None
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) or _is_symlink(dir_fd, name):
        raise UnsafeEntry(symlink_reason(dir_fd, name, rel, root)) from None
    raise UnsafeEntry(f"cannot open: {exc.strerror}") from None


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def symlink_reason(dir_fd: int, name: str, rel: str, root: Path | None) -> str:
    """Describe a symlink found in a bundle without following it."""
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "symlink"
    if root is None:
        return "symlink"
    resolved = os.path.normpath(os.path.join(root, os.path.dirname(rel), target))
    inside = resolved == str(root) or resolved.startswith(str(root).rstrip("/") + "/")
    return "symlink inside the bundle (bundles hold regular files only)" if inside else "symlink leaving the bundle"


def hash_fd(fd: int, limit: int | None = None) -> tuple[str, int]:
    """SHA-256 and size of an open file, read once in 1 MiB chunks; stop after ``limit`` + 1 bytes."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    size = 0
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):
        pass
    while True:
        n = os.readv(fd, [buffer])
        if n == 0:
            break
        digest.update(view[:n])  # hashlib releases the GIL for large buffers: threads scale
        size += n
        if limit is not None and size > limit:
            break
    return digest.hexdigest(), size


def fsync_path(path: Path, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree_dirs(root: Path) -> None:
    """fsync every directory under ``root`` (children first), then ``root``."""
    for dirpath, _dirnames, _files in os.walk(root, topdown=False):
        fsync_path(Path(dirpath), directory=True)


def remove_tree(path: Path) -> None:
    """Remove a file or tree; a missing path is fine."""
    try:
        if path.is_dir() and not path.is_symlink():
            # Another sweeper may be removing the same tree: vanished entries are not errors.
            shutil.rmtree(path, ignore_errors=True)
            if path.exists():
                shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


# -- owner locks: "is the process that made this staging directory still alive?" ------------------


class OwnerLock:
    """An flock held for the life of a staging directory; freed by the kernel when the process dies."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def create(cls, path: Path) -> OwnerLock | None:
        """Create and lock a new lock file; None if the name is taken or was swept meanwhile."""
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A sweeper may have unlinked the file between open and flock: then it is not ours.
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                raise OSError(errno.ESTALE, "lock file replaced")
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            os.close(fd)
            return None
        return cls(fd, path)

    def release(self, *, unlink: bool = True) -> None:
        if self.fd < 0:
            return
        if unlink:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = -1


def try_claim(lock_path: Path) -> int | None:
    """Lock an existing owner lock without waiting; the fd if its owner is gone, else None."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@dataclass
class Swept:
    path: Path
    bytes: int
    reason: str


def sweep_work_dir(work_dir: Path, name: str | None = None) -> list[Swept]:
    """Remove staging and trash entries in ``work_dir`` whose owner is gone (``name``: only that bundle's)."""
    swept: list[Swept] = []
    try:
        entries = sorted(os.scandir(work_dir), key=lambda e: e.name)
    except OSError:
        return swept
    prefix = STAGING_PREFIX + (f"{name}-" if name else "")
    trash = TRASH_PREFIX + (f"{name}-" if name else "")
    names = {e.name for e in entries}
    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith(trash) and not entry.name.endswith(LOCK_SUFFIX):
            claim = try_claim(Path(entry.path + LOCK_SUFFIX)) if entry.name + LOCK_SUFFIX in names else None
            if entry.name + LOCK_SUFFIX in names and claim is None:
                continue  # being deleted by a live process
            swept.append(Swept(path, tree_bytes(path), "trash"))
            remove_tree(path)
            if claim is not None:
                _drop_claim(claim, Path(entry.path + LOCK_SUFFIX))
        elif entry.name.startswith(prefix) and not entry.name.endswith(LOCK_SUFFIX):
            lock_path = Path(entry.path + LOCK_SUFFIX)
            claim = try_claim(lock_path)
            if claim is None and lock_path.exists():
                continue  # a live writer owns it
            swept.append(Swept(path, tree_bytes(path), "staging leftover"))
            remove_tree(path)
            if claim is not None:
                _drop_claim(claim, lock_path)
        elif entry.name.endswith(LOCK_SUFFIX) and (entry.name.startswith((prefix, trash))):
            if entry.name[: -len(LOCK_SUFFIX)] in names:
                continue
            claim = try_claim(path)
            if claim is not None:
                swept.append(Swept(path, 0, "stale lock"))
                _drop_claim(claim, path)
    return swept


def _drop_claim(fd: int, path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    os.close(fd)


def entry_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, word in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return word
    return "a special file"


def walk_regular(root: Path, limit: int) -> Iterator[tuple[str, str | None]]:
    """Yield (relative path, problem) for every entry below root without following symlinks.

    ``problem`` is None for a regular file. Stops (yielding a problem) after ``limit`` entries.
    """
    count = 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel_dir if rel_dir else root), key=lambda e: e.name)
        except OSError as exc:
            yield rel_dir or ".", f"cannot list: {exc.strerror}"
            continue
        for entry in entries:
            count += 1
            if count > limit:
                yield rel_dir or ".", f"more than {limit} entries in the bundle"
                return
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                parent_fd = os.open(root / rel_dir if rel_dir else root, _DIR_FLAGS)
                try:
                    yield rel, symlink_reason(parent_fd, entry.name, rel, root)
                finally:
                    os.close(parent_fd)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(rel)
            elif entry.is_file(follow_symlinks=False):
                yield rel, None
            else:
                yield rel, "not a regular file"
