"""Checks of an inductor profile made at validate time, without importing torch.

``options.inductor_config`` names ``torch._inductor.config`` settings. Importing torch to check
them would cost `validate` seconds (and validate must not import torch), so the names and default
values are read from the installed torch's ``torch/_inductor/config.py`` source with ``ast``:
what AOTInductor would see, for the torch that will compile. Hand-written because torch has no
public way to list its inductor settings without importing it.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

# neuronc sets this itself: graphs are packaged without their weights, which the runtime binds.
MANAGED = {"aot_inductor.package_constants_in_so": "graphs are packaged without weights; neuronc binds them"}
_MISSING = object()


@cache
def inductor_settings() -> dict[str, Any] | None:
    """``torch._inductor.config`` names (``a.b`` for class-scoped ones) and their literal defaults
    (``_MISSING`` where the default is not a literal); None when torch is not installed here."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "_inductor" / "config.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    settings: dict[str, Any] = {}
    _collect(tree.body, "", settings)
    return settings


def _collect(body: list[ast.stmt], prefix: str, settings: dict[str, Any]) -> None:
    for node in body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    settings[prefix + target.id] = _literal(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            settings[prefix + node.target.id] = _literal(node.value) if node.value is not None else _MISSING
        elif isinstance(node, ast.ClassDef) and not prefix:
            _collect(node.body, f"{node.name}.", settings)
        elif isinstance(node, ast.If | ast.Try):
            # Settings defined under a platform check are settings all the same.
            _collect(node.body, prefix, settings)
            _collect(getattr(node, "orelse", []), prefix, settings)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def inductor_config_problems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, message)`` for each ``options.inductor_config`` entry AOTInductor would not accept."""
    import difflib

    settings = inductor_settings()
    problems: list[tuple[str, str]] = []
    for key, value in config.items():
        if key in MANAGED:
            problems.append((key, f"set by neuronc ({MANAGED[key]}); remove it"))
            continue
        if settings is None:
            continue  # no torch here: compile would fail earlier, on the backend's availability
        if key not in settings:
            close = difflib.get_close_matches(key, list(settings), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append((key, f"not a torch._inductor.config setting{hint}"))
            continue
        default = settings[key]
        if default is _MISSING or default is None or value is None:
            continue
        if not _same_kind(default, value):
            problems.append((key, f"expects {type(default).__name__} (default {default!r}), got {value!r}"))
    return problems


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


__all__ = ["MANAGED", "inductor_config_problems", "inductor_settings"]
