"""``matrix:``: which fields may vary, and the builds a matrix expands into."""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Mapping
from typing import Any

from neuronc.profile._yaml import YamlTree

# Fields a `matrix:` may vary, as dotted paths into the profile.
MATRIX_FIELDS = (
    "batch_size",
    "tp_degree",
    "amp",
    "target",
    "backend",
    "weights",
    "model.revision",
    "sequence.max_length",
    "sequence.max_context_length",
    "sequence.context_buckets",
    "sequence.token_buckets",
)
MAX_BUILDS = 1024


def check_matrix_shape(matrix: Any, tree: YamlTree) -> list[str]:
    """Problems with the matrix itself (unknown fields, empty or repeated values, too many builds)."""
    if matrix is None:
        return []
    if not isinstance(matrix, dict):
        return [tree.at(("matrix",), "must be a mapping of field -> list of values")]
    problems = []
    for key, values in matrix.items():
        if key not in MATRIX_FIELDS:
            close = difflib.get_close_matches(str(key), MATRIX_FIELDS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            problems.append(tree.at(("matrix", key), f"cannot vary '{key}'.{hint} Allowed: {', '.join(MATRIX_FIELDS)}"))
        elif not isinstance(values, list) or not values:
            problems.append(tree.at(("matrix", key), "must be a non-empty list of values"))
        elif len(values) != len({json.dumps(v, sort_keys=True) for v in values}):
            problems.append(tree.at(("matrix", key), "lists the same value twice"))
    total = 1
    for values in matrix.values():
        total *= len(values) if isinstance(values, list) else 1
    if total > MAX_BUILDS:
        problems.append(tree.at(("matrix",), f"expands to {total} builds; the limit is {MAX_BUILDS}"))
    return problems


def matrix_combinations(matrix: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the matrix's values, in the order the profile lists them."""
    keys = list(matrix)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(matrix[k] for k in keys))]


def apply_combo(data: Mapping[str, Any], combo: Mapping[str, Any]) -> dict[str, Any]:
    """The profile with one combination's values set (and without ``matrix:``)."""
    result: dict[str, Any] = json.loads(json.dumps({k: v for k, v in data.items() if k != "matrix"}, default=str))
    for dotted, value in combo.items():
        parts = dotted.split(".")
        node = result
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return result
