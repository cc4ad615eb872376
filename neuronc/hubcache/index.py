"""The persistent lookup index: parsed registry entries kept on disk between lookups.

One file per source (a snapshot directory, or a Hub repository at an endpoint) under
``<neuronc cache>/hf-neuron-cache/index/``. What is in it is up to the source (``snapshot.py``
keys records by path, size and mtime; ``hub.py`` by path and git blob id); this module only keeps
the file honest:

- **Format.** ``MAGIC``, a BLAKE2b-256 digest of the body, then the body: ``marshal`` of plain
  data (tuples, lists, dicts, strings, numbers) headed by a stamp (index format, neuronc version,
  Python version, what is indexed). A warm lookup loads 10,000 entries' summaries in a few
  milliseconds this way; JSON takes several times longer, sqlite3 more again to read every row.
  marshal is safe here for the reasons Python trusts it with ``__pycache__``: the file lives in the
  user's own cache directory and only neuronc writes it; beyond that, a body is never unmarshalled
  unless its digest matches (no torn or foreign bytes reach ``marshal.loads``), marshal builds plain
  values and never runs code (unlike pickle), and anything that does not validate (digest, stamp,
  shape) is ignored and rebuilt from the registry files.
- **Writes** are atomic (``fsutil.atomic_write_bytes``: a temporary file and a rename), so a
  concurrent reader sees the old index or the new one, never half of one. Writers take a
  ``filelock`` without waiting: when another process holds it, this one skips saving (its result
  is the same). A write that fails (read-only or full disk) is skipped too: the index is a cache.
- **Never trusted for what it says about files**: sources re-check every file's identity on each
  run and re-read what changed; deleting the directory is always safe.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
import time
from pathlib import Path
from typing import Any

from neuronc import __version__
from neuronc.errors import DiskFullError
from neuronc.fsutil import atomic_write_bytes
from neuronc.locations import user_cache_dir

# Bump when a record, a row or a payload changes meaning (parse rules, arch_key, layout of tuples).
INDEX_FORMAT = 1
MAGIC = b"NCHUBIDX"
_DIGEST_SIZE = 32
_PY = f"py{sys.version_info[0]}{sys.version_info[1]}"


def index_dir() -> Path:
    return user_cache_dir() / "hf-neuron-cache" / "index"


class IndexFile:
    """One index file: load what validates, save atomically without ever waiting on another process."""

    def __init__(self, kind: str, identity: str, directory: Path | None = None) -> None:
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:24]
        self.path = (directory or index_dir()) / f"{kind}-{digest}-{_PY}.bin"
        self._stamp = (INDEX_FORMAT, __version__, _PY, marshal.version, kind, identity)
        self.found_invalid = False  # a file was there and did not validate

    def load(self) -> Any | None:
        """The payload saved last, or None when there is none or it does not validate."""
        try:
            with open(self.path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError:
            self.found_invalid = True
            return None
        head = len(MAGIC) + _DIGEST_SIZE
        body = blob[head:]
        if blob[: len(MAGIC)] != MAGIC or _digest(body) != blob[len(MAGIC) : head]:
            self.found_invalid = True
            return None
        try:
            stamp, payload = marshal.loads(body)
        except (ValueError, EOFError, TypeError):  # written by a Python whose marshal this one cannot read
            self.found_invalid = True
            return None
        if stamp != self._stamp:
            self.found_invalid = True
            return None
        return payload

    def save(self, payload: Any) -> bool:
        """Write the payload; False when another process is writing it or the cache cannot be written."""
        from filelock import FileLock, Timeout

        try:
            body = marshal.dumps((self._stamp, payload))
        except ValueError:  # a value marshal cannot store: a bug, but never worth failing a lookup for
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(f"{self.path}.lock", timeout=0):
                # fsync is not needed: a file cut short by a crash fails its digest and is rebuilt.
                atomic_write_bytes(self.path, MAGIC + _digest(body) + body, fsync=False)
        except (Timeout, OSError, DiskFullError):
            return False
        return True


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest()


def racy_before() -> int:
    """Times (ns) from which a file's mtime cannot tell two writes apart yet.

    File systems stamp mtimes with a coarse clock (a kernel tick; 1 or 2 s on some), so a file
    written twice within one tick keeps its mtime (and maybe its size). What changed within the last
    two seconds is recorded as unknown and checked again by the next lookup (git's "racily clean"
    rule, Documentation/technical/racy-git.txt).
    """
    return time.time_ns() - 2_000_000_000


def read_limited(path: str, limit: int) -> bytes:
    """A registry file's bytes: regular files only (a FIFO is never opened blocking), at most ``limit`` bytes.

    Raises OSError, or ValueError with the reason (not a regular file, too large).
    """
    from neuronc.errors import InvalidInputError
    from neuronc.fsutil import read_bytes_limited

    try:
        return read_bytes_limited(path, limit, what="registry file")
    except InvalidInputError as exc:
        raise ValueError(exc.message.removeprefix(f"{path}: ")) from None


__all__ = ["INDEX_FORMAT", "IndexFile", "index_dir", "racy_before", "read_limited"]
