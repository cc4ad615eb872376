"""What this process may use and has used: CPUs for parallel work, peak resident memory.

One place for both, so that every report (compile stages, split, bundle writer) measures memory the
same way and every parallel stage agrees on how many cores it may use.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
# getrusage reports ru_maxrss in KiB on Linux and in bytes on macOS.
_RUSAGE_SCALE = 1 if sys.platform == "darwin" else 1024


def available_cpus() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_jobs(cap: int | None = None) -> int:
    """Parallel workers by default: the available cores, at most ``cap``."""
    cores = available_cpus()
    return min(cores, cap) if cap else cores


def default_compile_jobs() -> int:
    """Graphs compiled at once by default: one or two more than the cores, as ninja chooses its
    ``-j`` (``GuessParallelism`` in ninja's src/ninja.cc: 2 on one core, 3 on two, cores + 2 beyond).

    A graph's compile runs one thread at a time; with exactly as many at once as cores, a core idles
    while the worker imports and exports and whenever fewer graphs are left than cores. Measured on
    the demo's first compile (three graphs, two cores): 0.78x the wall of two at once, the same CPU.
    The pool's memory budget still bounds how many run (``WorkPool``)."""
    cores = available_cpus()
    return cores + 1 if cores <= 2 else cores + 2


def available_memory_bytes() -> int | None:
    """Memory the OS could give new processes now (Linux ``MemAvailable``; physical memory elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class PoolCancelled(KeyboardInterrupt):
    """The run was interrupted: a worker waiting for (or holding) a pool slot stops."""


class WorkPool:
    """Slots for the worker processes of one run, shared by all its builds.

    At most ``slots`` workers run at once, and the memory they reserve (the pre-flight's estimate
    for each) stays within ``memory_bytes``. Waiters are admitted first come, first served, so a
    large reservation is not starved by small ones; one reservation larger than the whole budget
    runs alone rather than never. ``cancel`` wakes every waiter with ``PoolCancelled`` and tells
    running workers (``cancelled``) to stop. The standard library's executors bound workers but
    not memory, hence this small scheduler.
    """

    def __init__(self, slots: int, memory_bytes: int | None = None) -> None:
        self.slots = max(1, slots)
        self.memory_bytes = memory_bytes
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self._running = 0
        self._reserved = 0
        self._cancelled = threading.Event()
        # Most workers that ran at once, and most memory reserved at once (what tests and
        # benchmarks read).
        self.peak_running = 0
        self.peak_reserved = 0

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        with self._cond:
            self._cancelled.set()
            self._cond.notify_all()

    def _fits(self, need: int, count: int = 1) -> bool:
        if self._running + count > self.slots and self._running > 0:
            return False
        if self._running == 0 or self.memory_bytes is None:
            return True
        return self._reserved + need <= self.memory_bytes

    def capacity(self, memory_bytes: int | None, wanted: int) -> int:
        """How many slots of ``memory_bytes`` each one holder may take at once: at most ``wanted``
        and the pool's slots, within the memory budget (at least one)."""
        count = min(max(1, wanted), self.slots)
        if self.memory_bytes is not None and memory_bytes:
            count = min(count, self.memory_bytes // memory_bytes)
        return max(1, count)

    @contextlib.contextmanager
    def slot(self, memory_bytes: int | None = None, count: int = 1) -> Iterator[None]:
        """Hold ``count`` worker slots, each with ``memory_bytes`` reserved, while the block runs (one
        process that runs ``count`` children; ``capacity`` says how many fit)."""
        count = max(1, count)
        need = max(0, memory_bytes or 0) * count
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                while not (self._cancelled.is_set() or (self._queue[0] is ticket and self._fits(need, count))):
                    self._cond.wait()
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
            if self._cancelled.is_set():
                raise PoolCancelled
            self._running += count
            self._reserved += need
            self.peak_running = max(self.peak_running, self._running)
            self.peak_reserved = max(self.peak_reserved, self._reserved)
        try:
            yield
        finally:
            with self._cond:
                self._running -= count
                self._reserved -= need
                self._cond.notify_all()


def reset_peak_rss() -> None:
    """Start a new peak-RSS measurement (Linux >= 4.0: writing 5 to clear_refs resets VmHWM)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


def peak_rss_bytes() -> int | None:
    """This process's peak resident set since start or the last ``reset_peak_rss`` (None if unknown)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * _RUSAGE_SCALE


# Peak resident set of each worker process as it ended (recorded by the worker runner from
# os.wait4's rusage, which is per child): a stage reads the peaks of the workers that ended
# during it. RUSAGE_CHILDREN cannot say this: it is the maximum over the process's whole life.
_worker_peaks: list[int] = []
_worker_peaks_lock = threading.Lock()


def record_worker_peak(rusage_maxrss: int) -> None:
    """Record an ended worker's peak (``ru_maxrss`` as the OS reports it)."""
    with _worker_peaks_lock:
        _worker_peaks.append(int(rusage_maxrss) * _RUSAGE_SCALE)


def worker_peaks_mark() -> int:
    """A mark to pass to ``worker_peak_since`` (the number of worker peaks recorded so far)."""
    with _worker_peaks_lock:
        return len(_worker_peaks)


def worker_peak_since(mark: int) -> int | None:
    """The largest peak of the workers that ended since ``mark`` (None if none did)."""
    with _worker_peaks_lock:
        recent = _worker_peaks[mark:]
    return max(recent) if recent else None


def children_peak_rss_bytes() -> int | None:
    """The largest peak resident set of any waited-for child process (None if none or unknown)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    value = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return value * _RUSAGE_SCALE if value else None


__all__ = [
    "PoolCancelled",
    "WorkPool",
    "available_cpus",
    "available_memory_bytes",
    "children_peak_rss_bytes",
    "default_compile_jobs",
    "default_jobs",
    "peak_rss_bytes",
    "record_worker_peak",
    "reset_peak_rss",
    "worker_peak_since",
    "worker_peaks_mark",
]
