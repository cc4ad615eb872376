"""Option and argument types shared by commands (declare once, reuse everywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from neuronc.cli import _cli as cli

JsonOpt = Annotated[bool, cli.Option("--json", help="Print machine-readable JSON on stdout.")]
ProfilesArg = Annotated[list[Path], cli.Argument(help="Profile YAML file(s).", show_default=False)]
ProfilesOrDirsArg = Annotated[
    list[Path], cli.Argument(help="Profile YAML files, or directories of them.", show_default=False)
]
StoreOpt = Annotated[
    str | None,
    cli.Option(
        "--store",
        metavar="DIR|URL",
        help="Bundle store (directory, s3://..., hf://...). Default: $NEURONC_STORE or the user cache.",
    ),
]
WideOpt = Annotated[
    bool,
    cli.Option("--wide", help="Tables at full width whatever the terminal's (default: fit the terminal)."),
]
