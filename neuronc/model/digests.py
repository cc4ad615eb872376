"""The SHA-256 of a checkpoint's files, computed once per file version and kept by file identity.

A weights key covers the weights' content (``neuronc.keys``): every weight file's SHA-256. Reading
every byte of a multi-GB checkpoint on every ``plan`` or ``compile`` would be the slowest thing
neuronc does, so a digest is kept in a small index under neuronc's cache directory, keyed by the
file's identity: device, inode, size, mtime_ns and ctime_ns (what git's index and build systems
compare to avoid rehashing). A file rewritten in place, or replaced by another, has another
identity and is hashed again; an unchanged one costs a ``stat``. ``ctime`` cannot be set by a
user (``touch -d`` sets ``mtime`` only), so a rewrite that restores the old ``mtime`` still misses.

In the Hugging Face cache a large file is a symlink to a blob named by its SHA-256 (git LFS): that
name is the digest, and the file is never read.

Files are hashed in parallel threads: ``hashlib`` releases the GIL while it hashes a large buffer,
so several files hash at the machine's SHA-256 rate, one core each.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Large reads keep the per-call overhead negligible; hashlib releases the GIL while it hashes them.
_CHUNK = 8 << 20
INDEX_DIR_NAME = "digests"


def digest_index_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where digests are kept: ``<neuronc cache>/digests/``, one small file per file version."""
    from neuronc.locations import user_cache_dir

    return user_cache_dir(environ) / INDEX_DIR_NAME


def lfs_blob_digest(path: Path) -> str | None:
    """The SHA-256 a Hugging Face cache symlink's blob name says (None: not such a symlink)."""
    if not path.is_symlink():
        return None
    blob = Path(os.readlink(path)).name
    return blob if _SHA256_RE.match(blob) else None


def file_identity(st: os.stat_result) -> str:
    """The identity of one version of a file: device, inode, size, mtime_ns, ctime_ns."""
    return f"{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns}-{st.st_ctime_ns}"


def sha256_file(path: Path) -> str:
    """Every byte of ``path`` hashed (one read buffer reused: no allocation per chunk)."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


class DigestIndex:
    """Digests by file identity under ``root`` (``<identity>`` files holding 64 hex digits).

    One file per entry: concurrent builds never rewrite a shared index, a torn write is at worst
    one entry that reads back invalid (and is hashed again), and nothing needs merging.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else digest_index_dir()

    def _entry(self, identity: str) -> Path:
        return self.root / identity[:2] / identity

    def get(self, st: os.stat_result) -> str | None:
        try:
            text = self._entry(file_identity(st)).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if _SHA256_RE.match(text) else None

    def put(self, st: os.stat_result, sha256: str) -> None:
        """Keep a digest; best effort (a read-only or full cache only costs a rehash next time)."""
        from neuronc.fsutil import atomic_write_text

        entry = self._entry(file_identity(st))
        with contextlib.suppress(OSError):
            entry.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(entry, sha256 + "\n", fsync=False)


def file_digests(paths: Sequence[Path], *, jobs: int | None = None, index: DigestIndex | None = None) -> list[str]:
    """The SHA-256 of each of ``paths``, in order: from the HF cache's blob names, the index, or read.

    Files not known yet are hashed in ``jobs`` threads (default: the machine's cores, at most one
    per file) and their digests kept. A file that changes while it is read is hashed again.
    """
    index = index if index is not None else DigestIndex()
    found: list[str | None] = []
    todo: list[int] = []
    for i, path in enumerate(paths):
        digest = lfs_blob_digest(path)
        if digest is None:
            digest = index.get(path.stat())
        found.append(digest)
        if digest is None:
            todo.append(i)
    if todo:
        workers = max(1, min(len(todo), jobs or os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256") as pool:
            for i, digest in zip(todo, pool.map(lambda i: _hash_and_keep(paths[i], index), todo), strict=True):
                found[i] = digest
    return [d for d in found if d is not None]


def _hash_and_keep(path: Path, index: DigestIndex) -> str:
    for _ in range(3):
        before = path.stat()
        digest = sha256_file(path)
        after = path.stat()
        if file_identity(before) == file_identity(after):
            index.put(after, digest)
            return digest
    return digest  # still changing: this read's digest, not kept


__all__ = ["DigestIndex", "digest_index_dir", "file_digests", "file_identity", "lfs_blob_digest", "sha256_file"]
