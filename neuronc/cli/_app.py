"""The Typer application and the one error handler every command runs under."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from neuronc._output import out, to_json_text
from neuronc.cli._signals import interrupted, interrupts_recorded
from neuronc.errors import EXIT_INTERRUPTED, InvalidInputError, NeuroncError

# Typer 0.29 writes parameter types the way Python spells them ("{profiles}...", "<list[Path]>",
# "<int range>"). These classes give usage lines and help the conventional shape instead
# ("PROFILES...", "--jobs N", "--store TEXT"); Typer has no setting for it, so each command swaps
# its parameters' classes once, here, when it is built (NeuroncGroup: `typer.Typer(cls=...)`).
_TYPE_WORDS = {"int": "N", "float": "X", "str": "TEXT", "Path": "PATH", "bool": "BOOL"}


def _plain_runtime_param(self: Any) -> Any:
    """Plain values (str, Path, numbers) coerced without importing pydantic: see neuronc.cli._coerce."""
    if self._runtime_param is None:
        from neuronc.cli._coerce import runtime_param

        self._runtime_param = runtime_param(self.type_descriptor)
    return self._runtime_param


class _Argument(TyperArgument):
    get_runtime_param = _plain_runtime_param

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "arg").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"

    def _rich_display_name(self) -> str:
        return self._usage_display_name()

    def display_type(self, ctx: Any) -> str:
        return ""


class _Option(TyperOption):
    get_runtime_param = _plain_runtime_param

    def display_type(self, ctx: Any) -> str:
        if self.metavar:
            return self.metavar
        descriptor = self.type_descriptor
        if descriptor.is_choice:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in descriptor.choices or ()) + "]"
        if descriptor.is_path:
            return "PATH"
        bare = self.bare_type()
        return _TYPE_WORDS.get(bare.removeprefix("list[").removesuffix("]"), bare.upper())


def _swap_class(param: Any) -> Any:
    if type(param) is TyperArgument:
        param.__class__ = _Argument
    elif type(param) is TyperOption:
        param.__class__ = _Option
    return param


class _SwapsParameterClasses:
    """Gives a command's or a group's parameters (its --help option too) the classes above."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _swap_class(param)

    def get_help_option(self, ctx: Any) -> Any:
        return _swap_class(super().get_help_option(ctx))  # type: ignore[misc]


class NeuroncCommand(_SwapsParameterClasses, TyperCommand):
    pass


class NeuroncGroup(_SwapsParameterClasses, TyperGroup):
    """The root app and its command groups (``typer.Typer(cls=NeuroncGroup)``)."""


APP_SETTINGS: dict[str, Any] = {
    "name": "neuronc",
    "help": "Compile LLMs ahead of time for AWS Neuron (Inferentia2, Trainium) into versioned, verifiable bundles.",
    "epilog": (
        "Exit codes: 0 ok, 1 unexpected error, 2 invalid input, 3 compile failed, 4 verification failed, "
        "5 environment incompatible, 6 required cache/store hit missing, 130 interrupted. "
        "NEURONC_DEBUG=1 shows tracebacks."
    ),
    "no_args_is_help": True,
    "pretty_exceptions_show_locals": False,
    "add_completion": False,
    "rich_markup_mode": None,
    "cls": NeuroncGroup,
}
app = typer.Typer(**APP_SETTINGS)


def app_for(argv: list[str]) -> typer.Typer:
    """The app that runs ``argv``: one holding only the command it names, when it names one.

    Typer builds every registered command (the signature and type hints of each) on every run;
    building only the command asked for saves a store-hit `compile` about a tenth of its time. Help
    for the whole tool (also ``neuronc --help compile``), ``--version`` and unknown commands get the
    whole app.
    """
    index, name = next(((i, arg) for i, arg in enumerate(argv) if not arg.startswith("-")), (0, None))
    if any(arg != "--wide" for arg in argv[:index]):  # a root option other than --wide: the whole app decides
        return app
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    single = typer.Typer(**APP_SETTINGS)
    single.registered_callback = app.registered_callback
    single.registered_commands = commands
    single.registered_groups = groups
    return single


