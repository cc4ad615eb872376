"""The JSON Schemas of docs/schemas/ (and docs/*.schema.json), loaded once, with their cross-references."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"


@functools.cache
def registry() -> Registry:
    """Every schema under its `$id` (its file name), so that `{"$ref": "error.schema.json"}` resolves."""
    resources = []
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema["$id"] == path.name, f"{path}: $id must be the file name"
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


def names() -> list[str]:
    return sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))


@functools.cache
def validator(name: str) -> Draft202012Validator:
    schema = registry().contents(f"{name}.schema.json")
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry())


def problems(name: str, document: Any) -> list[str]:
    """Every way ``document`` departs from docs/schemas/NAME.schema.json (empty: it conforms)."""
    errors = sorted(validator(name).iter_errors(document), key=lambda e: list(e.absolute_path))
    lines = []
    for error in errors:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        lines.append(f"{where}: {error.message[:300]}")
        # oneOf failures hide the useful part: say why each alternative failed.
        for sub in sorted(error.context or (), key=lambda e: list(e.absolute_path))[:6]:
            sub_where = "/".join(str(p) for p in sub.absolute_path) or "<root>"
            lines.append(f"    {sub_where}: {sub.message[:200]}")
    return lines


def assert_conforms(name: str, document: Any, what: str = "") -> None:
    found = problems(name, document)
    assert not found, (
        f"{what or 'output'} does not match docs/schemas/{name}.schema.json:\n  "
        + "\n  ".join(found)
        + "\nIf the change is intended, update the schema and the page that documents the shape."
    )
