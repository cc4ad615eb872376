"""A file entering a bundle: hashed while it is written."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

from neuronc.fsutil import disk_full_as_error

if TYPE_CHECKING:
    from neuronc.bundle._writer import BundleWriter


class HashingFile:
    """A binary file in staging that computes its SHA-256 while it is written."""

    def __init__(self, writer: BundleWriter, rel: str, role: str, path: Path) -> None:
        self._writer = writer
        self.rel = rel
        self.role = role
        self.name = str(path)
        self._file: BinaryIO = path.open("xb")
        self._digest = hashlib.sha256()
        self._size = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._digest.update(data)
        self._size += len(data) if not isinstance(data, memoryview) else data.nbytes
        with disk_full_as_error(self.name, self._writer.expected_bytes):
            return self._file.write(data)

    def writelines(self, lines: Sequence[bytes]) -> None:
        for line in lines:
            self.write(line)

    def tell(self) -> int:
        return self._size

    def fileno(self) -> int:
        return self._file.fileno()

    def flush(self) -> None:
        self._file.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False  # seeking back would invalidate the running hash

    def close(self) -> None:
        """Flush, fsync and record the file in the bundle."""
        if self.closed:
            return
        with disk_full_as_error(self.name, self._writer.expected_bytes):
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self.closed = True
        self._writer._record(self.rel, self.role, self._size, self._digest.hexdigest())

    def discard(self) -> None:
        """Close and delete a partial file (used when the producer failed)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):  # closing flushes, and the disk may be full
                self._file.close()
            Path(self.name).unlink(missing_ok=True)

    def __enter__(self) -> HashingFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


__all__ = ["HashingFile"]
