"""neuronc's commands as Click commands: declared as annotated functions, built on Click's public API.

Each command is a plain function whose parameters carry their command-line form in their annotation,
``jobs: Annotated[int | None, cli.Option("--jobs", "-j", min=1, help=...)] = None``; this module
turns the signature into ``click.Option`` and ``click.Argument`` objects when the command is first
looked up (Click's documented lazy-loading hooks, ``Group.list_commands`` / ``Group.get_command``),
so a run builds only the command it runs.

Why hand-written: Click has no signature-based declaration, and Typer, which built neuronc's
commands before, cannot be used through its public API alone. Typer 0.29 builds a pydantic
``TypeAdapter`` for every parameter of every run (about 0.1 s of pydantic import for commands that
read no profile), its public API cannot set the usage and help format (it prints
``{PROFILES}...`` and ``<list[Path]>``), and since 0.26 it vendors Click and calls using Click
directly unsupported. huggingface_hub's CLI made the same move for the same reason (1.22,
``cli/_framework.py``). This layer keeps the help exactly as Typer printed it for neuronc:
an "Arguments" section, then "Options", ``PROFILES...``, ``[MODEL]``, ``--jobs N``.

What it supports, which is what neuronc's commands use (anything else is a TypeError when the
command is built, and tests/test_cli_layer.py builds every command):

* annotations ``bool`` (a flag; ``"--x/--no-x"`` declarations too), ``int`` and ``float`` (``min`` /
  ``max`` make a range), ``str``, ``Path``, an ``Enum`` of strings (a choice of its values, passed to the
  command as the member), ``list[T]`` (an argument taking one or more values, or a repeatable
  option; the command gets a list, or None when nothing was given and the default is None), and
  ``T | None``;
* ``Option(*decls, help, metavar, show_default, min, max, callback, is_eager)`` and
  ``Argument(help, metavar, show_default, min, max)``; a parameter with no default is required;
* ``callback(value)`` as Typer called it (the value, not Click's ``(ctx, param, value)``).
"""

from __future__ import annotations

import enum
import inspect
import math
import typing
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypedDict, TypeVar, Union, Unpack, get_args, get_origin

import click
from click import BadParameter as BadParameter
from click.exceptions import Exit as Exit

# ``Any`` in this module is Click's: a command is any ``Callable[..., Any]`` (click.Command's
# callback), ``ParamType.convert`` and parameter callbacks take and return ``Any``, and keyword
# arguments are passed on to click.Option/click.Argument/click.Command (click/types.py, click/core.py).
# Parameter annotations, read at runtime, are ``object``s.
F = TypeVar("F", bound=Callable[..., Any])

# Metavars in usage lines and help, as neuronc has always printed them ("--jobs N", "--tol X").
_METAVARS: dict[object, str] = {int: "N", float: "X"}


class _Settings(TypedDict, total=False):
    """What options and arguments both say (``Option``'s and ``Argument``'s keyword arguments)."""

    help: str | None
    metavar: str | None
    show_default: bool | str
    min: float | None
    max: float | None


class _Parameter:
    """What an ``Annotated`` marker says about a parameter's command-line form."""

    def __init__(self, **settings: Unpack[_Settings]) -> None:
        self.help = settings.get("help")
        self.metavar = settings.get("metavar")
        self.show_default = settings.get("show_default", True)
        self.min = settings.get("min")
        self.max = settings.get("max")


class Option(_Parameter):
    """An option: ``Annotated[int, Option("--jobs", "-j", min=1, help="...")]``. With no declarations,
    ``--the-parameter-name``; a ``bool`` is a flag."""

    def __init__(
        self,
        *decls: str,
        callback: Callable[[Any], Any] | None = None,
        is_eager: bool = False,
        **settings: Unpack[_Settings],
    ) -> None:
        super().__init__(**settings)
        self.decls = decls
        self.callback = callback
        self.is_eager = is_eager


class Argument(_Parameter):
    """A positional argument: ``Annotated[Path, Argument(help="...")]``; ``list[...]`` takes one or more."""


class _IntRange(click.IntRange):
    name = "integer"  # "'x' is not a valid integer." rather than "... valid integer range."


class _FloatRange(click.FloatRange):
    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):  # NaN compares false with both bounds: Click's range check lets it through
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


