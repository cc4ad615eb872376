"""Record what vLLM's ``EngineArgs`` and ``LLM`` accept, per version, from the PyPI wheels' sources.

    python scripts/record_vllm_engine_args.py 0.16.0 0.21.0 0.24.0 0.29.0 \
        --out tests/fixtures/vllm_neuron/engine_args.json

Each wheel is fetched with ``pip download --no-deps`` (into a temporary directory, or ``--wheels DIR``
when it is already there) and read without being installed or imported: ``vllm/engine/arg_utils.py``
(the annotated fields of ``class EngineArgs``, which ``add_cli_args`` turns into ``--field-name``
flags) and ``vllm/entrypoints/llm.py`` (``LLM.__init__``'s named parameters; the rest of its
``**kwargs`` go to ``EngineArgs``). The vllm-neuron test double (tests/sdk_doubles/site/vllm) binds
``vllm.LLM(**kwargs)`` to these names; the serving contract checks the CLI form with the real parser.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def engine_fields(source: str) -> list[str]:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return [n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    raise SystemExit("no class EngineArgs in vllm/engine/arg_utils.py")


def llm_parameters(source: str) -> list[str]:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "LLM":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self"]
    raise SystemExit("no LLM.__init__ in vllm/entrypoints/llm.py")


def wheel_for(version: str, directory: Path) -> Path:
    found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"vllm=={version}", "-d", str(directory)]
        subprocess.run(cmd, check=True)
        found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    return found[0]


def record(version: str, wheel: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel) as z:
        arg_utils = z.read("vllm/engine/arg_utils.py").decode()
        llm = z.read("vllm/entrypoints/llm.py").decode()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return {
        "source": f"PyPI vllm=={version}, {wheel.name} (sha256 {digest}): vllm/engine/arg_utils.py, "
        "vllm/entrypoints/llm.py",
        "engine_args_fields": engine_fields(arg_utils),
        "llm_parameters": llm_parameters(llm),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wheels", type=Path, help="a directory holding (or to hold) the wheels")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.wheels or Path(tmp)
        data = {"generated_by": "scripts/record_vllm_engine_args.py", "versions": {}}
        for version in args.versions:
            data["versions"][version] = record(version, wheel_for(version, directory))  # type: ignore[index]
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
