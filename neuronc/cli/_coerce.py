"""Command-line values of plain types coerced without pydantic; everything else by Typer itself.

Typer 0.29 builds a pydantic ``TypeAdapter`` for every parameter of the command being run, even one
left at its default. That imports pydantic (about 0.1 s, a third of a warm `cache-lookup`) for
commands that otherwise never touch it. For ``str``, ``Path``, ``int``, ``float`` and ``bool`` values,
and lists of them, the result is plain, so it is computed here. Every other type, and every value
the plain path does not accept, goes to Typer's own coercion, so results and error messages stay
Typer's. tests/test_cli_coerce.py checks both agree on every parameter of every command.

Hand-written because Typer has no switch for it; the hook is the parameter classes that
``neuronc.cli._app`` already swaps in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_path

if TYPE_CHECKING:
    from typer._click import Context
    from typer.core import _TyperParameter

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_PLAIN_TYPES = (str, Path, int, float, bool)


class _Unhandled:
    """The plain path does not decide this value: Typer's coercion does."""


UNHANDLED = _Unhandled()


@dataclass(frozen=True)
class PlainRuntimeParam(RuntimeParam):
    """Coerces plain values directly; hands anything else to the runtime param Typer would build."""

    descriptor: TypeDescriptor

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        result = coerce_plain(self.descriptor, value, param, ctx)
        if result is UNHANDLED:
            return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
        return result


def runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
    """What ``_TyperParameter.get_runtime_param`` builds: the plain path where it applies."""
    info = descriptor.parameter_info
    custom = info.parser is not None or getattr(info, "click_type", None) is not None
    if descriptor.file_annotation is None and not custom and _leaf(descriptor.annotation) in _PLAIN_TYPES:
        return PlainRuntimeParam(parameter_info=info, annotation=descriptor.annotation, descriptor=descriptor)
    return build_runtime_param(descriptor)


def _leaf(annotation: Any) -> Any:
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return item
    return annotation


def coerce_plain(descriptor: TypeDescriptor, value: Any, param: _TyperParameter | None, ctx: Context | None) -> Any:
    """The coerced value, or UNHANDLED where Typer's own coercion must decide (and word any error)."""
    annotation: Any = descriptor.annotation
    if get_origin(annotation) is list:
        if not isinstance(value, list | tuple):
            return UNHANDLED
        items = [_coerce_leaf(_leaf(annotation), descriptor, item, param, ctx) for item in value]
        return UNHANDLED if any(item is UNHANDLED for item in items) else items
    return _coerce_leaf(annotation, descriptor, value, param, ctx)


def _coerce_leaf(
    annotation: Any, descriptor: TypeDescriptor, value: Any, param: _TyperParameter | None, ctx: Context | None
) -> Any:
    info = descriptor.parameter_info
    if annotation is bool:
        return value if isinstance(value, bool) else UNHANDLED
    if annotation is str:
        return value if isinstance(value, str) else UNHANDLED
    if annotation is Path:
        if isinstance(value, str) and value:
            value = Path(value)
        if not isinstance(value, Path):
            return UNHANDLED
        # Typer's own checks (exists, readable, resolve_path...), given a Path so that it needs no pydantic.
        return coerce_cli_path(value, info, path_type=info.path_type or Path, param=param, ctx=ctx)
    if annotation is int or annotation is float:
        if info.clamp:
            return UNHANDLED
        pattern = _INT if annotation is int else _FLOAT
        if isinstance(value, bool) or not (
            isinstance(value, int) or (annotation is float and isinstance(value, float))
            or (isinstance(value, str) and pattern.fullmatch(value))
        ):  # fmt: skip
            return UNHANDLED
        number = annotation(value)
        if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
            return UNHANDLED  # out of range: Typer's message
        return number
    return UNHANDLED
