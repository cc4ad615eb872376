"""Record entries for ``record_sdk_signatures.py``: signatures, ``**kwargs`` keys and data tables.

The ``**kwargs`` analysis reads a function body for the keys it takes from the dict
(``kwargs.pop/get/setdefault("key", default)``, ``kwargs["key"]``, ``"key" in kwargs``), follows
the dict into helpers (``self._get_lnc(kwargs)``) and into the callables it is forwarded to with
``**kwargs`` (``super().__init__(**kwargs)``), and classifies what an unknown key meets:
``error`` (``if kwargs: raise``, ``assert not kwargs``, or a forward target without ``**kwargs``),
``warn`` (``if kwargs: logging.warning(...)``: dropped with a log line), ``stored``
(``setattr(self, k, v)`` for each item) or ``ignored``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Any

from _sdk_ast import (
    KINDS,
    POLICIES,
    POSITIONAL,
    ClassRef,
    DataRef,
    FuncRef,
    Module,
    Param,
    SourceTree,
    bound_params,
    parameters,
    valid_order,
    walk_body,
)

_MAX_DEPTH = 16
_WARN_CALLS = ("warn", "warning", "info", "debug", "print")


@dataclass
class KwargsInfo:
    name: str
    keys: dict[str, str | None] = field(default_factory=dict)
    key_sources: dict[str, str] = field(default_factory=dict)
    key_lines: dict[str, int] = field(default_factory=dict)  # own-body line of the read (or helper call)
    popped: dict[str, int] = field(default_factory=dict)  # key -> first line it is removed from the dict
    policy: str | None = None  # from this body's own check
    check_source: str | None = None
    check_line: int | None = None
    forwards: list[dict[str, Any]] = field(default_factory=list)
    # Per forward target: (line, keys it accepts, whether it rejects others, its policy, where).
    targets: list[tuple[int, set[str], bool, str, str | None]] = field(default_factory=list)
    late_keys: set[str] = field(default_factory=set)  # read after a forward target's unknown-key check

    def add(self, key: str, default: str | None, source: str, line: int, *, pop: bool = False) -> None:
        if key not in self.keys or (self.keys[key] is None and default is not None):
            self.keys[key] = default
        self.key_sources.setdefault(key, source)
        self.key_lines.setdefault(key, line)
        if pop:
            self.popped.setdefault(key, line)

    def finish(self) -> KwargsInfo:
        """Drop keys that reach a forward target which rejects them (read here, refused there)."""
        for key in list(self.keys):
            for line, accepted, strict, _, _ in self.targets:
                if strict and key not in accepted and self.popped.get(key, line + 1) > line:
                    del self.keys[key], self.key_sources[key], self.key_lines[key]
                    break
        return self

    def _strictest(self) -> tuple[str, str | None] | None:
        found = [(policy, where) for _, _, _, policy, where in self.targets]
        return min(found, key=lambda f: POLICIES.index(f[0])) if found else None

    @property
    def unknown(self) -> str:
        if self.policy:
            return self.policy
        strictest = self._strictest()
        if strictest is not None:
            return strictest[0]
        return "unresolved" if any(f["target"] is None for f in self.forwards) else "ignored"

    def to_json(self) -> dict[str, Any]:
        after = {k for k, line in self.key_lines.items() if self.check_line and line > self.check_line}
        after |= self.late_keys if self.policy is None else set()
        strictest = self._strictest()
        return {
            "name": self.name,
            "keys": self.keys,
            "key_sources": self.key_sources,
            "unknown": self.unknown,
            "unknown_source": self.check_source if self.policy else strictest[1] if strictest else None,
            "keys_read_after_unknown_check": sorted(after & set(self.keys)),
            "forwards": sorted(self.forwards, key=lambda f: (f["source"], f["call"])),
        }


def _is_name(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_len_of(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and _is_name(node.func, "len")
        and len(node.args) == 1
        and _is_name(node.args[0], name)
    )


def _nonempty_test(test: ast.expr, name: str) -> bool:
    """``kwargs``, ``len(kwargs)``, ``len(kwargs) > 0``, ``kwargs != {}``: true when keys are left."""
    if _is_name(test, name) or _is_len_of(test, name):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op = test.left, test.ops[0]
        if _is_name(left, name) or _is_len_of(left, name):
            return isinstance(op, ast.Gt | ast.NotEq | ast.IsNot)
    return False


def _empty_test(test: ast.expr, name: str) -> bool:
    """``not kwargs``, ``len(kwargs) == 0``, ``kwargs == {}``: true when no keys are left."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _nonempty_test(test.operand, name)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return (_is_name(test.left, name) or _is_len_of(test.left, name)) and isinstance(test.ops[0], ast.Eq)
    return False


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _check_policy(node: ast.AST, name: str) -> str | None:
    if isinstance(node, ast.Assert) and _empty_test(node.test, name):
        return "error"
    if isinstance(node, ast.If) and _nonempty_test(node.test, name):
        inner = [n for stmt in node.body for n in ast.walk(stmt)]
        if any(isinstance(n, ast.Raise) for n in inner):
            return "error"
        if any(isinstance(n, ast.Call) and _call_name(n) in _WARN_CALLS for n in inner):
            return "warn"
    if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
        it = node.iter.func
        if isinstance(it, ast.Attribute) and it.attr == "items" and _is_name(it.value, name):
            inner = [n for stmt in node.body for n in ast.walk(stmt)]
            if any(isinstance(n, ast.Raise) for n in inner):
                # transformers_neuronx.utils.maybe_override_attributes: only keys that are already attributes
                return (
                    "existing"
                    if any(isinstance(n, ast.Call) and _is_name(n.func, "hasattr") for n in inner)
                    else "error"
                )
            if any(isinstance(n, ast.Call) and _is_name(n.func, "setattr") for n in inner):
                return "stored"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
        target = ast.unparse(node.func.value)
        if target in ("self.__dict__", "vars(self)") and node.args and _is_name(node.args[0], name):
            return "stored"
    return None


