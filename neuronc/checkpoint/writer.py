"""A streaming safetensors writer: header first, from known shapes; then bytes, in order; hashed as written.

The safetensors library cannot do this (``save_file`` wants every tensor in memory). Because
every shape is known before any byte is copied, the header (with every offset) can be written
first and the tensor bytes appended in the same order; the writer checks that each tensor ends
exactly where the header says it does, and (unless told not to) hashes the file as it goes, so
publishing a shard never needs a second read.

A writer that does not hash can also take bytes straight from another file with
``copy_file_range`` (``copy_from``): the kernel moves them, nothing passes through this process.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.checkpoint._safetensors import build_header, pread_exact

# Bytes after which a writer asks the kernel to start writing its file back (and the largest
# single kernel copy). Small windows keep the disk busy while the copy goes on: splitting 2 GB
# into 8 fsynced shards took 0.8-0.9 s with 8 MB windows against 1.2-1.4 s with 32 MB ones, on a
# disk whose O_DIRECT floor for those bytes is about 0.76 s (bench/split.py); 2-4 MB were no better.
FLUSH_BYTES = 8 * 1024 * 1024

# Largest piece a buffered copy (``copy_from`` without ``copy_file_range``) reads at a time.
COPY_BUFFER_BYTES = 4 * 1024 * 1024

# copy_file_range errors that mean "not here" (old kernel, other filesystem, seccomp, odd file
# types): the copy falls back to pread + write. Anything else is a real error and is raised.
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM, errno.EBADF}
if hasattr(errno, "ENOTSUP"):
    _NO_KERNEL_COPY.add(errno.ENOTSUP)


@dataclass(frozen=True)
class WrittenFile:
    """A finished file: its size and SHA-256 (None when the writer did not hash)."""

    path: Path
    bytes: int
    sha256: str | None


class ShardWriter:
    """Write one safetensors file whose tensors (name, dtype, shape) are all known up front."""

    def __init__(
        self,
        path: Path,
        tensors: Sequence[tuple[str, str, tuple[int, ...]]],
        metadata: Mapping[str, str] | None = None,
        *,
        durable: bool = True,
        hash: bool = True,
    ) -> None:
        header, offsets = build_header(tensors, metadata)
        self.path = path
        self._durable = durable
        self.hashing = hash
        self.kernel_copy = hasattr(os, "copy_file_range")  # False once it has failed with a "not here" error
        self._buffer: bytearray | None = None
        self._data_start = len(header)
        self._ends = {name: self._data_start + end for name, (_, end) in offsets.items()}
        self._size = self._data_start + (max((e for _, e in offsets.values()), default=0))
        self._written = 0
        self._flushed = 0
        self._digest = hashlib.sha256() if hash else None
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self.write(header)

    def write(self, data: Any) -> int:
        """Append bytes (any C-contiguous buffer); return how many."""
        view = memoryview(data).cast("B")
        n = len(view)
        if self._digest is not None:
            self._digest.update(view)
        assert self._fd is not None, "write after close"
        while view:
            done = os.write(self._fd, view)
            view = view[done:]
        self._advance(n)
        return n

    def copy_from(self, src_fd: int, offset: int, count: int, *, display: str) -> int:
        """Append ``count`` bytes of the file ``src_fd`` from byte ``offset``; return how many.

        Only for a writer that does not hash. The kernel copies them (``copy_file_range``); where it
        cannot (no such call, another filesystem, an error that means "not supported") or stops
        short, the rest goes through a small buffer with pread + write. A source that ends early is
        a CheckpointError naming ``display``.
        """
        if self._digest is not None:
            raise AssertionError(f"{self.path.name}: copy_from on a hashing writer")
        assert self._fd is not None, "write after close"
        done = 0
        while done < count and self.kernel_copy:
            step = min(count - done, FLUSH_BYTES)
            try:
                n = os.copy_file_range(src_fd, self._fd, step, offset + done)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                self.kernel_copy = False
                break
            if n <= 0:
                break  # end of the source (it shrank?) or nothing copied: let pread say what happened
            done += n
            self._advance(n)
        while done < count:
            if self._buffer is None:
                self._buffer = bytearray(min(COPY_BUFFER_BYTES, count - done))
            view = memoryview(self._buffer)[: min(len(self._buffer), count - done)]
            pread_exact(src_fd, view, offset + done, display=display)
            done += self.write(view)
        return count

    def _advance(self, n: int) -> None:
        assert self._fd is not None
        self._written += n
        if self._durable and self._written - self._flushed >= FLUSH_BYTES:
            # Start writeback of what is written so far (asynchronously; DONTNEED on dirty pages
            # only queues them), so the final fsync waits for a little, not for the whole file.
            os.posix_fadvise(self._fd, self._flushed, self._written - self._flushed, os.POSIX_FADV_DONTNEED)
            self._flushed = self._written

    def end_tensor(self, name: str) -> None:
        """Assert that the bytes written so far end exactly where the header put ``name``'s end."""
        if self._written != self._ends[name]:
            msg = f"{self.path.name}: tensor {name!r} ends at {self._written}, header says {self._ends[name]}"
            raise AssertionError(msg)

    def finish(self) -> WrittenFile:
        """Check the size, fsync (when durable) and close; return the file's size and SHA-256 (if hashed)."""
        if self._written != self._size:
            msg = f"{self.path.name}: wrote {self._written} bytes, header promised {self._size}"
            raise AssertionError(msg)
        assert self._fd is not None
        if self._durable:
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        return WrittenFile(self.path, self._written, self._digest.hexdigest() if self._digest is not None else None)

    def close(self) -> None:
        """Close without finishing (on failure); the caller removes the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
