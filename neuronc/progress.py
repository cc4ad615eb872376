"""Progress reporting that library code can use without knowing who is watching.

Library functions take a ``ProgressSink``; the CLI passes one backed by Rich (on stderr), Python
callers pass nothing and get ``NULL_PROGRESS``.
"""

from __future__ import annotations

from typing import Protocol


class ProgressTask(Protocol):
    """One bar: advance it, rename it, close it."""

    def advance(self, amount: float = 1) -> None: ...

    def update(self, *, completed: float | None = None, description: str | None = None) -> None: ...

    def done(self, status: str | None = None) -> None: ...


class ProgressSink(Protocol):
    """Something that can show tasks. ``unit='bytes'`` shows sizes and throughput."""

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask: ...


class _NullTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        pass

    def done(self, status: str | None = None) -> None:
        pass


class _NullSink:
    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        return _NullTask()


NULL_PROGRESS: ProgressSink = _NullSink()