def _click_type(annotation: object, marker: _Parameter) -> click.ParamType[Any]:
    if annotation is int or annotation is float:
        if marker.min is None and marker.max is None:
            return click.INT if annotation is int else click.FLOAT
        if annotation is int:
            return _IntRange(min=_int_or_none(marker.min), max=_int_or_none(marker.max))
        return _FloatRange(min=marker.min, max=marker.max)
    if annotation is str:
        return click.STRING
    if annotation is Path:
        return click.Path(path_type=Path)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [member.value for member in annotation]
        if all(isinstance(value, str) for value in values):
            return click.Choice(values)
    raise TypeError(f"unsupported command-line type {annotation!r}")


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def _unwrap(annotation: object) -> tuple[object, bool]:
    """``T | None`` → T; ``list[T]`` → (T, True)."""
    if get_origin(annotation) in (Union, UnionType):
        (annotation,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return item, True
    return annotation, False


class _Argument(click.Argument):
    """An argument with a help row (Click before 8.5 has none), written as neuronc's help always had it."""

    def __init__(
        self, decls: list[str], *, help: str | None = None, show_default: bool | str = True, **attrs: Any
    ) -> None:
        super().__init__(decls, **attrs)
        self.help = help
        self.show_default = show_default

    def _display_name(self) -> str:
        return self.metavar or (self.name or "").upper()

    def make_metavar(self, ctx: click.Context) -> str:
        name = self._display_name()
        if not self.required:
            name = f"[{name}]"
        return f"{name}..." if self.nargs != 1 else name

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return f"'{self._display_name()}'"  # "Missing argument 'PROFILES'."

    def get_help_record(self, ctx: click.Context) -> tuple[str, str]:
        extra = []
        if self.required:
            extra.append("required")
        elif self.default is not None and self.show_default:
            extra.append(f"default: {self.default}")
        text = self.help or ""
        if extra:
            text = f"{text}  [{'; '.join(extra)}]".strip()
        return self.make_metavar(ctx), text


class Command(click.Command):
    """A command whose help lists its arguments, then its options (as Typer wrote it)."""

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click 8.5's own "Positional arguments" section: format_options writes "Arguments" instead."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                (arguments if isinstance(param, click.Argument) else options).append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _to_python(
    base: object, many: bool, default: object, callback: Callable[[Any], Any] | None
) -> Callable[[click.Context, click.Parameter, Any], Any] | None:
    """Click's value → what the function declares: an Enum member, a list (None when nothing was given
    and the default is None); then the declared callback, called with the value as Typer called it."""
    members = base if isinstance(base, type) and issubclass(base, enum.Enum) else None
    if members is None and not (many or callback):
        return None

    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if members is not None:
            value = [members(v) for v in value] if many else (None if value is None else members(value))
        if many:
            value = None if not value and default is None else list(value)
        return value if callback is None else callback(value)

    return convert


def parameters(func: Callable[..., Any]) -> list[click.Parameter]:
    """The Click parameters of an annotated function, in the order of its signature."""
    hints = typing.get_type_hints(func, include_extras=True)
    built: list[click.Parameter] = []
    for name, signature in inspect.signature(func).parameters.items():
        annotation = hints.get(name, str)
        marker: Option | Argument | None = None
        if get_origin(annotation) is Annotated:
            annotation, *extras = get_args(annotation)
            marker = next((m for m in extras if isinstance(m, Option | Argument)), None)
        required = signature.default is inspect.Parameter.empty
        marker = marker or (Argument() if required else Option())
        base, many = _unwrap(annotation)
        default = None if required else signature.default
        settings: dict[str, Any] = {
            "type": None if base is bool else _click_type(base, marker),
            "required": required,
            "metavar": marker.metavar,
            "help": marker.help,
            "show_default": marker.show_default,
            "callback": _to_python(base, many, default, marker.callback if isinstance(marker, Option) else None),
        }
        if not required:  # Click's value, which it also shows in help: an Enum member's
            settings["default"] = default.value if isinstance(default, enum.Enum) else default
        if isinstance(marker, Argument):
            if base is bool:
                raise TypeError(f"{func.__name__}: argument {name!r} is a bool; make it an Option (a flag)")
            built.append(_Argument([name], nargs=-1 if many else 1, **settings))
            continue
        if base is not bool and marker.metavar is None and base in _METAVARS:
            settings["metavar"] = _METAVARS[base]
        # is_flag=None, not False, for a value: Click 8.5 reads an explicit False on an option with no
        # default as "the value may be left out", and then takes `--prompt -2` for the option -2.
        built.append(
            click.Option(
                [name, *(marker.decls or [f"--{name.replace('_', '-')}"])],
                is_flag=True if base is bool else None,
                multiple=many,
                is_eager=marker.is_eager,
                **settings,
            )
        )
    return built


class Group(click.Group):
    """A command group whose commands are built from annotated functions when first looked up.

    Commands are listed in the order they were declared, groups after commands (as Typer listed them).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        help: str | None = None,
        epilog: str | None = None,
        no_args_is_help: bool = False,
    ) -> None:
        self._declared: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
        self._order: list[str] = []
        super().__init__(name=name, help=help, epilog=epilog, no_args_is_help=no_args_is_help)

    def add_lazy_command(self, name: str, func: Callable[..., Any], **settings: Any) -> None:
        """Declare command ``name``: ``func`` and its signature become a Command when it is looked up.
        ``settings`` go to ``click.Command`` (epilog, ...); its help is ``func``'s docstring."""
        self._declared[name] = (func, settings)
        self._order.append(name)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        if (name or cmd.name) not in self._order:
            self._order.append(name or cmd.name or "")

    def group_callback(self, func: F) -> F:
        """Decorator: ``func`` runs before any of the group's commands; its parameters are the group's options."""
        self.params = [*self.params, *parameters(func)]
        self.callback = func
        return func

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._order, key=lambda name: isinstance(self.commands.get(name), click.Group))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        declared = self._declared.pop(cmd_name, None)
        if declared is not None:
            func, settings = declared
            command = Command(cmd_name, params=parameters(func), callback=func, help=inspect.getdoc(func), **settings)
            super().add_command(command, cmd_name)
        return self.commands.get(cmd_name)


__all__ = ["Argument", "BadParameter", "Command", "Exit", "Group", "Option", "parameters"]
