"""docs/manifest.schema.json: generated from the pydantic model, current, and real manifests validate.

Regenerate with: NEURONC_REGENERATE_SCHEMA=1 pytest tests/test_bundle_schema.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
from plugins.fake_backend import build_bundle

from neuronc._output import to_json_text
from neuronc.bundle import SCHEMA_VERSION, manifest_json_schema


def test_checked_in_schema_is_current(repo_root: Path) -> None:
    path = repo_root / "docs" / "manifest.schema.json"
    expected = to_json_text(manifest_json_schema())
    if os.environ.get("NEURONC_REGENERATE_SCHEMA"):
        path.write_text(expected, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == expected, "run NEURONC_REGENERATE_SCHEMA=1 pytest " + __file__
    assert SCHEMA_VERSION in json.loads(expected)["title"]


def test_real_manifest_validates(tmp_path: Path, repo_root: Path) -> None:
    schema = json.loads((repo_root / "docs" / "manifest.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    manifest = json.loads((build_bundle(tmp_path / "b") / "manifest.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert next(iter(manifest)) == "schema_version"
    manifest["files"][0]["sha256"] = "not-a-hash"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(manifest)
