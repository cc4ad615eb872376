"""Start-up stays light: the CLI and the light commands never import torch or transformers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "numpy")


def _imported_modules(args: list[str]) -> set[str]:
    """Run the CLI under `python -X importtime` and return every top-level module it imported."""
    code = "import sys; from neuronc.cli import main; sys.argv = ['neuronc', *sys.argv[1:]]; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    modules = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name.split(".")[0])
    assert modules, proc.stderr[-2000:]
    return modules


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", "profiles/llama3.1-8b-instruct-nxdi-inf2.yaml"],
        ["validate", "profiles/minilm-encoder-torch-neuronx.yaml", "--json"],
        ["backends", "--json"],
        ["schema"],
    ],
    ids=lambda a: " ".join(a),
)
def test_light_commands_do_not_import_heavy_modules(args: list[str]) -> None:
    modules = _imported_modules(args)
    assert not (modules & set(HEAVY)), sorted(modules & set(HEAVY))
