"""The application (a Click group; commands are built when looked up) and the error handler every command runs under."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

import neuronc.cli._cli as cli  # not `from neuronc.cli import`: the package imports this module
from neuronc._output import out, to_json_text
from neuronc.cli._signals import interrupted, interrupts_recorded
from neuronc.errors import EXIT_INTERRUPTED, InvalidInputError, NeuroncError

app = cli.Group(
    "neuronc",
    help="Compile LLMs ahead of time for AWS Neuron (Inferentia2, Trainium) into versioned, verifiable bundles.",
    epilog=(
        "Exit codes: 0 ok, 1 unexpected error, 2 invalid input, 3 compile failed, 4 verification failed, "
        "5 environment incompatible, 6 required cache/store hit missing, 130 interrupted. "
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
            raise cli.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            raise cli.Exit(report_interrupted()) from None
        except cli.Exit:
            raise  # the command ended itself (with --json it printed its document): not a library's exception
        except Exception:
            if not interrupted():
                raise
            # A Ctrl-C that a library turned into an exception of its own: still an interruption.
            raise cli.Exit(report_interrupted()) from None
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
    return report_interrupted()


def report_interrupted() -> int:
    """What every command says for a Ctrl-C (or SIGTERM): ``interrupted`` on stderr, and with ``--json``
    the error document on stdout; returns 130."""
    if out.json_mode:
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


def _json_requested(args: list[str]) -> bool:
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


def run_app(args: list[str]) -> int:
    """Run the application; a usage error with --json on the command line also prints the JSON error
    document on stdout (exit 2), so that `--json` output is one document on every failure."""
    _COMMAND_ENDED.clear()
    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:
        # Shell completion, as Click's Command.main offers it (bash, zsh, fish): `eval "$(_NEURONC_COMPLETE=bash_source
        # neuronc)"` prints the script; the shell then calls back with `bash_complete` (README "Shell completion").
        from click.shell_completion import shell_complete

        return shell_complete(app, {}, "neuronc", COMPLETE_VAR, instruction)
    try:
        # What Click's Command.main does, through its documented parts (make_context, invoke): main()
        # itself would turn a Ctrl-C into click.Abort (exit 1) and print usage errors its own way.
        with app.make_context("neuronc", list(args)) as ctx:
            code = app.invoke(ctx)
    except click.exceptions.Exit as exc:  # --help, --version, and a command that failed (handle_errors)
        return exc.exit_code
    except BrokenPipeError:
        # Whoever read the output went away (`neuronc ... | head`): exit 1 without a traceback, as
        # Click's main() does. Python's recipe (the signal module's note on SIGPIPE): point stdout at
        # devnull, so that the interpreter's last flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # outside a command's body: while the app is built or arguments parsed
        return EXIT_INTERRUPTED if _COMMAND_ENDED else exit_interrupted(args)
    except click.UsageError as exc:
        exc.show()  # Click's usage line and message, on stderr
        if _json_requested(args) and exc.exit_code != 0:
            command_path = exc.ctx.command_path if exc.ctx is not None else "neuronc"
            error = UsageInputError(
                f"{command_path}: {exc.format_message()}",
                hint=f"run `{command_path} --help` for its options and arguments",
            )
            sys.stdout.write(to_json_text(error.to_json()))
            sys.stdout.flush()
        return exc.exit_code
    return code if isinstance(code, int) else 0


def command(group: cli.Group = app, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Declare a command on ``group``, run under the shared error handler; built when it is looked up.
    ``kwargs`` go to ``click.Command`` (epilog, ...); the command's help is the function's docstring."""

    def decorator(func: F) -> F:
        group.add_lazy_command(name or func.__name__.replace("_", "-"), handle_errors(func), **kwargs)
        return func

    return decorator
