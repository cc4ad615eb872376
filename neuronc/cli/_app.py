"""The application (a Click group; commands are built when looked up) and the error handler every command runs under."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

import neuronc.cli._cli as cli  # not `from neuronc.cli import`: the package imports this module
from neuronc._output import out, to_json_text
from neuronc.cli._signals import interrupted, interrupts_recorded
from neuronc.errors import EXIT_INTERRUPTED, EXIT_UNEXPECTED, InvalidInputError, NeuroncError, safe_text

app = cli.Group(
    "neuronc",
    help="Compile LLMs ahead of time for AWS Neuron (Inferentia2, Trainium) into versioned, verifiable bundles.",
    epilog=(
        "Exit codes: 0 ok, 1 unexpected error, 2 invalid input, 3 compile failed, 4 verification failed, "
        "5 environment incompatible, 6 required cache/store hit missing, 7 pre-boot verdict cannot tell, "
        "8 no bundle meets the SLO (bench), 130 interrupted. "
        "NEURONC_DEBUG=1 shows tracebacks."
    ),
    no_args_is_help=True,
)


# ``Any`` here is Click's: a command is any ``Callable[..., Any]`` (click.Command's callback), called
# with the parsed parameters as keyword arguments of any type, and ``command`` forwards Click's own
# settings (``click.Group.command(**kwargs: Any)``).
F = TypeVar("F", bound=Callable[..., Any])
# Click's completion variable for the `neuronc` program (_{PROG_NAME}_COMPLETE).
COMPLETE_VAR = "_NEURONC_COMPLETE"


def handle_errors(func: F) -> F:
    """Run a command body under the one error handler (``command_failed``): a failure ends the command
    with its exit code, its message and hint, and with ``--json`` the error document."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _COMMAND_ENDED.clear()
        # Every command names its --json flag `json_out`: with it, a failure prints the error
        # document on stdout even when it happens before the command configured its output.
        if kwargs.get("json_out"):
            out.configure(json_mode=True)
        code = EXIT_UNEXPECTED  # a bug (an exception command_failed raises again) ends the run with 1
        try:
            with interrupts_recorded():  # SIGTERM (docker stop, CI cancel, timeout) is handled like Ctrl-C
                result = func(*args, **kwargs)
            code = result if isinstance(result, int) else 0
            return result
        except cli.Exit as exc:
            code = exc.exit_code
            raise  # the command ended itself (through command_failed, or with its result's exit code)
        except (KeyboardInterrupt, Exception) as exc:
            code = command_failed(exc)
            raise cli.Exit(code) from None
        finally:
            out.end_command()
            _COMMAND_ENDED.append(code)

    return wrapper  # type: ignore[return-value]


# The exit code a command's body ended with, once it has run: it printed its own output (success or
# failure) by then, and a Ctrl-C that comes later keeps that exit code.
_COMMAND_ENDED: list[int] = []


def command_failed(
    exc: BaseException, *, report: Mapping[str, object] | None = None, args: Sequence[str] | None = None
) -> int:
    """The one place where a failure at the command line becomes what the user sees; returns the exit code.

    What failed decides it all: a NeuroncError is its exit code, its message, details and hint on
    stderr (NEURONC_DEBUG=1 adds the traceback), and with ``--json`` its error document on stdout. A
    Ctrl-C or SIGTERM (KeyboardInterrupt, or any exception a library made of one: ``interrupted()``)
    is exit 130 and ``interrupted``. A usage error Click found in the command line is exit 2, Click's
    usage message. A closed stdout (``neuronc ... | head``) is exit 1 with nothing said, as Click's
    ``main()`` ends it. Any other exception is a bug: it is raised again (a traceback, exit 1).

    ``report``: the command's own ``--json`` document, which records the failure (compile's run report,
    verify's report): printed instead of the error document. ``args``: the command line, for a failure
    before a command configured its output (start-up, argument parsing): ``--json`` is read from it.
    """
    if isinstance(exc, BrokenPipeError) and not interrupted():
        # Whoever read the output went away. Python's recipe (the signal module's note on SIGPIPE):
        # point stdout at devnull, so that the interpreter's last flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_UNEXPECTED
    error = _as_error(exc)
    if error is None:
        raise exc
    if args is not None:  # before (or after) a command's body: --json as the command line says
        out.configure(json_mode=_json_requested(args))
    if isinstance(error, Interrupted):
        if _COMMAND_ENDED:
            # A Ctrl-C after the command said how it ended (its output is printed, its work done): the
            # run ends as the command did, with nothing more said.
            return _COMMAND_ENDED[-1]
        out.info("interrupted")
    elif isinstance(exc, click.UsageError):
        exc.show()  # Click's usage line and message, on stderr
    else:
        if os.environ.get("NEURONC_DEBUG"):
            # The traceback for whoever debugs; the documented exit code for CI all the same.
            traceback.print_exception(exc, file=sys.stderr)
        out.explain(error)
    if out.json_mode:
        sys.stdout.write(to_json_text(error.to_json() if report is None else report))
        sys.stdout.flush()
    return error.exit_code


