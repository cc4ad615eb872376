"""The shape docs/architecture.md describes, checked: no import cycles (between modules at import
time, and between packages counting every import, those inside functions too), packages in their
layers, small modules, and no backend named outside neuronc/backends (the core asks a Backend; it
never compares names)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "neuronc"
MAX_LINES = 500
BACKEND_NAMES = {"inductor", "nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx", "vllm-neuron"}
# Layers that must not know any backend by name. deploy/ (its emitters read one backend's artifacts
# each), hubcache/ (optimum-neuron's own cache format) and the CLI's help texts may.
CORE = (
    "buckets",
    "pipeline",
    "profile",
    "preflight",
    "store",
    "model",
    "bundle",
    "checkpoint",
    "keys.py",
    "ci.py",
    "spec.py",
)


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


# The packages (and top-level modules) of neuronc from the bottom up, as docs/architecture.md draws
# them. A unit may import its own layer and the layers below it, never a layer above; counting every
# import, those inside functions and under TYPE_CHECKING included.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"spec", "errors", "fsutil", "jsonfile", "resources", "locations", "progress", "_lazy", "hardware"}),
    frozenset({"neuronc", "hfcompat"}),  # the package root (its version) and transformers config compatibility
    frozenset({"model"}),
    frozenset({"keys"}),
    frozenset({"checkpoint"}),
    frozenset({"bundle"}),
    frozenset({"backends"}),
    frozenset({"profile", "preflight", "store"}),
    frozenset({"hubcache", "runtime", "accuracy"}),
    frozenset({"pipeline", "deploy", "data", "demo", "buckets"}),
    frozenset({"ci"}),
    frozenset({"_output", "_progress_view"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)


def unit_of(module: str) -> str:
    """The package or top-level module of ``neuronc.x.y`` (``x``); ``neuronc`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "neuronc"


def all_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """neuronc modules ``name`` imports anywhere: module body, functions, TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
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


def package_edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the module imports behind that edge."""
    known = modules()
    edges: dict[str, dict[str, list[str]]] = {}
    for name, path in known.items():
        for target in all_imports(name, path, known):
            a, b = unit_of(name), unit_of(target)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, []).append(f"{name} -> {target}")
    return edges


def test_every_unit_has_a_layer() -> None:
    layered = set().union(*LAYERS)
    assert {unit_of(name) for name in modules()} - layered == set()


def test_packages_import_only_their_layer_and_below() -> None:
    layer = {unit: index for index, units in enumerate(LAYERS) for unit in units}
    upward = [
        f"{a} (layer {layer[a]}) imports {b} (layer {layer[b]}): {why[0]}"
        for a, targets in package_edges().items()
        for b, why in targets.items()
        if layer[b] > layer[a]
    ]
    assert upward == []


def test_no_package_import_cycles_counting_imports_inside_functions() -> None:
    edges = package_edges()

    def reaches(start: str, goal: str) -> bool:
        seen: set[str] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(edges.get(node, {}))
        return False

    cycles = sorted(
        f"{a} <-> {b}: {why[0]}" for a, targets in edges.items() for b, why in targets.items() if reaches(b, a)
    )
    assert cycles == []


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
