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

from neuronc.errors import NeuroncError, controls_escaped, json_controls_escaped
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from rich.console import Console


def to_json_text(data: Any) -> str:
    """Serialise command output: stable key order as given, two-space indent, trailing newline.

    Always valid UTF-8: a file name with bytes that are not UTF-8 reaches Python as lone
    surrogates (PEP 383); then the whole document is written with ASCII escapes (``\\udcff``), which
    any JSON parser reads back to the same string.
    """
    text = json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, indent=2, default=_json_default, ensure_ascii=True) + "\n"
    return json_controls_escaped(text)


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
        # --wide: tables at their natural width, whatever the terminal's.
        self.wide = bool(os.environ.get("NEURONC_WIDE"))
        self._stdout: Console | None = None
        self._stderr: Console | None = None

    def configure(self, *, json_mode: bool, wide: bool | None = None) -> None:
        self.json_mode = json_mode
        if wide:
            self.wide = True

    @property
    def stdout(self) -> Console:
        if self._stdout is None:
            from rich.console import Console

            # No `file=`: Rich then writes to whatever sys.stdout is at print time, so test
            # runners that swap the streams between invocations keep working. Text wraps at
            # spaces to the terminal's width (code is printed with ``code()``, never wrapped).
            # emoji=False: a file or model named like ":smile:" prints as written (and Rich's
            # emoji table is never loaded).
            self._stdout = Console(highlight=False, emoji=False)
        return self._stdout

    @property
    def stderr(self) -> Console:
        if self._stderr is None:
            from rich.console import Console

            self._stderr = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
        return self._stderr

    def reset(self) -> None:
        """Forget consoles and per-command settings (tests run many commands in one process)."""
        self._stdout = None
        self._stderr = None
        self.end_command()

    def end_command(self) -> None:
        """Back to the defaults after a command (``--json`` and ``--wide`` are per command)."""
        self.json_mode = False
        self.wide = bool(os.environ.get("NEURONC_WIDE"))

    # -- data ---------------------------------------------------------------------------------
    def result(self, data: Any, render: Callable[[], None] | None = None) -> None:
        """Print a command's result: JSON on stdout in --json mode, else ``render()`` (or JSON).

        The result is printed whole: a Ctrl-C or SIGTERM that comes while it is written is ignored
        (the command's work is done; the run ends as it says), never half a table or two documents.
        """
        with _signals_held():
            if self.json_mode or render is None:
                sys.stdout.write(to_json_text(data))
                sys.stdout.flush()
            else:
                render()

    def print(self, *renderables: Any) -> None:
        """Print human output to stdout, wrapped at spaces to the terminal (ignored in --json mode).

        A word longer than the terminal (a long path) gets a line of its own and is never cut:
        copied from the terminal it still works.
        """
        if self.json_mode:
            return
        for renderable in renderables:
            if isinstance(renderable, str):
                self._wrapped(renderable)
            else:
                self.stdout.print(renderable)

    def _wrapped(self, markup: str) -> None:
        """Markup text wrapped at spaces to the terminal; a word longer than a line keeps a line of its own.

        Rich either folds long words or does not wrap at all; this breaks lines only between words.
        """
        from rich.text import Text

        text = Text.from_markup(markup, emoji=False)
        for line in text.split("\n", allow_blank=True):
            cuts = word_breaks(line.plain, self.stdout.width)
            for part in line.divide(cuts) if cuts else [line]:
                part.rstrip()
                self.stdout.print(part, crop=False, soft_wrap=True)

    def code(self, text: str) -> None:
        """Print lines to copy and paste (a load snippet) as they are: never wrapped or marked up."""
        if not self.json_mode:
            self.stdout.print(text, markup=False, soft_wrap=True)

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
        justify: Mapping[str, str] | None = None,
        optional: Sequence[str] = (),
    ) -> None:
        """Print a table for people (stdout), readable at any terminal width with no word broken.

        The full table when it fits (or with ``--wide``: then at its natural width, wider than the
        terminal if need be). Otherwise columns give way: first those with the same value on every
        row (the value is said once below the table), then the ``optional`` ones, least telling
        last in the list first; words wrap at spaces, and a line below the table names what was
        left out. When even that does not fit, each row is printed as a block of ``column: value``
        lines.
        """
        if self.json_mode:
            return
        cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
        width = self.stdout.width
        constant = constant_columns(list(columns), cells)
        layout = fit_columns(list(columns), cells, width, optional=optional, constant=constant, wide=self.wide)
        if layout is None:
            self._stacked(list(columns), cells, title)
            return
        from rich.table import Table
        from rich.text import Text

        keep, widths = layout
        table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for index, column_width in zip(keep, widths, strict=True):
            name = columns[index]
            j = (justify or {}).get(name, "left")
            table.add_column(name, justify=j, overflow="fold", width=column_width)  # type: ignore[arg-type]
        for row in cells:
            # Cells are data (model ids, paths, values): plain Text, never parsed as Rich markup.
            table.add_row(*(Text(row[i]) for i in keep))
        natural = sum(widths) + _TABLE_GAP * len(widths)
        if self.wide and natural > width:
            # Rich clamps print(width=...) to the console's width: widen the console itself.
            self.stdout.width = natural
            try:
                self.stdout.print(table)
            finally:
                self.stdout.width = width
        else:
            self.stdout.print(table)
        left_out = [i for i in range(len(columns)) if i not in keep]
        same = [f"{columns[i]}: {cells[0][i]}" for i in left_out if columns[i] in constant]
        dropped = [columns[i] for i in left_out if columns[i] not in constant]
        if same:
            self._wrapped(_escape("on every row: " + "; ".join(same)))
        if dropped:
            self._wrapped(_escape(f"not shown at {width} columns: {', '.join(dropped)} (--wide shows every column)"))

    def _stacked(self, columns: list[str], cells: list[list[str]], title: str | None) -> None:
        """Each row as a block: the first cell as a heading, then ``column: value`` lines."""

        if title:
            self._wrapped(_escape(title))
        for row in cells:
            self._wrapped(f"[bold]{_escape(row[0] if row else '')}[/bold]")
            for name, value in zip(columns[1:], row[1:], strict=False):
                if value:
                    # Wrapped at spaces to the terminal's width, continuation lines indented.
                    self._wrapped(_escape(f"  {name}: {value}"))

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

    # -- progress (stderr) --------------------------------------------------------------------
    @contextmanager
    def progress(self) -> Iterator[ProgressSink]:
        """Yield a progress sink that draws Rich bars on stderr when it is a terminal."""
        from neuronc._progress_view import LineSink, RichSink, amount_column, heartbeat_seconds

        if not self.stderr.is_terminal:
            sink = LineSink(self, heartbeat_seconds())
            try:
                yield sink
            finally:
                sink.close()
            return
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            amount_column(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.stderr, transient=False) as bars:
            yield RichSink(bars)


