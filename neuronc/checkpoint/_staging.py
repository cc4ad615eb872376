"""Where a split is written: free space first, a hidden staging directory, all or nothing.

``Staging`` checks that the output fits (its size is known before the first byte is written), builds
it in a hidden sibling of ``out_dir`` (``.NAME.XXXX.partial``) and renames that into place when the
caller publishes it. On any failure it removes the staging directory and the parent directories it
created, so ``out_dir`` is as it was (absent, or an empty directory), and turns an OSError into one
error line: DiskFullError (exit 5) naming ``out_dir`` and the space needed for ENOSPC/EDQUOT,
InvalidInputError (exit 2) where ``out_dir`` cannot be written (permissions, a read-only file
system), EnvironmentIncompatibleError (exit 5) for anything else (EIO).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from neuronc.errors import (
    DiskFullError,
    EnvironmentIncompatibleError,
    InvalidInputError,
    NeuroncError,
    is_disk_full,
    safe_text,
)
from neuronc.fsutil import check_free_space, disk_full_error, fsync_dir

# File systems allocate whole blocks: each file's size is rounded up to this for the free-space check.
BLOCK_BYTES = 4096

# OSError numbers that mean "this --out cannot be written" (a user's choice) rather than a broken host.
_BAD_OUT = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG})


def on_disk(sizes: list[int]) -> int:
    """Bytes that files of these sizes take on disk, whole blocks each."""
    return sum(-(-size // BLOCK_BYTES) * BLOCK_BYTES for size in sizes)


def refuse_nonempty(out_dir: Path) -> None:
    """InvalidInputError unless ``out_dir`` is absent or an empty directory (not a link to one)."""
    if os.path.lexists(out_dir) and (out_dir.is_symlink() or not out_dir.is_dir() or any(out_dir.iterdir())):
        msg = f"{safe_text(out_dir)}: already exists and is not an empty directory"
        raise InvalidInputError(msg, hint="remove it or choose another --out")


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

    def __enter__(self) -> Staging:
        refuse_nonempty(self.out_dir)
        try:
            check_free_space(self.out_dir, self.needed, what=self.what)
        except DiskFullError as exc:
            exc.message = safe_text(exc.message, limit=1000)  # the path may hold any bytes
            raise
        probe = self.out_dir.absolute().parent
        while not os.path.lexists(probe) and probe != probe.parent:
            self._created.append(probe)  # deepest first
            probe = probe.parent
        try:
            self.out_dir.parent.mkdir(parents=True, exist_ok=True)
            prefix = f".{self.out_dir.name}."
            self.path = Path(tempfile.mkdtemp(prefix=prefix, suffix=".partial", dir=self.out_dir.parent))
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def publish(self) -> None:
        """Make the staging directory durable and rename it to ``out_dir`` (replacing an empty one)."""
        if self.durable:
            fsync_dir(self.path)
        os.replace(self.path, self.out_dir)
        self._published = True
        if self.durable:
            fsync_dir(self.out_dir.parent)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._published or exc is None:
            return
        if self.path != self.out_dir:
            shutil.rmtree(self.path, ignore_errors=True)
        for directory in self._created:  # only those this split made, and only while empty
            try:
                directory.rmdir()
            except OSError:
                break  # not empty (someone else wrote there meanwhile) or gone: leave it and its parents
        if isinstance(exc, OSError):
            raise self._error(exc) from None

    def _error(self, exc: OSError) -> NeuroncError:
        shown, reason = safe_text(self.out_dir), exc.strerror or str(exc)
        if is_disk_full(exc):
            return disk_full_error(shown, self.needed, exc)
        if exc.errno in _BAD_OUT:
            return InvalidInputError(f"{shown}: cannot write the split: {reason}", hint="choose another --out")
        return EnvironmentIncompatibleError(f"{shown}: the split failed writing its output: {reason}")
