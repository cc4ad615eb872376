"""What several commands print the same way: a report that may carry a failure, manifest values made
safe for the terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command_failed
from neuronc.errors import NeuroncError


def finish_report(data: dict[str, Any], render: Callable[[], None], failure: NeuroncError | None) -> None:
    """Print a report that may carry a failure: the render (or with --json the one document, the error
    inside it), then end the command through the one handler with the failure's code."""
    if failure is None:
        out.result(data, render)
        return
    if not out.json_mode:
        render()
    data["error"] = failure.to_json()
    raise cli.Exit(command_failed(failure, report=data))


def markup_safe(value: Any, limit: int = 200) -> str:
    """A manifest value made safe for the terminal: no control characters, no Rich markup."""
    from rich.markup import escape

    return escape(table_cell(value, limit))


def table_cell(value: Any, limit: int = 200) -> str:
    """A manifest value for a table cell: no control characters (cells are never read as markup)."""
    from neuronc.bundle import safe_text

    return "" if value is None else safe_text(value, limit)
