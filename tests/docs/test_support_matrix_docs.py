"""docs/backends.md carries the support matrix as the package's table says (scripts/gen_support_matrix.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_support_matrix_tables_in_the_docs_are_generated_from_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_support_matrix.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_release_of_the_table_is_in_the_docs() -> None:
    from neuronc.backends.support import releases

    text = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    for release in releases():
        assert f"| {release.version}" in text, release.version
