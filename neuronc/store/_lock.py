"""Per-key build locks: an exclusive flock on a file per key, re-entrant within one thread.

flock locks belong to an open file description, so a second ``open`` + ``flock`` of the same file in
the same process would wait for itself forever (a remote store's ``lookup`` inside the pipeline's
``lock`` downloads under the same key lock). Holders in one process share one descriptor: the
owning thread may take the lock again, other threads of the process wait on a thread lock first.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path


@dataclass
class _Held:
    thread_lock: threading.RLock = field(default_factory=threading.RLock)
    fd: int = -1
    depth: int = 0


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


def _forget_after_fork() -> None:
    # A forked child holds none of its parent's locks (it must take them itself).
    global _HELD_GUARD
    _HELD.clear()
    _HELD_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _held(path: Path) -> _Held:
    with _HELD_GUARD:
        return _HELD.setdefault(str(path), _Held())


class KeyLock:
    """An exclusive per-key lock (flock); the kernel frees it if the holder dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._state = _held(path)
        self._mine = False

    def acquire(self, *, timeout: float | None = None, on_wait: Callable[[str], None] | None = None) -> None:
        """Block until the lock is ours (or raise TimeoutError after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._state.thread_lock.acquire(timeout=-1 if timeout is None else timeout):
            msg = f"timed out waiting for {self.path}"
            raise TimeoutError(msg)
        try:
            if self._state.depth == 0:
                self._state.fd = self._flock(deadline, on_wait)
            self._state.depth += 1
            self._mine = True
        except BaseException:
            self._state.thread_lock.release()
            raise

    def _flock(self, deadline: float | None, on_wait: Callable[[str], None] | None) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        delay = 0.005
        told = False
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    msg = f"timed out waiting for {self.path}"
                    raise TimeoutError(msg) from None
                if not told and on_wait is not None:
                    told = True
                    on_wait(self.holder() or "another process")
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            # gc may have unlinked the file we opened; then our lock guards nothing: start over.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} since {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode())
            return fd

    def holder(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def release(self) -> None:
        if not self._mine:
            return
        self._mine = False
        self._state.depth -= 1
        if self._state.depth == 0:
            os.close(self._state.fd)  # closing drops the flock; the file stays for the next builder
            self._state.fd = -1
        self._state.thread_lock.release()

    @property
    def held(self) -> bool:
        return self._mine


__all__ = ["KeyLock"]
