"""What several commands print the same way: a report that may carry a failure, manifest values made
safe for the terminal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command_failed
from neuronc.errors import NeuroncError

# A value of a --json document where the CLI passes on a part it does not read (a profile's matrix
# values, a runtime_env): what json.loads returns. Documents the CLI reads are TypedDicts or the
# library's typed reports; a function that only prints one takes ``Mapping[str, object]``.
JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = dict[str, JSONValue]


def finish_report(data: Mapping[str, object], render: Callable[[], None], failure: NeuroncError | None) -> None:
    """Print a report that may carry a failure: the render (or with --json the one document, the error
    inside it), then end the command through the one handler with the failure's code."""
    if failure is None:
        out.result(data, render)
        return
    if not out.json_mode:
        render()
    raise cli.Exit(command_failed(failure, report={**data, "error": failure.to_json()}))


def markup_safe(value: object, limit: int = 200) -> str:
    """A manifest value made safe for the terminal: no control characters, no Rich markup."""
    from rich.markup import escape

    return escape(table_cell(value, limit))


def table_cell(value: object, limit: int = 200) -> str:
    """A manifest value for a table cell: no control characters (cells are never read as markup)."""
    from neuronc.bundle import safe_text

    return "" if value is None else safe_text(value, limit)
