"""The shape docs/architecture.md describes, checked: no import cycles (between modules, counting
imports inside functions; between packages and sub-packages, counting every import), packages in
their layers, small modules, private names kept in their package, foreign exceptions mapped through
the one table in errors.py, and no backend named outside neuronc/backends (the core asks a Backend;
it never compares names)."""

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
    "spec.py",
    "build.py",
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
    frozenset({"model", "compile_cache"}),
    frozenset({"keys"}),
    frozenset({"checkpoint"}),
    frozenset({"bundle"}),
    frozenset({"backends", "build"}),  # build: a spec and its Backend, typed together
    frozenset({"profile", "preflight", "store"}),
    frozenset({"hubcache", "runtime", "accuracy"}),
    frozenset({"pipeline", "deploy", "data", "demo", "buckets", "serve"}),  # serve: `neuronc serve` over runtime
    # verdict: the pre-boot verdict, over deploy's serving values; benchmark: `neuronc bench`, over both
    frozenset({"verdict", "benchmark"}),
    frozenset({"_output", "_progress_view"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)


def unit_of(module: str) -> str:
    """The package or top-level module of ``neuronc.x.y`` (``x``); ``neuronc`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "neuronc"


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (imports for annotations only)."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }


def all_imports(name: str, path: Path, known: dict[str, Path], *, type_checking: bool = True) -> set[str]:
    """neuronc modules ``name`` imports anywhere: module body, functions, and (unless
    ``type_checking`` is False) TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = set() if type_checking else type_checking_nodes(tree)
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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


# Where a backend is looked up by name. A build's backend is looked up once, where its profile is
# loaded (the loader makes each typed ``neuronc.build.Build``), and travels in the Build and the
# resolved build made from it; below that only an entry point that receives a bare name across a
# process boundary maps it, once: ``Build.received`` (a Ray task's spec), the Neuron compile worker,
# and ``backend_for_manifest`` (a bundle read from disk). The CLI's `backends` command lists the registry.
BACKEND_LOOKUPS = {
    "get_backend": {
        "backends/__init__.py": {"resolve_backend", "backends_compiling_for", "backend_recognizing"},
        "profile/_load.py": {"_build_one"},
        "cli/backends.py": {"backends_command"},
    },
    "resolve_backend": {
        "backends/__init__.py": {"backend_for_manifest"},
        "backends/neuron/worker.py": {"main"},
        "build.py": {"received"},
    },
    # A bundle is not a build: the modules that read one from disk resolve its manifest's backend.
    "backend_for_manifest": {
        "runtime.py": {"runnable_backend"},  # `run`, `serve`, `verify` load a bundle with its backend's runtime
        "deploy/__init__.py": {"check_compatible"},  # a deploy target's serving stacks for a bundle's manifest
        "verdict/__init__.py": {"host_verdict", "bundle_verdict", "has_verdict"},  # a bundle's serving verdict
        "store/remote_model_card.py": {"_backend_facts"},  # a published bundle's model card names its backend
        "backends/serving.py": {"recorded_engine"},  # the serve lines of a bundle's recorded engine
        "cli/inspect.py": {"_backend_snippet", "environment_comparison"},  # a bundle's load snippet, its toolchain
        "serve/server.py": {"check_bundle"},  # whether `neuronc serve` serves a bundle is its backend's to say
    },
}
# Below the CLI, the one place a Build is made from a profile and the one place it is remade from a spec
# that crossed a process boundary; every other module outside neuronc/backends takes a Build (or the
# resolved build) and reads its ``backend``.
BUILD_MAKERS = {"profile/_load.py": {"_build_one"}, "build.py": {"received"}}


def backend_lookups() -> dict[str, dict[str, set[str]]]:
    """Lookup function -> module -> the (innermost) functions that call it."""
    found: dict[str, dict[str, set[str]]] = {}

    def visit(node: ast.AST, rel: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Call):
                callee = child.func
                name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
                if name in BACKEND_LOOKUPS:
                    found.setdefault(name, {}).setdefault(rel, set()).add(where)
            visit(child, rel, inner)

    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        visit(ast.parse(path.read_text(encoding="utf-8")), rel, "<module>")
    return found


def test_backends_are_looked_up_by_name_only_at_the_entry_points() -> None:
    found = backend_lookups()
    extra = {
        f"{name}: {rel}: {sorted(funcs - BACKEND_LOOKUPS[name].get(rel, set()))}"
        for name, modules_ in found.items()
        for rel, funcs in modules_.items()
        if funcs - BACKEND_LOOKUPS[name].get(rel, set())
    }
    assert extra == set()
    # The build's one resolution is where the profile is loaded.
    assert found["get_backend"]["profile/_load.py"] == {"_build_one"}


def test_nothing_below_the_cli_reaches_a_backend_except_through_the_typed_build() -> None:
    """Issue 39 item 4: outside neuronc/backends and the CLI, a build's backend comes from its typed
    ``Build`` (spec and backend, made once) or the resolved build; nothing looks it up by a spec's name,
    and the untyped ways it was carried before (a private attribute on the spec, recovered with a cast)
    are gone. A bundle read from disk resolves its manifest's backend through ``backend_for_manifest``
    only, in the modules listed (each with why) in ``BACKEND_LOOKUPS``."""
    found = backend_lookups()
    below_cli = {
        f"{name}: {rel}: {sorted(funcs)}"
        for name in ("get_backend", "resolve_backend")
        for rel, funcs in found.get(name, {}).items()
        if not rel.startswith(("backends/", "cli/")) and funcs - BUILD_MAKERS.get(rel, set())
    }
    assert below_cli == set()
    assert set(found["backend_for_manifest"]) == set(BACKEND_LOOKUPS["backend_for_manifest"])
    # The typed build: a frozen pair, in its own module, over a spec that stays a plain value.
    build_module = ast.parse((PACKAGE / "build.py").read_text(encoding="utf-8"))
    build_class = next(n for n in build_module.body if isinstance(n, ast.ClassDef) and n.name == "Build")
    assert class_members(PACKAGE / "build.py", "Build")[:2] == ["spec", "backend"]
    assert any("frozen" in ast.unparse(d) for d in build_class.decorator_list)
    from neuronc.spec import BuildSpec

    assert BuildSpec.__private_attributes__ == {}
    gone = {"backend_of", "bind_backend", "bound_to", "backend_object", "BuildContext"}
    left = [
        f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}: {name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in [getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)]
        if name in gone
    ]
    assert left == []
    # The resolved build holds its Build: the backend is read from there, never stored beside it.
    resolved = class_members(PACKAGE / "pipeline" / "context.py", "ResolvedBuild")
    assert resolved[0] == "build" and "backend" in resolved  # ``backend``: a property over ``build``
    context = ast.parse((PACKAGE / "pipeline" / "context.py").read_text(encoding="utf-8"))
    assert not any(isinstance(n, ast.Name) and n.id == "cast" for n in ast.walk(context))


