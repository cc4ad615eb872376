"""The Typer application and the one error handler every command runs under."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from neuronc._output import out
from neuronc.errors import EXIT_INTERRUPTED, NeuroncError

app = typer.Typer(
    name="neuronc",
    help="Compile LLMs ahead of time for AWS Neuron (Inferentia2, Trainium) into versioned, verifiable bundles.",
    epilog=(
        "Exit codes: 0 ok, 1 unexpected error, 2 invalid input, 3 compile failed, 4 verification failed, "
        "5 environment incompatible, 6 required cache/store hit missing, 130 interrupted. "
        "NEURONC_DEBUG=1 shows tracebacks."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Run a command body; map NeuroncError to its message, hint and exit code (NEURONC_DEBUG adds the traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NeuroncError as exc:
            if os.environ.get("NEURONC_DEBUG"):
                # The traceback for whoever debugs; the documented exit code for CI all the same.
                traceback.print_exc(file=sys.stderr)
            out.error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            out.info("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            out.end_command()

    return wrapper  # type: ignore[return-value]


def command(group: typer.Typer = app, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register a command on ``group`` with the shared error handler."""

    def decorator(func: F) -> F:
        group.command(name=name, **kwargs)(handle_errors(func))
        return func

    return decorator