# Between two columns: one space of padding on each side and the separator.
_TABLE_GAP = 3


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM do nothing while the block runs (in the main thread; elsewhere, or where
    SIGINT is ignored, nothing changes). The handlers in place before are restored after it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    for number, handler in previous.items():
        if handler is not signal.SIG_IGN and handler is not None:
            signal.signal(number, lambda signum, frame: None)
    try:
        yield
    finally:
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)


def word_breaks(text: str, width: int) -> list[int]:
    """Offsets at which to break ``text`` into lines of at most ``width`` cells, only between words.

    A word longer than ``width`` is never cut: it gets a line of its own.
    """
    import re

    from rich.cells import cell_len

    breaks: list[int] = []
    line_start = 0
    for match in re.finditer(r"\S+\s*", text):
        word_end = match.start() + len(match.group().rstrip())
        if match.start() > line_start and cell_len(text[line_start:word_end]) > width:
            breaks.append(match.start())
            line_start = match.start()
    return breaks


def _words(text: str) -> list[str]:
    return text.split() or [""]


def constant_columns(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    """Columns (not the first) with one non-empty value on every row of two or more: saying that value
    once loses nothing when the terminal is too narrow for them."""
    if len(cells) < 2:
        return []
    return [
        name
        for i, name in enumerate(columns)
        if i > 0 and all(len(row) > i for row in cells) and cells[0][i] and all(row[i] == cells[0][i] for row in cells)
    ]


def fit_columns(
    columns: list[str],
    cells: list[list[str]],
    width: int,
    *,
    optional: Sequence[str] = (),
    constant: Sequence[str] = (),
    wide: bool = False,
) -> tuple[list[int], list[int]] | None:
    """Which columns to show and how wide, so that no word is broken; None: print rows stacked.

    A column needs at least its longest word (header included) and wants its longest line. The
    full table is used when every column gets what it wants (or ``wide``); else columns are
    dropped until the minimums fit: ``constant`` ones first (one value on every row), then the
    optional ones, last listed first. The space left is shared out in proportion to what each
    column still wants.
    """
    from rich.cells import cell_len

    def texts(i: int) -> list[str]:
        return [columns[i]] + [row[i] if i < len(row) else "" for row in cells]

    natural = [max(cell_len(line) for t in texts(i) for line in t.splitlines() or [""]) for i in range(len(columns))]
    minimum = [max(cell_len(w) for t in texts(i) for w in _words(t)) for i in range(len(columns))]
    keep = list(range(len(columns)))

    def cost(widths: Sequence[int]) -> int:
        return sum(widths) + _TABLE_GAP * (len(widths) - 1)

    if wide or cost([natural[i] for i in keep]) <= width:
        return keep, [natural[i] for i in keep]
    order = [*constant, *(name for name in reversed(optional) if name not in constant)]
    droppable = [columns.index(name) for name in order if name in columns]
    while cost([minimum[i] for i in keep]) > width and droppable:
        keep.remove(droppable.pop(0))
    if cost([natural[i] for i in keep]) <= width:
        return keep, [natural[i] for i in keep]
    if cost([minimum[i] for i in keep]) > width:
        return None
    spare = width - cost([minimum[i] for i in keep])
    wants = [natural[i] - minimum[i] for i in keep]
    total_want = sum(wants) or 1
    widths = [minimum[i] + (spare * want) // total_want for i, want in zip(keep, wants, strict=True)]
    return keep, widths


def _escape(text: str) -> str:
    from rich.markup import escape  # and no control characters: messages quote values from files

    return escape(controls_escaped(text))


out = Output()

__all__ = ["NULL_PROGRESS", "Output", "out", "to_json_text"]