def _read_key(node: ast.AST, name: str) -> tuple[str, ast.expr | None] | None:
    """The key (and default expression) of one read from the dict ``name``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and _is_name(node.func.value, name)
        and node.func.attr in ("pop", "get", "setdefault")
        and node.args
    ):
        key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value, node.args[1] if len(node.args) > 1 else None
    if (
        isinstance(node, ast.Subscript)
        and _is_name(node.value, name)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value, None
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In | ast.NotIn)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
        and _is_name(node.comparators[0], name)
    ):
        return node.left.value, None
    return None


def analyze_kwargs(tree: SourceTree, fn: FuncRef, name: str, depth: int = 0) -> KwargsInfo:
    """What ``fn`` does with the dict bound to its parameter ``name`` (its ``**kwargs``, or a helper's dict)."""
    info = KwargsInfo(name)
    mod = fn.module
    if depth > _MAX_DEPTH:
        return info
    for node in walk_body(fn.node):
        line = getattr(node, "lineno", 0)
        read = _read_key(node, name)
        if read is not None:
            key, default = read
            is_pop = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pop"
            info.add(key, None if default is None else mod.text(default), f"{mod.rel}:{line}", line, pop=is_pop)
            continue
        policy = _check_policy(node, name)
        if policy is not None and info.policy is None:
            info.policy, info.check_line, info.check_source = policy, line, f"{mod.rel}:{line}"
        if not isinstance(node, ast.Call):
            continue
        if any(k.arg is None and _is_name(k.value, name) for k in node.keywords):
            _forward(tree, fn, node, info, depth)
        else:
            _helper(tree, fn, node, info, depth)
    return info.finish()


def _helper(tree: SourceTree, fn: FuncRef, call: ast.Call, info: KwargsInfo, depth: int) -> None:
    """Follow the dict into a helper it is passed to as a value (``self._get_lnc(kwargs)``)."""
    slot: int | str | None = next((i for i, a in enumerate(call.args) if _is_name(a, info.name)), None)
    if slot is None:
        slot = next((k.arg for k in call.keywords if k.arg and _is_name(k.value, info.name)), None)
    if slot is None:
        return
    target = tree.call_target(fn, call.func)
    if not isinstance(target, FuncRef):
        return
    params = bound_params(target) if target.owner else parameters(target.module, target.node.args)
    if isinstance(slot, int):
        if slot >= len(params) or params[slot].kind not in POSITIONAL:
            return
        slot = params[slot].name
    sub = analyze_kwargs(tree, target, slot, depth + 1)
    for key, default in sub.keys.items():
        info.add(key, default, sub.key_sources[key], call.lineno, pop=key in sub.popped)
    if sub.policy == "existing":
        # The helper overrides attributes the caller has already set on self, and rejects any other key.
        for node in walk_body(fn.node):
            if isinstance(node, ast.Assign) and getattr(node, "lineno", 0) < call.lineno:
                for attr in node.targets:
                    if isinstance(attr, ast.Attribute) and _is_name(attr.value, "self"):
                        info.add(attr.attr, fn.module.text(node.value), f"{fn.module.rel}:{node.lineno}", call.lineno)
        info.policy, info.check_line, info.check_source = "error", call.lineno, sub.check_source
    elif sub.policy and info.policy is None:
        info.policy, info.check_line, info.check_source = sub.policy, call.lineno, sub.check_source


def _forward(tree: SourceTree, fn: FuncRef, call: ast.Call, info: KwargsInfo, depth: int) -> None:
    """``target(..., **kwargs)``: the target's keyword parameters and ``**kwargs`` keys are accepted too."""
    mod = fn.module
    target = tree.call_target(fn, call.func)
    if isinstance(target, ClassRef):
        target = tree.constructor(target) or target.qualname
    resolved = target if isinstance(target, FuncRef) else None
    info.forwards.append(
        {
            "call": mod.text(call.func),
            "target": resolved.qualname if resolved else None,
            "unresolved": None if resolved else (target or mod.text(call.func)),
            "source": f"{mod.rel}:{call.lineno}",
        }
    )
    if resolved is None:
        return
    positional = sum(1 for a in call.args if not isinstance(a, ast.Starred))
    explicit = {k.arg for k in call.keywords if k.arg}
    params = bound_params(resolved) if resolved.owner else parameters(resolved.module, resolved.node.args)
    accepted: set[str] = set()
    where = f"{resolved.module.rel}:{resolved.node.lineno}"
    for p in params:
        if p.kind in POSITIONAL and positional:
            positional -= 1
            continue
        if p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY") and p.name not in explicit:
            info.add(p.name, p.default, where, call.lineno)
            accepted.add(p.name)
    var_kw = next((p.name for p in params if p.kind == "VAR_KEYWORD"), None)
    if var_kw is None:
        info.targets.append((call.lineno, accepted, True, "error", where))
        return
    sub = analyze_kwargs(tree, resolved, var_kw, depth + 1)
    for key, default in sub.keys.items():
        info.add(key, default, sub.key_sources[key], call.lineno)
    accepted |= set(sub.keys)
    info.forwards.extend(f for f in sub.forwards if f["target"] is None)
    info.late_keys |= set(sub.to_json()["keys_read_after_unknown_check"])
    policy = sub.unknown if sub.unknown != "unresolved" else "ignored"
    info.targets.append((call.lineno, accepted, policy == "error", policy, sub.to_json()["unknown_source"]))


def effective_params(tree: SourceTree, fn: FuncRef, depth: int = 0) -> list[Param] | None:
    """The parameters behind a ``*args`` (and ``**kwargs``) pass-through, or None if there is none."""
    params = bound_params(fn) if fn.owner else parameters(fn.module, fn.node.args)
    var_pos = next((p.name for p in params if p.kind == "VAR_POSITIONAL"), None)
    var_kw = next((p.name for p in params if p.kind == "VAR_KEYWORD"), None)
    if var_pos is None or depth > _MAX_DEPTH:
        return None
    for node in walk_body(fn.node):
        if not isinstance(node, ast.Call):
            continue
        stars = [i for i, a in enumerate(node.args) if isinstance(a, ast.Starred) and _is_name(a.value, var_pos)]
        if not stars or (var_kw and not any(k.arg is None and _is_name(k.value, var_kw) for k in node.keywords)):
            continue
        star = stars[0]
        if star != len(node.args) - 1 or any(isinstance(a, ast.Starred) for a in node.args[:star]):
            return None
        target = tree.call_target(fn, node.func)
        if isinstance(target, ClassRef):
            target = tree.constructor(target)
        if not isinstance(target, FuncRef):
            return None
        inner = effective_params(tree, target, depth + 1)
        if inner is None:
            inner = bound_params(target) if target.owner else parameters(target.module, target.node.args)
        skip, explicit = star, {k.arg for k in node.keywords if k.arg}
        remaining: list[Param] = []
        for p in inner:
            if p.kind in POSITIONAL and skip:
                skip -= 1
            elif p.name not in explicit:
                remaining.append(p)
        if skip and not any(p.kind == "VAR_POSITIONAL" for p in inner):
            return None
        if var_kw is None:  # nothing can reach the target by keyword
            remaining = [
                replace(p, kind="POSITIONAL_ONLY") if p.kind == "POSITIONAL_OR_KEYWORD" else p
                for p in remaining
                if p.kind not in ("KEYWORD_ONLY", "VAR_KEYWORD")
            ]
        own = [p for p in params if p.kind not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
        merged = sorted([*own, *remaining], key=lambda p: KINDS.index(p.kind))
        return merged if valid_order(merged) else None
    return None


def _callable_entry(tree: SourceTree, fn: FuncRef) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "parameters": [p.to_json() for p in parameters(fn.module, fn.node.args)],
    }
    eff = effective_params(tree, fn)
    if eff is not None:
        entry["effective_parameters"] = [p.to_json() for p in eff]
    var_kw = fn.node.args.kwarg
    if var_kw is not None:
        entry["var_keyword"] = analyze_kwargs(tree, fn, var_kw.arg).to_json()
    return entry


def function_entry(tree: SourceTree, fn: FuncRef) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "method" if fn.owner else "function"}
    if fn.owner:
        entry["binding"] = fn.binding
    entry |= {"defined_in": fn.qualname, "source": fn.module.where(fn.node), **_callable_entry(tree, fn)}
    if fn.binding == "classmethod":
        returned = tree.returned_class(fn)
        if returned is not None:
            entry["returns"] = returned.qualname
    return entry


