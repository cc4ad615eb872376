"""Static (``ast``-only) reading of an upstream Python package for ``record_sdk_signatures.py``.

A ``SourceTree`` maps module names to files of one checkout, follows imports and re-exports, and
linearises class bases (C3) so an inherited method is found where it is defined. Nothing is
imported or executed. ``extract_name`` turns a class, function or method into a record entry:
its parameters as written, the effective parameters behind ``*args, **kwargs`` forwarding (as in
NxDI's ``NeuronBaseForCausalLM.__init__(*args, **kwargs)``), the keys it reads from ``**kwargs``
(``kwargs.pop("key", default)``, also in helpers it hands the dict to and in constructors it
forwards ``**kwargs`` to), and what it does with an unknown key.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD")
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
# Unknown-keyword policies, strictest first.
POLICIES = ("error", "warn", "stored", "ignored")
_MAX_DEPTH = 24
FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "default": self.default}


@dataclass
class Module:
    name: str
    rel: str
    source: str
    tree: ast.Module
    is_package: bool
    defs: dict[str, ast.stmt]
    imports: dict[str, str]

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def where(self, node: ast.AST) -> dict[str, Any]:
        return {"path": self.rel, "line": getattr(node, "lineno", 0)}


@dataclass(frozen=True)
class ClassRef:
    module: Module
    node: ast.ClassDef
    qualname: str


@dataclass(frozen=True)
class FuncRef:
    module: Module
    node: FuncNode
    qualname: str  # where it is defined
    owner: ClassRef | None = None  # the class that defines it
    bound: ClassRef | None = None  # the class it was looked up on (``cls`` inside it)

    @property
    def binding(self) -> str | None:
        if self.owner is None:
            return None
        names = {ast.unparse(d).split("(")[0] for d in self.node.decorator_list}
        if "staticmethod" in names:
            return "staticmethod"
        if "classmethod" in names:
            return "classmethod"
        if "property" in names or any(n.endswith((".setter", ".getter")) for n in names):
            return "property"
        return "instance"


@dataclass(frozen=True)
class DataRef:
    module: Module
    node: ast.stmt
    qualname: str


Resolved = ClassRef | FuncRef | DataRef | Module


def _module_scope(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, including those inside top-level if/try blocks (conditional imports)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _module_scope(stmt.body)
            yield from _module_scope(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                yield from _module_scope(block)
        else:
            yield stmt


def walk_body(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under a function in source order, not descending into nested functions, lambdas or classes."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            yield from walk_body(child)


def parameters(mod: Module, args: ast.arguments) -> list[Param]:
    out: list[Param] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append(Param(arg.arg, kind, None if default is None else mod.text(default)))
    if args.vararg:
        out.append(Param(args.vararg.arg, "VAR_POSITIONAL", None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(Param(arg.arg, "KEYWORD_ONLY", None if kw_default is None else mod.text(kw_default)))
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "VAR_KEYWORD", None))
    return out


def bound_params(fn: FuncRef) -> list[Param]:
    """Parameters as seen through an instance or the class (``self``/``cls`` dropped)."""
    params = parameters(fn.module, fn.node.args)
    if fn.binding in ("instance", "classmethod", "property") and params and params[0].kind in POSITIONAL:
        return params[1:]
    return params


def valid_order(params: list[Param]) -> bool:
    order = [KINDS.index(p.kind) for p in params]
    if order != sorted(order) or len({p.name for p in params}) != len(params):
        return False
    if sum(p.kind == "VAR_POSITIONAL" for p in params) > 1 or sum(p.kind == "VAR_KEYWORD" for p in params) > 1:
        return False
    seen_default = False
    for p in params:
        if p.kind in POSITIONAL:
            if p.default is None and seen_default:
                return False
            seen_default = seen_default or p.default is not None
    return True


class SourceTree:
    """The modules of one package in a checkout (``<root>/src/<pkg>`` or ``<root>/<pkg>``)."""

    def __init__(self, root: Path, import_name: str) -> None:
        self.root = root
        self.import_name = import_name
        for candidate in (root / "src" / import_name, root / import_name):
            if (candidate / "__init__.py").is_file():
                self.base = candidate.parent
                break
        else:
            raise SystemExit(f"{root}: no {import_name}/__init__.py under src/ or the root")
        self._modules: dict[str, Module | None] = {}
        self._mro: dict[str, list[ClassRef | str]] = {}

    # -- modules and names -----------------------------------------------------------------------

    def module(self, name: str) -> Module | None:
        if name.split(".")[0] != self.import_name:
            return None
        if name not in self._modules:
            self._modules[name] = self._load(name)
        return self._modules[name]

    def _load(self, name: str) -> Module | None:
        parts = name.split(".")
        candidates = [
            (self.base.joinpath(*parts) / "__init__.py", True),
            (self.base.joinpath(*parts[:-1], parts[-1] + ".py"), False),
        ]
        found = next(((p, pkg) for p, pkg in candidates if p.is_file()), None)
        if found is None:
            return None
        path, is_package = found
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return None
        mod = Module(name, path.relative_to(self.root).as_posix(), source, tree, is_package, {}, {})
        package = name if is_package else name.rpartition(".")[0]
        for stmt in _module_scope(tree.body):
            if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                mod.defs[stmt.name] = stmt
                mod.imports.pop(stmt.name, None)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        mod.defs[target.id] = stmt
                        mod.imports.pop(target.id, None)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    local = alias.asname or alias.name.split(".")[0]
                    mod.imports[local] = alias.name if alias.asname else local
                    mod.defs.pop(local, None)
            elif isinstance(stmt, ast.ImportFrom):
                origin = stmt.module or ""
                if stmt.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (stmt.level - 1)]
                    origin = ".".join([*anchor, origin] if origin else anchor)
                for alias in stmt.names:
                    if alias.name != "*":
                        mod.imports[alias.asname or alias.name] = f"{origin}.{alias.name}"
                        mod.defs.pop(alias.asname or alias.name, None)
        return mod

    def version(self) -> str | None:
        for name in (f"{self.import_name}._version", f"{self.import_name}.version"):
            mod = self.module(name)
            stmt = mod.defs.get("__version__") if mod else None
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                return str(stmt.value.value)
        return None

    def resolve(self, qualname: str, depth: int = 0) -> Resolved | None:
        if depth > _MAX_DEPTH:
            return None
        parts = qualname.split(".")
        for i in range(len(parts), 0, -1):
            mod = self.module(".".join(parts[:i]))
            if mod is None:
                continue
            obj: Resolved | None = mod
            for attr in parts[i:]:
                obj = self.member(obj, attr, depth + 1) if obj is not None else None
            return obj
        return None

    def member(self, obj: Resolved, attr: str, depth: int = 0) -> Resolved | None:
        if isinstance(obj, Module):
            stmt = obj.defs.get(attr)
            qual = f"{obj.name}.{attr}"
            if isinstance(stmt, ast.ClassDef):
                return ClassRef(obj, stmt, qual)
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                return FuncRef(obj, stmt, qual)
            if stmt is not None:
                return DataRef(obj, stmt, qual)
            if attr in obj.imports:
                return self.resolve(obj.imports[attr], depth + 1)
            return self.module(qual)
        if isinstance(obj, ClassRef):
            return self.find_method(obj, attr)
        return None

    def why_missing(self, qualname: str) -> str:
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            found = self.resolve(".".join(parts[:i]))
            if isinstance(found, ClassRef):
                external = [b for b in self.mro(found) if isinstance(b, str) and b != "builtins.object"]
                outside = f" (nor do its bases in this checkout; bases elsewhere: {', '.join(external)})"
                return f"class {'.'.join(parts[:i])} has no attribute {parts[i]!r}{outside if external else ''}"
            if found is not None:
                what = "module" if isinstance(found, Module) else "name"
                where = f" ({found.rel})" if isinstance(found, Module) else ""
                return f"{what} {'.'.join(parts[:i])}{where} has no attribute {parts[i]!r}"
        return f"no module {'.'.join(parts[:2])} in this checkout"

    def expr_qualname(self, mod: Module, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            if expr.id in mod.defs:
                return f"{mod.name}.{expr.id}"
            return mod.imports.get(expr.id, f"builtins.{expr.id}" if expr.id == "object" else None)
        if isinstance(expr, ast.Attribute):
            base = self.expr_qualname(mod, expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Subscript):
            return self.expr_qualname(mod, expr.value)
        return None

    # -- classes ---------------------------------------------------------------------------------

    def bases(self, cls: ClassRef) -> list[ClassRef | str]:
        out: list[ClassRef | str] = []
        for base in cls.node.bases:
            q = self.expr_qualname(cls.module, base)
            found = self.resolve(q) if q else None
            out.append(found if isinstance(found, ClassRef) else (q or cls.module.text(base)))
        return out

    def mro(self, cls: ClassRef, depth: int = 0) -> list[ClassRef | str]:
        """C3 linearisation; classes outside this checkout are leaves named by their qualname."""
        if cls.qualname in self._mro:
            return self._mro[cls.qualname]
        if depth > _MAX_DEPTH:
            return [cls]

        def key(x: ClassRef | str) -> str:
            return x.qualname if isinstance(x, ClassRef) else x

        bases = [b for b in self.bases(cls) if key(b) != "builtins.object"]
        seqs = [self.mro(b, depth + 1) if isinstance(b, ClassRef) else [b] for b in bases] + [bases]
        result: list[ClassRef | str] = [cls]
        while seqs := [s for s in seqs if s]:
            for seq in seqs:
                head = seq[0]
                if not any(key(head) in map(key, s[1:]) for s in seqs):
                    break
            else:  # inconsistent hierarchy: fall back to depth-first order
                head = seqs[0][0]
            result.append(head)
            seqs = [s[1:] if key(s[0]) == key(head) else s for s in seqs]
        self._mro[cls.qualname] = result
        return result

    def find_method(self, cls: ClassRef, name: str) -> FuncRef | None:
        for entry in self.mro(cls):
            if isinstance(entry, ClassRef):
                for stmt in reversed(entry.node.body):
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                        return FuncRef(entry.module, stmt, f"{entry.qualname}.{name}", entry, cls)
        return None

    def next_method(self, fn: FuncRef, name: str) -> FuncRef | None:
        """What ``super().<name>`` reaches from ``fn``: the MRO of the bound class after fn's owner."""
        if fn.owner is None or fn.bound is None:
            return None
        chain = self.mro(fn.bound)
        keys = [e.qualname if isinstance(e, ClassRef) else e for e in chain]
        after = chain[keys.index(fn.owner.qualname) + 1 :] if fn.owner.qualname in keys else []
        for entry in after:
            if isinstance(entry, ClassRef):
                for stmt in reversed(entry.node.body):
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                        return FuncRef(entry.module, stmt, f"{entry.qualname}.{name}", entry, fn.bound)
        return None

    # -- calls -----------------------------------------------------------------------------------

    def call_target(self, fn: FuncRef, func: ast.expr) -> FuncRef | ClassRef | str | None:
        """The callable a call inside ``fn`` reaches: a function, a class (its constructor) or a qualname."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            inner = func.value.func
            if isinstance(inner, ast.Name) and inner.id == "super":
                return self.next_method(fn, func.attr)
        if isinstance(func, ast.Name) and func.id == "cls" and fn.bound is not None:
            return fn.bound
        if isinstance(func, ast.Name):  # a function defined inside fn
            for node in walk_body(fn.node):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == func.id:
                    return FuncRef(fn.module, node, f"{fn.qualname}.<locals>.{func.id}")
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and fn.bound is not None
        ):
            return self.find_method(fn.bound, func.attr)
        q = self.expr_qualname(fn.module, func)
        found = self.resolve(q) if q else None
        if isinstance(found, FuncRef | ClassRef):
            return found
        return q

    def constructor(self, cls: ClassRef) -> FuncRef | None:
        return self.find_method(cls, "__init__")

    def returned_class(self, fn: FuncRef, depth: int = 0) -> ClassRef | None:
        """The class a ``get_*_cls``-style method returns, when it has exactly one return."""
        returns = [n for n in walk_body(fn.node) if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) != 1 or depth > _MAX_DEPTH or returns[0].value is None:
            return None
        return self._eval_class(fn, returns[0].value, depth + 1)

    def _eval_class(self, fn: FuncRef, expr: ast.expr, depth: int) -> ClassRef | None:
        if isinstance(expr, ast.Name) and expr.id == "cls":
            return fn.bound
        if isinstance(expr, ast.Call) and not expr.args and isinstance(expr.func, ast.Attribute):
            base = self._eval_class(fn, expr.func.value, depth + 1)
            method = self.find_method(base, expr.func.attr) if base else None
            return self.returned_class(method, depth + 1) if method else None
        if isinstance(expr, ast.Name | ast.Attribute):
            q = self.expr_qualname(fn.module, expr)
            found = self.resolve(q) if q else None
            return found if isinstance(found, ClassRef) else None
        return None
