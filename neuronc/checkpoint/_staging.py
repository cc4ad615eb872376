"""Where a split is written: free space first, a hidden staging directory, all or nothing.

``Staging`` checks that the output fits (its size is known before the first byte is written), builds
it in a hidden sibling of ``out_dir`` (``.NAME.XXXX.partial``) and renames that into place when the
caller publishes it. The process holds an flock on the staging directory for its life (the kernel
frees it when the process dies, however it dies), and a marker file inside says the directory is a
split's: a later split into the same ``out_dir`` removes every marked staging directory nobody
holds, which is what a SIGKILLed (or power-cut) split leaves.
On any failure it removes the staging directory and the parent directories it
created, so ``out_dir`` is as it was (absent, or an empty directory), and turns an OSError into one
error line as every write to a path a user named does (``fsutil.output_error``): DiskFullError
(exit 5) naming ``out_dir`` and the space needed for ENOSPC/EDQUOT, InvalidInputError (exit 2)
where ``out_dir`` cannot be written (permissions, a read-only file system), EnvironmentIncompatibleError
(exit 5) for anything else (EIO).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from neuronc.errors import InvalidInputError, safe_text
from neuronc.fsutil import check_free_space, fsync_dir, output_error

# Inside each staging directory while a split writes it: written after the owner's flock is taken, so
# a sweeper that finds it and can take the flock knows the owner is gone. Removed before publishing.
MARKER = ".neuronc-split-staging"
STAGING_SUFFIX = ".partial"

# File systems allocate whole blocks: each file's size is rounded up to this for the free-space check.
BLOCK_BYTES = 4096


def on_disk(sizes: list[int]) -> int:
    """Bytes that files of these sizes take on disk, whole blocks each."""
    return sum(-(-size // BLOCK_BYTES) * BLOCK_BYTES for size in sizes)


def refuse_nonempty(out_dir: Path) -> None:
    """InvalidInputError unless ``out_dir`` is absent or an empty directory (not a link to one)."""
    if os.path.lexists(out_dir) and (out_dir.is_symlink() or not out_dir.is_dir() or any(out_dir.iterdir())):
        msg = f"{safe_text(out_dir)}: already exists and is not an empty directory"
        raise InvalidInputError(msg, hint="remove it or choose another --out")


def sweep_leftovers(out_dir: Path) -> list[Path]:
    """Remove the staging directories earlier splits into ``out_dir`` left when they were killed.

    Only hidden siblings named as ``Staging`` names them, holding its marker, whose owner's flock
    is free (the owner is gone); a live split's directory is never touched. Returns what was removed.
    """
    parent = out_dir.absolute().parent
    prefix = f".{out_dir.name}."
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix) and e.name.endswith(STAGING_SUFFIX)]
    except OSError:
        return []
    removed = []
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # not a directory, a link, or gone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.lexists(os.path.join(entry.path, MARKER)):
                continue  # not a split's, or its owner has not marked it yet
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
        except OSError:
            continue  # a live split holds it
        finally:
            os.close(fd)
    return removed


class Staging:
    """``with Staging(out_dir, needed, what=...) as staging:`` write into ``staging.path``, then ``publish()``."""

    def __init__(self, out_dir: Path, needed: int, *, what: str, durable: bool = True) -> None:
        self.out_dir = out_dir
        self.needed = needed
        self.what = what
        self.durable = durable
        self.path = out_dir  # the staging directory once entered
        self._created: list[Path] = []
        self._published = False
        self._owner = -1  # the staging directory's fd, flocked while this process writes it
        self.swept: list[Path] = []

    def __enter__(self) -> Staging:
        refuse_nonempty(self.out_dir)
        self.swept = sweep_leftovers(self.out_dir)  # before the free-space check: their space comes back
        check_free_space(self.out_dir, self.needed, what=self.what)
        probe = self.out_dir.absolute().parent
        while not os.path.lexists(probe) and probe != probe.parent:
            self._created.append(probe)  # deepest first
            probe = probe.parent
        try:
            self.out_dir.parent.mkdir(parents=True, exist_ok=True)
            prefix = f".{self.out_dir.name}."
            self.path = Path(tempfile.mkdtemp(prefix=prefix, suffix=STAGING_SUFFIX, dir=self.out_dir.parent))
            self._owner = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(self._owner, fcntl.LOCK_EX)  # waits only for a sweeper looking at it (unmarked: it leaves it)
            (self.path / MARKER).touch()
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def publish(self) -> None:
        """Make the staging directory durable and rename it to ``out_dir`` (replacing an empty one)."""
        (self.path / MARKER).unlink()
        if self.durable:
            fsync_dir(self.path)
        os.replace(self.path, self.out_dir)
        self._published = True
        self._release()
        if self.durable:
            fsync_dir(self.out_dir.parent)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._published or exc is None:
            self._release()
            return
        if self.path != self.out_dir:
            shutil.rmtree(self.path, ignore_errors=True)
        self._release()
        for directory in self._created:  # only those this split made, and only while empty
            try:
                directory.rmdir()
            except OSError:
                break  # not empty (someone else wrote there meanwhile) or gone: leave it and its parents
        if isinstance(exc, OSError):
            raise output_error(
                self.out_dir, exc, what="the split", needed=self.needed, hint="choose another --out"
            ) from None

    def _release(self) -> None:
        if self._owner >= 0:
            os.close(self._owner)
            self._owner = -1