def class_entry(tree: SourceTree, cls: ClassRef, config: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": "class",
        "defined_in": cls.qualname,
        "source": cls.module.where(cls.node),
        "bases": [b.qualname if isinstance(b, ClassRef) else b for b in tree.bases(cls)],
    }
    ctor = tree.constructor(cls)
    if ctor is None:
        external = [b for b in tree.mro(cls)[1:] if isinstance(b, str) and b != "builtins.object"]
        entry["parameters"] = None if external else []
        entry["constructor"] = {"defined_in": external[0] if external else "builtins.object.__init__"}
        if config:
            entry |= {"fields": {}, "field_sources": {}, "accepts_unknown": None if external else False}
        return entry
    ctor_entry = _callable_entry(tree, ctor)
    params = [Param(**p) for p in ctor_entry["parameters"]]
    if params and params[0].kind in POSITIONAL:  # self
        params = params[1:]
    entry["parameters"] = [p.to_json() for p in params]
    entry["constructor"] = {"defined_in": ctor.qualname, "source": ctor.module.where(ctor.node)}
    for key in ("effective_parameters", "var_keyword"):
        if key in ctor_entry:
            entry[key] = ctor_entry[key]
    if config:
        entry |= config_fields(ctor, entry)
    return entry


def config_fields(ctor: FuncRef, entry: dict[str, Any]) -> dict[str, Any]:
    """Every keyword the constructor takes: explicit parameters, then the keys its ``**kwargs`` reaches."""
    explicit = entry.get("effective_parameters") or entry["parameters"]
    fields: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    where = f"{ctor.module.rel}:{ctor.node.lineno}"
    for p in explicit:
        if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"):
            fields[p["name"]] = p["default"]
            sources[p["name"]] = where
    kw = entry.get("var_keyword")
    out: dict[str, Any] = {"fields": fields, "field_sources": sources}
    if kw is None:
        out["field_sources"] = _group_sources(sources)
        out |= {"accepts_unknown": False, "unknown_kwargs": "error (no **kwargs: TypeError)"}
        return out
    for key, default in kw["keys"].items():
        if key not in fields:
            fields[key] = default
            sources[key] = kw["key_sources"][key]
    del kw["keys"], kw["key_sources"]  # now in fields / field_sources
    out["field_sources"] = _group_sources(sources)
    accepts = {"error": False, "unresolved": None}.get(kw["unknown"], True)
    out |= {"accepts_unknown": accepts, "unknown_kwargs": kw["unknown"], "unknown_kwargs_source": kw["unknown_source"]}
    return out


