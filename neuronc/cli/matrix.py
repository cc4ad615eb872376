"""`neuronc matrix`: one CI job per bundle, as JSON for a GitHub Actions `strategy.matrix`."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt, ProfilesOrDirsArg
from neuronc.errors import InvalidInputError


class MatrixFormat(StrEnum):
    github = "github"
    json = "json"


FormatOpt = Annotated[
    MatrixFormat,
    cli.Option(
        "--format",
        "-f",
        help="github: one line 'matrix=<json>' for $GITHUB_OUTPUT; json: the same object, indented.",
    ),
]

_EPILOG = (
    'In a workflow: neuronc matrix profiles/ --format github >> "$GITHUB_OUTPUT", then '
    "strategy: {matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}} and "
    "neuronc compile ${{ matrix.profile }} --only ${{ matrix.key }} --revision ${{ matrix.revision }} "
    "(the commit the key was computed at). See docs/ci.md."
)


@command(name="matrix", epilog=_EPILOG)
def matrix_command(
    profiles: ProfilesOrDirsArg, output_format: FormatOpt = MatrixFormat.json, json_out: JsonOpt = False
) -> None:
    """Print one entry per bundle (profile, build index, key, revision, expected runner) for a CI job matrix."""
    from neuronc.pipeline.plan import GITHUB_MATRIX_LIMIT, matrix_entries
    from neuronc.profile import expand_profile_paths, load_builds

    if json_out and output_format is MatrixFormat.github:
        raise InvalidInputError("--json and --format github both choose the output; give one of them")

    found = matrix_entries(load_builds(expand_profile_paths(profiles)))
    entries = [e.to_json() for e in found]
    for entry in found:
        if entry.unresolved is not None:
            out.warning(
                f"{entry.profile}#{entry.build}: key unresolved ({entry.unresolved}); "
                "pin model.revision to a commit, or run matrix where the Hub is reachable"
            )
    if not entries:
        raise InvalidInputError("no builds in the profiles given")
    if output_format is MatrixFormat.github and len(entries) > GITHUB_MATRIX_LIMIT:
        msg = f"{len(entries)} bundles; GitHub Actions runs at most {GITHUB_MATRIX_LIMIT} jobs per matrix"
        raise InvalidInputError(msg, hint="split the profiles over several plan jobs, or use --format json")
    matrix = {"include": entries}
    if output_format is MatrixFormat.github:
        # One line, no spaces needed: `name=value` is the single-line $GITHUB_OUTPUT syntax.
        sys.stdout.write("matrix=" + json.dumps(matrix, separators=(",", ":"), ensure_ascii=True) + "\n")
    else:
        out.configure(json_mode=True)
        out.result(matrix)
    from neuronc.fsutil import plural

    out.info(f"{plural(len(entries), 'bundle')} in the matrix")


__all__ = ["matrix_command"]