F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Run a command body; map NeuroncError to its message, hint and exit code (NEURONC_DEBUG adds the traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Every command names its --json flag `json_out`: with it, a failure prints the error
        # document on stdout even when it happens before the command configured its output.
        if kwargs.get("json_out"):
            out.configure(json_mode=True)
        try:
            with interrupts_recorded():  # SIGTERM (docker stop, CI cancel, timeout) is handled like Ctrl-C
                return func(*args, **kwargs)
        except NeuroncError as exc:
            if os.environ.get("NEURONC_DEBUG"):
                # The traceback for whoever debugs; the documented exit code for CI all the same.
                traceback.print_exc(file=sys.stderr)
            out.error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if out.json_mode:
                out.error(Interrupted("interrupted"))  # the error document on stdout, "interrupted" on stderr
            else:
                out.info("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except typer.Exit:
            raise  # the command ended itself (with --json it printed its document): not a library's exception
        except Exception:
            if not interrupted():
                raise
            # A Ctrl-C that a library turned into an exception of its own: still an interruption.
            if out.json_mode:
                out.error(Interrupted("interrupted"))
            else:
                out.info("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            out.end_command()
            _COMMAND_ENDED.append(True)

    return wrapper  # type: ignore[return-value]


# Set once a command's body has run: it printed its own output (success or failure) by then.
_COMMAND_ENDED: list[bool] = []


def exit_interrupted(args: list[str]) -> int:
    """Ctrl-C before a command's body ran (start-up, argument parsing): what a command prints for it,
    ``interrupted`` on stderr and with ``--json`` the error document on stdout; returns 130."""
    if _json_requested(args):
        out.configure(json_mode=True)
        out.error(Interrupted("interrupted"))
    else:
        out.info("interrupted")
    return EXIT_INTERRUPTED


class Interrupted(NeuroncError):
    """Ctrl-C, or SIGTERM (every command treats it alike): what was half-done is cleaned up."""

    exit_code = EXIT_INTERRUPTED
    kind = "interrupted"


class UsageInputError(InvalidInputError):
    """The command line itself is wrong: an unknown option, a missing argument, a value out of range."""

    kind = "usage_error"


# Click's UsageError (unknown option, missing argument, bad value), reached through the class Typer
# exports publicly: BadParameter is one of its subclasses in every Click release.
_ClickUsageError: type[Exception] = typer.BadParameter.__mro__[1]


def _json_requested(args: list[str]) -> bool:
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


def run_app(args: list[str]) -> int:
    """Run the application; a usage error with --json on the command line also prints the JSON error
    document on stdout (exit 2), so that `--json` output is one document on every failure."""
    _COMMAND_ENDED.clear()
    try:
        code = app_for(args)(args=args, prog_name="neuronc", standalone_mode=False)
    except KeyboardInterrupt:  # outside a command's body: while the app is built or arguments parsed
        return EXIT_INTERRUPTED if _COMMAND_ENDED else exit_interrupted(args)
    except _ClickUsageError as exc:
        exc.show()  # type: ignore[attr-defined]  # Click's usage line and message, on stderr, as before
        exit_code = int(getattr(exc, "exit_code", 2))
        if _json_requested(args) and exit_code != 0:
            ctx = getattr(exc, "ctx", None)
            command_path = ctx.command_path if ctx is not None else "neuronc"
            error = UsageInputError(
                f"{command_path}: {exc.format_message()}",  # type: ignore[attr-defined]
                hint=f"run `{command_path} --help` for its options and arguments",
            )
            sys.stdout.write(to_json_text(error.to_json()))
            sys.stdout.flush()
        return exit_code
    return code if isinstance(code, int) else 0


def command(group: typer.Typer = app, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register a command on ``group`` with the shared error handler."""

    def decorator(func: F) -> F:
        group.command(name=name, cls=NeuroncCommand, **kwargs)(handle_errors(func))
        return func

    return decorator