def _group_sources(sources: dict[str, str]) -> dict[str, dict[str, int]]:
    """``{key: "path:line"}`` as ``{path: {key: line}}`` (most keys of a config class share one file)."""
    grouped: dict[str, dict[str, int]] = {}
    for key, where in sources.items():
        path, _, line = where.rpartition(":")
        grouped.setdefault(path, {})[key] = int(line)
    return grouped


def extract_name(tree: SourceTree, qualname: str, *, config: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The record entry of a class, function or method, or (None, why it is missing)."""
    found = tree.resolve(qualname)
    if isinstance(found, ClassRef):
        return class_entry(tree, found, config), ""
    if isinstance(found, FuncRef):
        return function_entry(tree, found), ""
    if found is None:
        return None, tree.why_missing(qualname)
    return None, f"{qualname} is a {'module' if isinstance(found, Module) else 'value'}, not a callable"


def _literal(tree: SourceTree, mod: Module, node: ast.expr) -> Any:
    if isinstance(node, ast.Dict):
        return {
            (str(k.value) if isinstance(k, ast.Constant) else mod.text(k)): _literal(tree, mod, v)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_literal(tree, mod, e) for e in node.elts]
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | None):
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        q = tree.expr_qualname(mod, node)
        found = tree.resolve(q) if q else None
        if isinstance(found, ClassRef | FuncRef):
            return {"ref": found.qualname}
        return {"ref": q, "resolved": False}
    return {"source": mod.text(node)}


def extract_data(tree: SourceTree, qualname: str) -> dict[str, Any] | None:
    """A module-level table (e.g. NxDI's ``MODEL_TYPES``) with class references resolved, or None."""
    found = tree.resolve(qualname)
    if not isinstance(found, DataRef):
        return None
    stmt = found.node
    value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
    if value is None:
        return None
    return {
        "kind": "data",
        "defined_in": found.qualname,
        "source": found.module.where(stmt),
        "value": _literal(tree, found.module, value),
    }
