"""Write docs/cli.md, the command reference, from the CLI itself (Typer's own Markdown generator).

    python scripts/gen_cli_reference.py           # refresh docs/cli.md
    python scripts/gen_cli_reference.py --check   # exit 1, with a diff, if docs/cli.md is stale

tests/docs/test_cli_reference.py runs the check, so a flag or a help text changed without
refreshing the page fails the suite.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
REFRESH = "python scripts/gen_cli_reference.py"
HEADER = (
    f"<!-- Generated from the CLI by `{REFRESH}` (Typer's `utils docs`); do not edit by hand:\n"
    "     tests/docs/test_cli_reference.py fails when this page and the CLI disagree. -->\n\n"
)


def render() -> str:
    """The reference as Typer writes it for `neuronc`, whatever the terminal and environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURONC_")}
    env.update(COLUMNS="80", NO_COLOR="1", TERM="dumb")
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "cli.md"
        subprocess.run(
            [sys.executable, "-m", "typer", "neuronc.cli", "utils", "docs", "--name", "neuronc",
             "--title", "neuronc command reference", "--output", str(target)],
            check=True, capture_output=True, env=env, cwd=tmp,
        )  # fmt: skip
        return HEADER + target.read_text(encoding="utf-8").rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/cli.md instead of writing it")
    args = parser.parse_args(argv)
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