def test_a_key_input_is_passed_in_one_module() -> None:
    """Adding a key field touches one module (issue 39 item 4): a field of the spec is read in
    ``keys.hashed_inputs`` alone; an input the backend or the environment gives is passed to
    ``keys.config_key`` by the resolved build alone (``pipeline/context.py``: ``resolve_build`` and
    ``ResolvedBuild.key_at``), so every command keys a build the same way."""
    callers: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and callee(node) in {"config_key", "hashed_inputs", "derive_keys"}:
                callers.setdefault(callee(node), set()).add(rel)
    assert callers == {
        "config_key": {"pipeline/context.py"},
        "hashed_inputs": {"keys.py"},
        "derive_keys": {"keys.py"},
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``: its strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_cycles_counting_imports_inside_functions() -> None:
    """Every pair of modules, in any package: an import inside a function (made lazily, for start-up
    time) is still a dependency, and two modules that need each other are one module in two files.
    Imports under TYPE_CHECKING (annotations only) do not count."""
    known = modules()
    graph = {name: all_imports(name, path, known, type_checking=False) for name, path in known.items()}
    assert strongly_connected(graph) == []


def package_of(module: str) -> str:
    """The package a module is in (a package's ``__init__`` is in the package itself)."""
    return module if (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists() else module.rpartition(".")[0]


def test_no_cycles_between_sub_packages() -> None:
    """Packages below the top level (store and a store.remote, pipeline and pipeline.farm) do not need
    each other either, counting every import."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        for target in all_imports(name, path, known, type_checking=False):
            a, b = package_of(name), package_of(target)
            if a != b and "neuronc" not in (a, b):  # the root holds the leaf modules every package uses
                graph.setdefault(a, set()).add(b)
    assert strongly_connected(graph) == []


def test_private_names_stay_in_their_package() -> None:
    """``neuronc.x._y`` is imported only inside ``neuronc.x``; a module's ``_name`` only by that module."""
    known = modules()
    found = []
    for name, path in known.items():
        package = package_of(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("neuronc"):
                continue
            module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            private_names = [
                a.name
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__") and f"{module}.{a.name}" not in known
            ]
            for target in targets:
                parts = target.split(".")
                for i, part in enumerate(parts):
                    owner = ".".join(parts[:i])
                    if part.startswith("_") and not part.startswith("__"):
                        if not (package == owner or package.startswith(owner + ".")):
                            found.append(f"{name} imports {target}")
                        break
            if private_names and module != name:
                found.append(f"{name} imports {private_names} from {module}")
    assert found == []


# Exception types that say the environment failed (a library missing, the network, a client library's
# own errors): a NeuroncError made from one takes its class and hint from errors.FOREIGN_ERRORS.
ENVIRONMENT_EXCEPTIONS = {"Exception", "BaseException", "ImportError", "ModuleNotFoundError", "ConnectionError"}
ENVIRONMENT_EXCEPTIONS |= {"TimeoutError"}
# Handlers that decide something else than what failed in the environment, with why.
DECIDED_ELSEWHERE = {
    # whatever a backend's compile raises is that build's compile failure (exit 3)
    ("pipeline/stages.py", "CompileError"),
    # an unreachable Hub (the table's NETWORK row says so) with no local copy is a miss (exit 6)
    ("hubcache/hub.py", "CacheMissError"),
    # ray.init says "cannot connect" with RuntimeError and ValueError as well as ConnectionError
    ("pipeline/farm/cluster.py", "EnvironmentIncompatibleError"),
}
TABLE_PREDICATES = {"is_disk_full", "is_network_error", "is_client_library_error"}


def test_foreign_exceptions_map_through_the_one_table() -> None:
    """Outside errors.py no handler of an environment exception (or of a client library's: botocore,
    huggingface_hub, fsspec...) builds a NeuroncError itself, and nothing asks the table's predicates
    directly: sites call ``from_foreign`` / ``Foreign.convert`` or compare ``foreign_row``. Parse
    errors of a file neuronc reads (YAML, pydantic, safetensors) stay at their site, which knows the
    file, line and field."""
    import neuronc.errors as errors
    from neuronc.errors import CLIENT_LIBRARY_PACKAGES

    neuronc_errors = {n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.NeuroncError)}
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "errors.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        client_names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in CLIENT_LIBRARY_PACKAGES
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in TABLE_PREDICATES:
                found.append(f"{rel}:{node.lineno}: {node.id}")
            if not isinstance(node, ast.ExceptHandler) or node.type is None:
                continue
            caught = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(node.type)
                if isinstance(n, ast.Name | ast.Attribute)
            }
            if not caught & (ENVIRONMENT_EXCEPTIONS | client_names):
                continue
            made = [
                call
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in neuronc_errors
            ]
            found += [
                f"{rel}:{call.lineno}: except {sorted(caught)} -> {call.func.id}(...)"
                for call in made
                if isinstance(call.func, ast.Name) and (rel, call.func.id) not in DECIDED_ELSEWHERE
            ]
    assert found == []


# The command line's boundary (neuronc/cli, neuronc/__main__.py): a failure ends a command in one
# function, cli._app.command_failed, which decides the exit code, the message and hint on stderr and
# the --json document. A handler there that catches a failure hands it to command_failed, or is one of
# these, which catch without ending the command: they gather the failure into their report, or amend
# its hint and raise it again.
CAUGHT_WITHOUT_ENDING = {
    "cli/inspect.py": {"_verify_remote", "_run_checks", "environment_comparison"},
    "cli/deploy.py": {"_verdict"},
    "cli/profiles.py": {"validate_command"},
}
FAILURES = {"KeyboardInterrupt", "Exception", "BaseException", "BrokenPipeError", "UsageError", "ClickException"}
BOUNDARY = [*(PACKAGE / "cli").rglob("*.py"), PACKAGE / "__main__.py"]


def callee(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")


def calls_in(node: ast.AST) -> set[str]:
    return {callee(call) for call in ast.walk(node) if isinstance(call, ast.Call)}


def boundary_handlers() -> list[tuple[str, str, ast.ExceptHandler]]:
    """(module, top-level function, handler) for every ``except`` of a failure at the command line."""
    import neuronc.cli._app as app
    import neuronc.errors as errors

    failures = FAILURES | {
        name
        for module in (errors, app)
        for name, cls in vars(module).items()
        if isinstance(cls, type) and issubclass(cls, errors.NeuroncError)
    }
    found: list[tuple[str, str, ast.ExceptHandler]] = []

    def visit(node: ast.AST, rel: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            top = where == "<module>" and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            inner = child.name if top else where
            if isinstance(child, ast.ExceptHandler) and child.type is not None:
                caught = {
                    n.id if isinstance(n, ast.Name) else n.attr
                    for n in ast.walk(child.type)
                    if isinstance(n, ast.Name | ast.Attribute)
                }
                if caught & failures:
                    found.append((rel, where, child))
            visit(child, rel, inner)

    for path in BOUNDARY:
        visit(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(PACKAGE).as_posix(), "<module>")
    return found


def test_the_command_line_ends_a_failure_in_one_handler() -> None:
    """Every handler of a failure at the command line (a NeuroncError, Ctrl-C, any exception, Click's
    usage errors) calls command_failed, or catches without ending the command (CAUGHT_WITHOUT_ENDING,
    where nothing exits); and nowhere else is an exit code taken from an exception."""
    found = []
    through_it = set()
    for rel, where, handler in boundary_handlers():
        calls = calls_in(handler)
        if "command_failed" in calls:
            through_it.add((rel, where))
        elif where not in CAUGHT_WITHOUT_ENDING.get(rel, set()) or calls & {"Exit", "exit", "explain"}:
            found.append(f"{rel}:{handler.lineno}: {where} catches {ast.unparse(handler.type or handler)}")
    for path in BOUNDARY:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or callee(node) not in {"Exit", "exit"}:
                continue
            if any(isinstance(a, ast.Attribute) and a.attr == "exit_code" for arg in node.args for a in ast.walk(arg)):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
    # The places the architecture review found handling errors each hand them to the one handler.
    assert {
        ("cli/_app.py", "handle_errors"),
        ("cli/_app.py", "run_app"),
        ("cli/compile.py", "compile_command"),
    } <= through_it


# Modules whose ``Any`` is Click's: a command is any ``Callable[..., Any]``, parameter types and
# callbacks convert ``Any``, and keyword arguments are passed on to Click (click/core.py,
# click/types.py); each module says so where it uses it. Nowhere else in the CLI: its reports are
# typed in the library, and a document it builds itself is a TypedDict (JSONValue, cli/_report.py,
# for what it passes on unread).
CLICK_TYPED = {"cli/_cli.py": 20, "cli/_app.py": 6}


def any_uses(path: Path) -> int:
    """``Any`` in a module's code (its imports and annotations), not in its words."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    named = sum(
        1
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")
    )
    imported = sum(
        1 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names if a.name == "Any"
    )
    return named + imported


def test_the_cli_passes_typed_reports_not_any() -> None:
    """The architecture review found 83 ``Any`` in the CLI where the reports are typed: the CLI passes
    the typed reports (and their TypedDicts) instead, and only Click's modules use ``Any``."""
    found = {
        rel: n
        for path in sorted((PACKAGE / "cli").rglob("*.py"))
        if (n := any_uses(path)) and (rel := path.relative_to(PACKAGE).as_posix()) not in CLICK_TYPED
    }
    assert found == {}, (
        f"Any in neuronc/cli outside Click's modules: {found}. The reports the CLI prints are typed: pass "
        "the report objects, or give a document the CLI builds a TypedDict (JSONValue for what it passes "
        "on unread, Mapping[str, object] for what it only prints) instead of Any"
    )
    for rel, most in CLICK_TYPED.items():
        n = any_uses(PACKAGE / rel)
        assert n <= most, f"{rel}: {n} uses of Any, at most {most}: only Click's callback and parameter types need it"


BACKEND_FAMILIES = sorted(p.parent.name for p in (PACKAGE / "backends").glob("*/__init__.py"))
# Imports of a backend family from outside it that are still to move into the family (issue 40 item 4:
# "a backend is one room"). This list may only shrink: a new entry is a failure, and so is an entry
# that no longer imports the family (remove it from here).
FAMILY_IMPORTS_LEFT: dict[str, set[str]] = {
    # The vllm-neuron family builds on the Neuron family: its backend is a NeuronBackend (the Neuron
    # toolchain, support matrix checks and bundle files), and its compile copies the checkpoint and
    # pins the platform target the way the Neuron family does. One family extending another, never a
    # layer reaching into a family.
    "neuronc.backends.vllm_neuron.backend": {"neuron"},
    "neuronc.backends.vllm_neuron.build": {"neuron"},
}


def family_imports() -> dict[str, set[str]]:
    """module -> the backend families it imports from outside them: anywhere in the module (inside
    functions and under TYPE_CHECKING too), aliased (``import ... as``), from the parent package
    (``from neuronc.backends import vllm_neuron``) or relative."""
    known = modules()
    found: dict[str, set[str]] = {}
    for name, path in known.items():
        own = name.split(".")[2] if name.startswith("neuronc.backends.") and name.count(".") >= 2 else None
        for target in all_imports(name, path, known):
            parts = target.split(".")
            family = parts[2] if len(parts) >= 3 and parts[:2] == ["neuronc", "backends"] else None
            if family in BACKEND_FAMILIES and family != own:
                found.setdefault(name, set()).add(str(family))
    return found


def test_no_module_outside_a_backend_family_imports_from_it() -> None:
    assert BACKEND_FAMILIES == ["inductor", "neuron", "vllm_neuron"]
    found = family_imports()
    new = {m: sorted(f - FAMILY_IMPORTS_LEFT.get(m, set())) for m, f in found.items()}
    assert {m: f for m, f in new.items() if f} == {}, "import a backend family only from inside it"
    stale = {m: sorted(f - found.get(m, set())) for m, f in FAMILY_IMPORTS_LEFT.items()}
    assert {m: f for m, f in stale.items() if f} == {}, "moved: drop it from FAMILY_IMPORTS_LEFT"


def test_the_family_import_check_sees_aliased_parent_and_function_level_imports(tmp_path: Path) -> None:
    source = (
        "import neuronc.backends.inductor.format as fmt\n"
        "from neuronc.backends import vllm_neuron\n"
        "def f():\n"
        "    from neuronc.backends.neuron.env import platform_target\n"
        "    return platform_target\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    known = {**modules(), "neuronc.probe": path}
    targets = {t.split(".")[2] for t in all_imports("neuronc.probe", path, known) if t.count(".") >= 2}
    assert targets >= {"inductor", "vllm_neuron", "neuron"}


def test_plan_and_matrix_live_beside_compile_in_the_pipeline() -> None:
    """`plan` and `matrix` are pipeline stages over resolved builds, not a root `ci.py` (issue 39)."""
    assert not (PACKAGE / "ci.py").exists()
    assert (PACKAGE / "pipeline" / "plan.py").is_file()


def class_members(path: Path, name: str) -> list[str]:
    """The members a class body declares: annotated attributes, methods and properties, in order."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name).body
    found = []
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node.name)
    return found


def test_the_backend_protocol_is_its_identity_its_capabilities_and_its_compile() -> None:
    """A backend is one room (issue 40 item 4): the protocol holds at most 12 members; profile rules, the
    toolchain and keys, the runtime and serving are capability objects, each implemented by the backend."""
    members = class_members(PACKAGE / "backends" / "base.py", "Backend")
    assert len(members) <= 12, members
    assert {"rules", "toolchain", "runtime", "serving", "weights_binding", "plan", "compile"} <= set(members)


def test_every_backend_gives_every_member_of_each_capability() -> None:
    from neuronc.backends import backend_names, get_backend

    capabilities = PACKAGE / "backends" / "capabilities.py"
    wanted = {
        "rules": class_members(capabilities, "BackendRules"),
        "toolchain": class_members(capabilities, "BackendToolchain"),
        "runtime": class_members(capabilities, "BackendRuntime"),
    }
    assert all(wanted.values())
    missing = {
        (name, capability, member)
        for name in backend_names()
        for capability, members in wanted.items()
        for member in members
        if not hasattr(getattr(get_backend(name), capability), member)
    }
    assert missing == set()