def _as_error(exc: BaseException) -> NeuroncError | None:
    """The NeuroncError a failure at the command line is for the user; None for a bug."""
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, Exception) and interrupted()):
        # interrupted(): a Ctrl-C that a library turned into an exception of its own
        return Interrupted("interrupted")
    if isinstance(exc, NeuroncError):
        return exc
    if isinstance(exc, click.UsageError):
        if exc.ctx is None:
            # Raised in a command's body: the command's context, as Click's own invoke adds it once the
            # body has ended (the usage line and the command's name in the message).
            exc.ctx = click.get_current_context(silent=True)
        command_path = exc.ctx.command_path if exc.ctx is not None else "neuronc"
        return UsageInputError(
            f"{command_path}: {exc.format_message()}",
            hint=f"run `{command_path} --help` for its options and arguments",
        )
    return None


class Interrupted(NeuroncError):
    """Ctrl-C, or SIGTERM (every command treats it alike): what was half-done is cleaned up."""

    exit_code = EXIT_INTERRUPTED
    kind = "interrupted"


class UsageInputError(InvalidInputError):
    """The command line itself is wrong: an unknown option, a missing argument, a value out of range."""

    kind = "usage_error"


def _json_requested(args: Sequence[str]) -> bool:
    args = list(args)
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


_COMPLETION_HINT = 'load the completion script your shell runs: eval "$(_NEURONC_COMPLETE=bash_source neuronc)"'


def _completion_problem(instruction: str, environ: Mapping[str, str]) -> str | None:
    """What is wrong with a completion request's variables (None: nothing). The shells' scripts set
    COMP_WORDS (the command line) and COMP_CWORD: the index of the word being completed (bash, zsh),
    the word itself (fish)."""
    shell, _, action = instruction.partition("_")
    if action != "complete":
        return None
    if "COMP_WORDS" not in environ:
        return "COMP_WORDS is not set (the command line to complete)"
    if shell == "fish":
        return None
    index = environ.get("COMP_CWORD")
    if index is None:
        return "COMP_CWORD is not set (the index of the word to complete)"
    if not re.fullmatch(r"-?[0-9]{1,9}", index, flags=re.ASCII):
        return f"COMP_CWORD {safe_text(index, 40)!r} is not a word index (an integer)"
    return None


def run_app(args: list[str]) -> int:
    """Run the application; returns the exit code. A failure outside a command's body (a usage error,
    Ctrl-C while arguments are parsed) ends as one inside it does (``command_failed``): with --json
    on the command line, the error document on stdout, so that `--json` output is one document on
    every failure."""
    _COMMAND_ENDED.clear()
    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:
        # Shell completion, as Click's Command.main offers it (bash, zsh, fish): `eval "$(_NEURONC_COMPLETE=bash_source
        # neuronc)"` prints the script; the shell then calls back with `bash_complete` (README "Shell completion").
        from click.shell_completion import shell_complete

        problem = _completion_problem(instruction, os.environ)
        if problem is not None:  # Click would read these with int() and os.environ[...]: a traceback
            return command_failed(UsageInputError(f"shell completion: {problem}", hint=_COMPLETION_HINT), args=[])
        return shell_complete(app, {}, "neuronc", COMPLETE_VAR, instruction)
    try:
        # What Click's Command.main does, through its documented parts (make_context, invoke): main()
        # itself would turn a Ctrl-C into click.Abort (exit 1) and print usage errors its own way.
        with app.make_context("neuronc", list(args)) as ctx:
            code = app.invoke(ctx)
    except click.exceptions.Exit as exc:  # --help, --version, and a command that ended (handle_errors)
        return exc.exit_code
    except (KeyboardInterrupt, click.UsageError, BrokenPipeError) as exc:  # outside a command's body too
        return command_failed(exc, args=args)
    return code if isinstance(code, int) else 0


def command(group: cli.Group = app, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Declare a command on ``group``, run under the shared error handler; built when it is looked up.
    ``kwargs`` go to ``click.Command`` (epilog, ...); the command's help is the function's docstring."""

    def decorator(func: F) -> F:
        group.add_lazy_command(name or func.__name__.replace("_", "-"), handle_errors(func), **kwargs)
        return func

    return decorator
