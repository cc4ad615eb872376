"""One key everywhere: `plan`, `matrix`, `compile --only` and `compile` agree on every build's key.

The model is a Hub id with no pinned revision. Where its revision resolves (here from the local
Hugging Face cache, offline), every command reports the key `compile` stores the bundle under, the
commit included; where it cannot resolve, `plan` and `matrix` say "unresolved" instead of guessing
a key from the revision as written (the bug: plan said miss under a key compile never used).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _pipeline import fake_hub_cache, write_profile, write_tiny_llama
from click.testing import CliRunner
from plugins import pipeline_backend

from neuronc._output import out
from neuronc.bundle import read_manifest
from neuronc.cli import app

COMMIT = "c0ffee" + "0" * 34


@pytest.fixture(autouse=True)
def _pipeline_backend() -> Iterator[None]:
    pipeline_backend.register()
    yield
    pipeline_backend.unregister()


def _invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()
    return runner.invoke(app, args)


@pytest.fixture
def hub_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile naming `acme/tiny` with no revision; the HF cache's refs/main points at COMMIT."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub_cache(tmp_path / "hf", "acme/tiny", COMMIT, write_tiny_llama(tmp_path / "src"))
    return write_profile(tmp_path / "hub.yaml", model="acme/tiny", matrix={"batch_size": [1, 2]})


def test_plan_matrix_only_and_compile_agree_on_a_resolved_revision(
    hub_profile: Path, tmp_path: Path, runner: CliRunner
) -> None:
    store = str(tmp_path / "store")
    plan = _invoke(runner, ["plan", str(hub_profile), "--store", store, "--json"])
    assert plan.exit_code == 0, plan.output
    planned = [(b["build"], b["config_hash"], b["store"]["status"]) for b in json.loads(plan.stdout)["builds"]]
    assert [status for _, _, status in planned] == ["miss", "miss"]

    matrix = _invoke(runner, ["matrix", str(hub_profile), "--format", "json"])
    assert matrix.exit_code == 0, matrix.output
    entries = json.loads(matrix.stdout)["include"]
    assert [(e["build"], e["config_hash"]) for e in entries] == [(b, h) for b, h, _ in planned]

    validate = _invoke(runner, ["validate", str(hub_profile), "--json"])
    assert validate.exit_code == 0, validate.output
    [described] = json.loads(validate.stdout)["profiles"]
    assert [b["config_hash"] for b in described["builds"]] == [h for _, h, _ in planned]

    # compile --only with the matrix's key builds exactly that build, under that key, at the commit.
    only = _invoke(runner, ["compile", str(hub_profile), "--only", entries[1]["key"], "--store", store, "--json"])
    assert only.exit_code == 0, only.output
    [built] = json.loads(only.stdout)["builds"]
    assert (built["build_index"], built["status"], built["config_hash"]) == (1, "built", entries[1]["config_hash"])
    manifest = read_manifest(Path(built["bundle"]))
    assert manifest.hashed_inputs["model.identity"] == {"hub_id": "acme/tiny", "revision": COMMIT}

    # A plain compile finds that build in the store and builds the other under the planned key.
    both = _invoke(runner, ["compile", str(hub_profile), "--store", store, "--json"])
    assert both.exit_code == 0, both.output
    reports = json.loads(both.stdout)["builds"]
    assert [(r["status"], r["config_hash"]) for r in reports] == [
        ("built", planned[0][1]),
        ("hit", planned[1][1]),
    ]
    again = _invoke(runner, ["plan", str(hub_profile), "--store", store, "--json"])
    assert [b["store"]["status"] for b in json.loads(again.stdout)["builds"]] == ["hit", "hit"]


def test_an_unresolvable_revision_is_unresolved_not_guessed(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    profile = write_profile(tmp_path / "p.yaml", model="acme/not-cached")

    plan = _invoke(runner, ["plan", str(profile), "--store", str(tmp_path / "store"), "--json"])
    assert plan.exit_code == 0, plan.output
    [build] = json.loads(plan.stdout)["builds"]
    assert (build["config_hash"], build["key"], build["store"]["status"]) == ("unresolved",) * 3
    assert "offline and not in the Hugging Face cache" in build["store"]["note"]

    matrix = _invoke(runner, ["matrix", str(profile), "--format", "json"])
    assert matrix.exit_code == 0, matrix.output
    [entry] = json.loads(matrix.stdout)["include"]
    assert (entry["key"], entry["config_hash"]) == (None, None)
    assert "key unresolved" in matrix.stderr

    compiled = _invoke(runner, ["compile", str(profile), "--store", str(tmp_path / "store"), "--json"])
    assert compiled.exit_code == 2
    assert json.loads(compiled.stdout)["builds"][0]["config_hash"] is None
