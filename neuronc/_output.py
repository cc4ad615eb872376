"""The one output object: Rich for people, JSON for machines.

Data (tables, results, JSON) goes to stdout; messages, warnings, hints and progress go to stderr,
also in ``--json`` mode, so ``neuronc ... --json | jq`` always sees clean JSON. ``NO_COLOR`` is
honoured by Rich itself.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from neuronc.errors import NeuroncError
from neuronc.progress import NULL_PROGRESS, ProgressSink, ProgressTask

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


def to_json_text(data: Any) -> str:
    """Serialise command output: stable key order as given, two-space indent, trailing newline."""
    return json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n"


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    msg = f"cannot serialise {type(value).__name__} to JSON"
    raise TypeError(msg)


class Output:
    """Render results and messages for the current command."""

    def __init__(self) -> None:
        self.json_mode = False
        self._stdout: Console | None = None
        self._stderr: Console | None = None

    def configure(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode

    @property
    def stdout(self) -> Console:
        if self._stdout is None:
            from rich.console import Console

            # No `file=`: Rich then writes to whatever sys.stdout is at print time, so test
            # runners that swap the streams between invocations keep working.
            self._stdout = Console(highlight=False, soft_wrap=True)
        return self._stdout

    @property
    def stderr(self) -> Console:
        if self._stderr is None:
            from rich.console import Console

            self._stderr = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._stderr

    def reset(self) -> None:
        """Forget consoles (tests swap sys.stdout between invocations)."""
        self._stdout = None
        self._stderr = None
        self.json_mode = False

    # -- data ---------------------------------------------------------------------------------
    def result(self, data: Any, render: Callable[[], None] | None = None) -> None:
        """Print a command's result: JSON on stdout in --json mode, else ``render()`` (or JSON)."""
        if self.json_mode or render is None:
            sys.stdout.write(to_json_text(data))
            sys.stdout.flush()
        else:
            render()

    def print(self, *renderables: Any) -> None:
        """Print human output to stdout (ignored in --json mode)."""
        if not self.json_mode:
            self.stdout.print(*renderables)

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
        justify: Mapping[str, str] | None = None,
    ) -> None:
        """Print a table for people (stdout)."""
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for column in columns:
            j = (justify or {}).get(column, "left")
            table.add_column(column, justify=j, overflow="fold")  # type: ignore[arg-type]
        for row in rows:
            # Cells are data (model ids, paths, values): plain Text, never parsed as Rich markup.
            table.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
        self.print(table)

    # -- messages (stderr) --------------------------------------------------------------------
    def info(self, text: str) -> None:
        self.stderr.print(text, markup=False)

    def success(self, text: str) -> None:
        self.stderr.print(f"[green]✓[/green] {_escape(text)}")

    def warning(self, text: str) -> None:
        self.stderr.print(f"[yellow]warning:[/yellow] {_escape(text)}")

    def explain(self, exc: NeuroncError, *, prefix: str = "") -> None:
        """A NeuroncError for people, on stderr: message, details (a log tail, every problem), hint."""
        self.stderr.print(f"[bold red]error:[/bold red] {_escape(prefix + exc.message)}")
        for line in exc.details:
            self.stderr.print(f"  {_escape(line)}")
        if exc.hint:
            self.stderr.print(f"[cyan]hint:[/cyan] {_escape(exc.hint)}")

    def error(self, exc: NeuroncError) -> None:
        """Report a NeuroncError: message, details and hint on stderr; JSON on stdout in --json mode."""
        self.explain(exc)
        if self.json_mode:
            sys.stdout.write(to_json_text(exc.to_json()))
            sys.stdout.flush()

    # -- progress (stderr) --------------------------------------------------------------------
    @contextmanager
    def progress(self) -> Iterator[ProgressSink]:
        """Yield a progress sink that draws Rich bars on stderr when it is a terminal."""
        if not self.stderr.is_terminal:
            yield _LineSink(self)
            return
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            _amount_column(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.stderr, transient=False) as bars:
            yield _RichSink(bars)


def _amount_column() -> Any:
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


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class _RichTask:
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


class _RichSink:
    def __init__(self, bars: Progress) -> None:
        self._bars = bars

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        task_id = self._bars.add_task(description, total=total, unit=unit)
        return _RichTask(self._bars, task_id, unit)


class _LineTask:
    """Non-terminal progress: one line when a task starts and one when it ends (CI logs)."""

    def __init__(self, output: Output, description: str) -> None:
        self._output = output
        self._description = description

    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        if description is not None:
            self._description = description

    def done(self, status: str | None = None) -> None:
        suffix = f" ({status})" if status else ""
        self._output.info(f"done: {self._description}{suffix}")


class _LineSink:
    def __init__(self, output: Output) -> None:
        self._output = output

    def task(self, description: str, total: float | None = None, unit: str = "") -> ProgressTask:
        self._output.info(f"start: {description}")
        return _LineTask(self._output, description)


out = Output()

__all__ = ["NULL_PROGRESS", "Output", "out", "to_json_text"]
