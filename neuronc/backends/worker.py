"""The one way backends run work in a child Python process: ``python -m <module> <args>``.

Inductor compiles each graph in its own process (several in parallel); the Neuron backends run the
SDK in an isolated process per build. Both need the same things, done once here: the child imports
this neuronc (even from a source tree that was never installed), its stdout and stderr go to a log
file, it never reads our stdin, it is killed if we are interrupted, and a group of running workers
can be stopped together when one of them fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from neuronc.resources import PoolCancelled, WorkPool

# The directory that holds the ``neuronc`` package.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def worker_env(base: Mapping[str, str], updates: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` + ``updates``, with this neuronc first on PYTHONPATH and unbuffered output."""
    env = {**base, **(updates or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_command(module: str, args: Sequence[str], python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", module, *args]


@dataclass(frozen=True)
class WorkerExit:
    """How a worker ended: its exit status and how long it ran."""

    returncode: int
    seconds: float


# How often a running worker is checked for exit (os.wait4 has no timeout to block with).
_REAP_INTERVAL = 0.05


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    """The worker's exit code if it has ended (reaped here with its own rusage: its peak memory is
    recorded for the stage that ran it), else None."""
    from neuronc.resources import record_worker_peak

    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    record_worker_peak(usage.ru_maxrss)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


class Workers:
    """Runs worker processes and remembers the live ones, so that they can be stopped together.

    With a ``pool`` (the run's, shared by the builds of a matrix) each worker holds one of its slots,
    reserving ``memory_bytes``, while it runs; a cancelled pool stops the worker (``PoolCancelled``).
    """

    def __init__(
        self, pool: WorkPool | None = None, memory_bytes: int | None = None, *, own_group: bool = False
    ) -> None:
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._pool = pool
        self._memory_bytes = memory_bytes
        # A worker that forks children leads a process group of its own, which is stopped as a
        # whole (a terminal's Ctrl-C then reaches neuronc only, which stops the group). Otherwise the
        # worker shares neuronc's group, and Ctrl-C reaches it directly.
        self._own_group = own_group

    def run(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log: BinaryIO,
        poll: Callable[[], None] | None = None,
        poll_seconds: float = 0.5,
        slots: int = 1,
    ) -> WorkerExit:
        """Run ``command`` to completion; ``poll`` is called every ``poll_seconds`` while it runs.

        The worker holds ``slots`` of the pool (it runs that many children; ``slots_for`` says how
        many fit). If this thread is interrupted (Ctrl-C, or an exception from ``poll``) the worker
        (with ``own_group``, its whole process group) is killed before the exception propagates: no
        compiler is left running behind neuronc.
        """
        if self._pool is None:
            return self._run(command, env=env, cwd=cwd, log=log, poll=poll, poll_seconds=poll_seconds)
        with self._pool.slot(self._memory_bytes, count=slots):
            return self._run(command, env=env, cwd=cwd, log=log, poll=poll, poll_seconds=poll_seconds)

    def slots_for(self, wanted: int) -> int:
        """How many slots one worker may hold to run ``wanted`` children at once (pool and memory)."""
        return self._pool.capacity(self._memory_bytes, wanted) if self._pool is not None else max(1, wanted)

    def _run(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log: BinaryIO,
        poll: Callable[[], None] | None,
        poll_seconds: float,
    ) -> WorkerExit:
        started = time.monotonic()
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=self._own_group,
        )
        with self._lock:
            self._procs.add(proc)
        try:
            next_poll = time.monotonic() + poll_seconds
            while True:
                code = _reap(proc)
                if poll is not None and (code is not None or time.monotonic() >= next_poll):
                    poll()
                    next_poll = time.monotonic() + poll_seconds
                if code is not None:
                    break
                if self._pool is not None and self._pool.cancelled:
                    raise PoolCancelled
                time.sleep(_REAP_INTERVAL)
        except BaseException:
            self._signal(proc, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            with self._lock:
                self._procs.discard(proc)
        return WorkerExit(code, time.monotonic() - started)

    def terminate_all(self) -> None:
        """Ask every running worker to stop (their ``run`` calls then return)."""
        with self._lock:
            for proc in self._procs:
                self._signal(proc, signal.SIGTERM)

    def _signal(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        """Signal a worker, or with ``own_group`` its process group (its children and compilers)."""
        if proc.returncode is not None:  # reaped: its pid (and group id) may belong to another now
            return
        with contextlib.suppress(OSError):
            if self._own_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
