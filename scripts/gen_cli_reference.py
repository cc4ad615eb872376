"""Write docs/cli.md, the command reference, from the CLI itself (its Click command tree).

    python scripts/gen_cli_reference.py           # refresh docs/cli.md
    python scripts/gen_cli_reference.py --check   # exit 1, with a diff, if docs/cli.md is stale

tests/docs/test_cli_reference.py runs the check, so a flag or a help text changed without
refreshing the page fails the suite. Hand-written because Click has no Markdown generator; the
layout is that of Typer's `utils docs`, which wrote the page while the CLI was built on Typer.
Every piece comes from Click's public API (usage pieces, help records, short help), so the page
says what `--help` says.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
REFRESH = "python scripts/gen_cli_reference.py"
HEADER = (
    f"<!-- Generated from the CLI by `{REFRESH}`; do not edit by hand:\n"
    "     tests/docs/test_cli_reference.py fails when this page and the CLI disagree. -->\n\n"
)


def render() -> str:
    """The reference for `neuronc`, whatever the terminal and environment (a fresh interpreter, 80 columns)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURONC_")}
    env.update(COLUMNS="80", NO_COLOR="1", TERM="dumb")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--print"], check=True, capture_output=True, text=True, env=env
    )
    return HEADER + proc.stdout.rstrip("\n") + "\n"


def _markdown(command: click.Command, ctx: click.Context, path: str, depth: int, title: str = "") -> str:
    """One command's section, then its subcommands' (a group's), depth-first."""
    text = "#" * depth + f" {title or f'`{path}`'}\n\n"
    if command.help:
        text += f"{command.help}\n\n"
    text += f"**Usage**:\n\n```console\n$ {path} {' '.join(command.collect_usage_pieces(ctx))}\n```\n\n"
    arguments, options = [], []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            (arguments if isinstance(param, click.Argument) else options).append(record)
    for heading, rows in (("Arguments", arguments), ("Options", options)):
        if rows:
            text += f"**{heading}**:\n\n" + "".join(f"* `{n}`" + (f": {h}" if h else "") + "\n" for n, h in rows) + "\n"
    if command.epilog:
        text += f"{command.epilog}\n\n"
    if isinstance(command, click.Group):
        subcommands = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
        listed = [(name, sub) for name, sub in subcommands if sub is not None]
        if listed:
            text += "**Commands**:\n\n"
            for name, sub in listed:
                short = sub.get_short_help_str()
                text += f"* `{name}`" + (f": {short}" if short else "") + "\n"
            text += "\n"
        for name, sub in listed:
            text += _markdown(sub, ctx, f"{path} {name}", depth + 1)
    return text


def markdown() -> str:
    """docs/cli.md without its header."""
    from neuronc.cli import app

    ctx = click.Context(app, info_name="neuronc")
    return _markdown(app, ctx, "neuronc", 1, title="neuronc command reference").strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/cli.md instead of writing it")
    parser.add_argument("--print", action="store_true", help="print the page without its header (render() runs this)")
    args = parser.parse_args(argv)
    if args.print:
        print(markdown())
        return 0
    text = render()
    if not args.check:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)}")
        return 0
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if current == text:
        return 0
    diff = difflib.unified_diff(
        current.splitlines(keepends=True), text.splitlines(keepends=True), "docs/cli.md", "the CLI now", n=1
    )
    sys.stdout.writelines(diff)
    print(f"\ndocs/cli.md is out of date with the CLI; refresh it with: {REFRESH}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
