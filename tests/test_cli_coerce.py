"""neuronc.cli._coerce agrees with Typer's own coercion on every parameter of every command.

The plain path exists only to keep pydantic out of light commands; for each parameter it takes, it
must give what Typer gives, value for value, and leave every error (and its wording) to Typer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer._coercion import build_runtime_param
from typer.core import TyperArgument, TyperOption

from neuronc.cli import app
from neuronc.cli._coerce import PlainRuntimeParam

SAMPLES: tuple[Any, ...] = (
    "0", "1", "7", "-2", "1.5", "-0.25", " 3", "+4", "1e3", "1_000", "abc", "", "/tmp", "-", "true",
    0, 3, 2.5, True, False, Path("/tmp"), b"x",
)  # fmt: skip


def _params() -> Iterator[tuple[str, Any, Any]]:
    """Every (command path, parameter, context) of the CLI, the help options included."""

    def walk(command: Any, path: str, parent: Any) -> Iterator[tuple[str, Any, Any]]:
        ctx = typer.Context(command, info_name=path.rsplit(" ", 1)[-1], parent=parent)
        for param in command.get_params(ctx):
            yield path, param, ctx
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}", ctx)

    yield from walk(typer.main.get_command(app), "neuronc", None)


def _outcome(coerce: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        result = coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return "error", exc.format_message()
    return "value", (type(result), result)


PARAMS = list(_params())


def test_every_parameter_uses_neuroncs_classes() -> None:
    """Each parameter (help options too) is one of the swapped classes, so none builds a TypeAdapter."""
    stray = [f"{path} {p.name}" for path, p, _ in PARAMS if type(p) in (TyperArgument, TyperOption)]
    assert not stray
    assert len(PARAMS) > 100


@pytest.mark.parametrize(("path", "param", "ctx"), PARAMS, ids=[f"{p} {param.name}" for p, param, _ in PARAMS])
def test_plain_coercion_matches_typer(path: str, param: Any, ctx: Any) -> None:
    ours = param.get_runtime_param()
    typers = build_runtime_param(param.type_descriptor)
    multi = param.multiple or param.nargs == -1
    values = [(v, "w") for v in SAMPLES] if multi else list(SAMPLES)
    if isinstance(ours, PlainRuntimeParam):
        for value in [*values, param.default]:
            assert _outcome(ours.coerce, value, param, ctx) == _outcome(typers.coerce, value, param, ctx), (
                path,
                param.name,
                value,
            )
    else:  # not a plain type: Typer's own runtime param, as Typer would build it
        assert type(ours) is type(typers)
