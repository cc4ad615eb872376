"""The shape docs/architecture.md describes, checked: no import cycles, small modules, and no backend
named outside neuronc/backends (the core asks a Backend; it never compares names)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "neuronc"
MAX_LINES = 500
BACKEND_NAMES = {"inductor", "nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"}
# Layers that must not know any backend by name. deploy/ (its emitters read one backend's artifacts
# each), hubcache/ (optimum-neuron's own cache format) and the CLI's help texts may.
CORE = ("pipeline", "profile", "preflight", "store", "model", "bundle", "checkpoint", "keys.py", "ci.py", "spec.py")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")
        found[name.removesuffix(".__init__")] = path
    return found


def top_level_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """neuronc modules imported when ``name`` is imported (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: top_level_imports(name, path, known) for name, path in known.items()}
    visiting: list[str] = []
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append([*visiting[visiting.index(node) :], node])
            return
        visiting.append(node)
        for target in sorted(graph[node]):
            visit(target)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert cycles == []


def test_no_module_is_large() -> None:
    large = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert large == {}


def test_the_core_names_no_backend() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(CORE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in BACKEND_NAMES and id(node) not in docstrings:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert found == []
