"""neuronc's command line: thin commands over the library, one module per command group.

Importing this package must stay cheap (no torch, no transformers): `neuronc --help` is measured
by bench/startup and guarded by tests/test_startup.py.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

from neuronc import __version__
from neuronc.cli import _cli as cli
from neuronc.cli._app import app, command_failed, run_app

# Command modules register themselves on `app` when imported; the order here is the order in --help.
_COMMAND_MODULES = (
    "profiles",
    "presets",
    "backends",
    "compile",
    "inspect",
    "sign",
    "store",
    "split",
    "run",
    "serve",
    "cache",
    "compile_cache",
    "plan",
    "buckets",
    "matrix",
    "deploy",
    "bench",
)
for _name in _COMMAND_MODULES:
    importlib.import_module(f"neuronc.cli.{_name}")


def _version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"neuronc {__version__}\n")
        raise cli.Exit(0)


@app.group_callback
def _root(
    version: Annotated[
        bool,
        cli.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
    ] = False,
    wide: Annotated[
        bool, cli.Option("--wide", help="Tables at full width whatever the terminal's (also NEURONC_WIDE=1).")
    ] = False,
) -> None:
    """Compile LLMs ahead of time for AWS Neuron into versioned, verifiable bundles.

    Exit codes: 0 ok, 1 unexpected error, 2 invalid input, 3 compile failed, 4 verification failed,
    5 environment incompatible, 6 required cache/store hit missing, 7 pre-boot verdict cannot tell,
    8 no bundle meets the SLO (bench), 130 interrupted.
    Set NEURONC_DEBUG=1 for tracebacks.
    """
    if wide:
        from neuronc._output import out

        out.configure(json_mode=False, wide=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    # Text for people may hold file names that are not UTF-8 (lone surrogates, PEP 383): show them
    # escaped rather than fail with UnicodeEncodeError half-way through the output.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    # pydantic looks for its plugins in every installed distribution's entry points on first use
    # (about 15 ms); the command line uses none. A caller that wants them sets the variable itself.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    sys.exit(run_app(sys.argv[1:] if argv is None else list(argv)))


__all__ = ["app", "command_failed", "main"]
