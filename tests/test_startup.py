"""Start-up stays light: the CLI and the light commands never import torch or transformers.

Commands that read no profile and no bundle do not import pydantic either (about 0.1 s): the command
line converts its values with Click's types (neuronc.cli._cli), not with pydantic as Typer 0.29 did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _demo import Demo

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "numpy")


def _imported_modules(args: list[str], env: dict[str, str] | None = None, *, full: bool = False) -> set[str]:
    """Run the CLI under `python -X importtime` and return every top-level module it imported
    (``full``: every module, by its dotted name)."""
    code = "import sys; from neuronc.cli import main; sys.argv = ['neuronc', *sys.argv[1:]]; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    # A command that fails before it gets far imports little: only a run that succeeded says anything.
    assert proc.returncode == 0, f"neuronc {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    modules = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name if full else name.split(".")[0])
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
        ["cache", "status", "--cache-dir", "tests/fixtures", "--json"],
        ["cache", "cleanup", "--cache-dir", "tests/fixtures", "--dry-run"],
    ],
    ids=lambda a: " ".join(a),
)
def test_light_commands_do_not_import_heavy_modules(args: list[str]) -> None:
    modules = _imported_modules(args)
    assert not (modules & set(HEAVY)), sorted(modules & set(HEAVY))


SNAPSHOT = ROOT / "tests" / "fixtures" / "hf-neuron-cache" / "snapshot"


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["cache-lookup", "example-org/tiny-llama", "--snapshot", str(SNAPSHOT), "--json"],
        ["cache-lookup", "example-org/tiny-llama", "--snapshot", str(SNAPSHOT), "--compiler-version", "2.21"],
        ["store", "list", "--help"],
        ["cache", "status", "--cache-dir", "tests/fixtures", "--json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_commands_reading_no_profile_do_not_import_pydantic(args: list[str], tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    modules = _imported_modules(args, env)
    assert "pydantic" not in modules


def test_run_generates_without_transformers(demo: Demo) -> None:
    """`neuronc run` of the demo bundle reads its tokenizer.json with `tokenizers`: transformers stays out.
    Its graphs load without torch's compile stack (neuronc.backends.inductor.aoti): no torch._inductor,
    torch._dynamo or sympy, each about as long again as `import torch`."""
    args = ["run", str(demo.bundle), "--prompt", "The quick brown fox", "-n", "4", "--json"]
    modules = _imported_modules(args, env=demo.env(), full=True)
    assert {"torch", "tokenizers"} <= modules
    compile_stack = {"transformers", "torch._inductor", "torch._dynamo", "sympy"}
    assert not modules & compile_stack, sorted(modules & compile_stack)
