"""How progress looks: Rich bars on a terminal, and lines with a heartbeat in a log.

``neuronc._output.Output.progress`` picks one; library code only sees the ``ProgressSink``
protocol (``neuronc.progress``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from neuronc.progress import ProgressTask

if TYPE_CHECKING:
    from rich.progress import Progress


class _Lines(Protocol):
    """Where a line sink writes (``Output.info``)."""

    def info(self, text: str) -> None: ...


def amount_column() -> Any:
    """Sizes and throughput for byte tasks, "done/total" for counted ones, nothing for open-ended ones."""
    from rich.filesize import decimal
    from rich.progress import ProgressColumn
    from rich.text import Text

    class AmountColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text("")
            if task.fields.get("unit") == "bytes":
                speed = f" {decimal(int(task.speed))}/s" if task.speed else ""
                return Text(f"{decimal(int(task.completed))}/{decimal(int(task.total))}{speed}")
            return Text(f"{int(task.completed)}/{int(task.total)}")

    return AmountColumn()


class RichTask:
    def __init__(self, bars: Progress, task_id: Any, unit: str) -> None:
        self._bars = bars
        self._id = task_id
        self._unit = unit

    def advance(self, amount: float = 1) -> None:
        self._bars.advance(self._id, amount)

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        kwargs: dict[str, Any] = {}
        if completed is not None:
            kwargs["completed"] = completed
        if description is not None:
            kwargs["description"] = description
        self._bars.update(self._id, **kwargs)

    def done(self, status: str | None = None) -> None:
        task = self._bars.tasks[[t.id for t in self._bars.tasks].index(self._id)]
        description = task.description if status is None else f"{task.description} [dim]{status}[/dim]"
        total = task.total if task.total is not None else task.completed or 1
        self._bars.update(self._id, completed=total, total=total, description=description)


class RichSink:
    def __init__(self, bars: Progress) -> None:
        self._bars = bars

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        task_id = self._bars.add_task(description, total=total, unit=unit)
        return RichTask(self._bars, task_id, unit)


HEARTBEAT_ENV = "NEURONC_HEARTBEAT_SECONDS"


def heartbeat_seconds() -> float:
    """How often a non-terminal log says what is still running ($NEURONC_HEARTBEAT_SECONDS, default 30)."""
    try:
        value = float(os.environ.get(HEARTBEAT_ENV, "30"))
    except ValueError:
        return 30.0
    return value if value > 0 else 30.0


def _elapsed(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


class LineTask:
    """Non-terminal progress: one line when a task starts, one when it ends (CI logs)."""

    def __init__(self, sink: LineSink, description: str, total: float | None) -> None:
        import time

        self._sink = sink
        self.description = description
        self.total = total
        self.completed = 0.0
        self.started = time.monotonic()

    def advance(self, amount: float = 1) -> None:
        self.completed += amount

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        if description is not None:
            self.description = description
        if completed is not None:
            self.completed = completed

    def done(self, status: str | None = None) -> None:
        import time

        self._sink.finished(self)
        took = _elapsed(time.monotonic() - self.started)
        suffix = f" ({status}, {took})" if status else f" ({took})"
        self._sink.output.info(f"done: {self.description}{suffix}")


class LineSink:
    """Line progress for logs, with a heartbeat: every ``interval`` seconds each task still open says
    so with its elapsed time, so a long stage is not minutes of silence in a CI log.

    Hand-written (a daemon thread and a condition) because Rich's progress only animates terminals.
    """

    def __init__(self, output: _Lines, interval: float) -> None:
        import threading

        self.output = output
        self._interval = interval
        self._open: list[LineTask] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        import threading

        self.output.info(f"start: {description}")
        task = LineTask(self, description, total)
        with self._wake:
            self._open.append(task)
            if self._thread is None:
                # Kept only once started: a Ctrl-C or SIGTERM between the two would leave close()
                # joining a thread never started (RuntimeError, exit 1 instead of 130).
                thread = threading.Thread(target=self._beat, name="neuronc-heartbeat", daemon=True)
                thread.start()
                self._thread = thread
        return task

    def finished(self, task: LineTask) -> None:
        with self._wake:
            if task in self._open:
                self._open.remove(task)

    def _beat(self) -> None:
        import time

        with self._wake:
            while not self._closed:
                self._wake.wait(self._interval)
                if self._closed:
                    return
                now = time.monotonic()
                for task in list(self._open):
                    if now - task.started < self._interval:
                        continue
                    share = f", {task.completed:.0f}/{task.total:.0f}" if task.total else ""
                    self.output.info(f"running: {task.description} ({_elapsed(now - task.started)}{share})")

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=1)


__all__ = ["HEARTBEAT_ENV", "LineSink", "RichSink", "amount_column", "heartbeat_seconds"]
