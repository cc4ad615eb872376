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
    assert manifest.hashed_inputs["weights"] == {"hub_id": "acme/tiny", "revision": COMMIT}

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


# -- a matrix entry is the whole build identity: the key and the commit it names ----------------------

MOVED = "beef00" + "1" * 34


def _move_main(tmp_path: Path, *, layers: int = 1) -> None:
    """`main` of acme/tiny moves to MOVED (another checkpoint; ``layers`` in its config.json)."""
    source = write_tiny_llama(tmp_path / "src-moved", seed=1)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    fake_hub_cache(tmp_path / "hf", "acme/tiny", MOVED, source)


def test_compile_only_revision_builds_the_matrix_key_after_main_moved(
    hub_profile: Path, tmp_path: Path, runner: CliRunner
) -> None:
    matrix = _invoke(runner, ["matrix", str(hub_profile), "--format", "json"])
    entries = json.loads(matrix.stdout)["include"]
    assert [e["revision"] for e in entries] == [COMMIT, COMMIT]
    entry = entries[1]

    _move_main(tmp_path)  # between the plan job and the build job, the model's main moved
    now = json.loads(_invoke(runner, ["matrix", str(hub_profile), "--format", "json"]).stdout)["include"]
    assert now[1]["revision"] == MOVED and now[1]["config_hash"] != entry["config_hash"]

    # Without the entry's revision, the key matches nothing; the error says which ref moved, from and to.
    store = str(tmp_path / "store")
    lost = _invoke(runner, ["compile", str(hub_profile), "--only", entry["key"], "--store", store, "--json"])
    assert lost.exit_code == 2, lost.output
    error = json.loads(lost.stdout)["error"]
    assert error["message"] == (
        f"--only {entry['key']} matches no build of the profiles given: acme/tiny@main moved from {COMMIT} to {MOVED}"
    )
    assert error["hint"].startswith(f"pass --revision {COMMIT} ")

    # With it, exactly the entry's key is built, at the entry's commit, whatever main is now.
    args = ["compile", str(hub_profile), "--only", entry["key"], "--revision", entry["revision"], "--store", store]
    built = _invoke(runner, [*args, "--json"])
    assert built.exit_code == 0, built.output
    [report] = json.loads(built.stdout)["builds"]
    assert (report["build_index"], report["status"], report["config_hash"]) == (1, "built", entry["config_hash"])
    manifest = read_manifest(Path(report["bundle"]))
    assert manifest.hashed_inputs["weights"] == {"hub_id": "acme/tiny", "revision": COMMIT}
    from neuronc.store import LocalStore

    assert [e.manifest.config_hash for e in LocalStore(store).list()] == [entry["config_hash"]]
    again = json.loads(_invoke(runner, [*args, "--json"]).stdout)["builds"]
    assert [(r["status"], r["config_hash"]) for r in again] == [("hit", entry["config_hash"])]


def test_revision_takes_a_commit_or_nothing(tmp_path: Path, runner: CliRunner) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    bad = _invoke(runner, ["compile", str(profile), "--revision", "main", "--json"])
    assert bad.exit_code == 2
    assert json.loads(bad.stdout)["error"]["message"].startswith("--revision takes the 40-hex commit")
    # A matrix entry of a local model has no revision: the recipe's `--revision ""` is no revision.
    entry = json.loads(_invoke(runner, ["matrix", str(profile)]).stdout)["include"][0]
    assert entry["revision"] is None
    args = ["compile", str(profile), "--only", entry["key"], "--revision", "", "--store", str(tmp_path / "s"), "--json"]
    done = _invoke(runner, args)
    assert done.exit_code == 0, done.output
    assert [r["config_hash"] for r in json.loads(done.stdout)["builds"]] == [entry["config_hash"]]


def test_compile_takes_a_directory_of_profiles(tmp_path: Path, runner: CliRunner) -> None:
    write_tiny_llama(tmp_path / "profiles" / "model")
    write_profile(tmp_path / "profiles" / "a.yaml")
    write_profile(tmp_path / "profiles" / "b.yml", matrix={"batch_size": [2, 4]})
    (tmp_path / "profiles" / "notes.txt").write_text("not a profile")
    store = str(tmp_path / "store")
    planned = json.loads(_invoke(runner, ["matrix", str(tmp_path / "profiles")]).stdout)["include"]
    result = _invoke(runner, ["compile", str(tmp_path / "profiles"), "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    builds = json.loads(result.stdout)["builds"]
    assert [(b["profile"], b["status"], b["config_hash"]) for b in builds] == [
        (e["profile"], "built", e["config_hash"]) for e in planned
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _invoke(runner, ["compile", str(empty)]).exit_code == 2


def test_plan_matrix_and_compile_size_a_build_at_its_resolved_commit(
    hub_profile: Path, tmp_path: Path, runner: CliRunner
) -> None:
    from neuronc.pipeline import resolve_build
    from neuronc.pipeline.plan import matrix_entries, plan_builds
    from neuronc.profile import load_builds

    _move_main(tmp_path, layers=3)  # COMMIT's config has 1 layer, MOVED's (main now) 3
    build = load_builds([hub_profile])[0]
    at_main = resolve_build(build, strict=False)
    at_commit = resolve_build(build, strict=False, commit=COMMIT)
    assert (at_main.revision, at_commit.revision) == (MOVED, COMMIT)
    assert at_main.model_config is not None and at_main.model_config["num_hidden_layers"] == 3
    assert at_commit.model_config is not None and at_commit.model_config["num_hidden_layers"] == 1
    # plan and matrix size the build from the config at the commit its key names (compile's
    # pre-flight reads the same ResolvedBuild.model_config).
    [plan, _] = plan_builds(load_builds([hub_profile]), store=str(tmp_path / "store"))
    assert plan.context is not None and plan.context.revision == MOVED
    assert plan.estimate.model is not None and plan.estimate.model.layers == 3
    assert plan.to_json()["revision"] == MOVED
    [entry, _] = matrix_entries(load_builds([hub_profile]))
    assert (entry.revision, entry.config_hash) == (MOVED, at_main.config.hash)


def test_a_build_selected_elsewhere_is_built_at_its_commit_or_fails_with_exit_5(
    hub_profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a Ray node does with the driver's resolution (``BuildIdentity``), in this process."""
    from plugins.fake_backend import VERSION_ENV

    from neuronc.pipeline import build_one, resolve_build
    from neuronc.pipeline.identity import BuildIdentity
    from neuronc.profile import load_builds
    from neuronc.store import LocalStore

    build = load_builds([hub_profile])[0]
    identity = BuildIdentity.from_json(BuildIdentity.of(resolve_build(build)).to_json())  # as a task gets it
    _move_main(tmp_path)  # the builder's refs/main says MOVED now
    store = tmp_path / "store"

    monkeypatch.setenv(VERSION_ENV, "9.9.9")  # another SDK version installed where it builds
    report = build_one(build, store=store, identity=identity)
    assert (report.status, report.exit_code) == ("failed", 5)
    assert report.error is not None and report.error.message.endswith("was selected for: fake-cc")
    assert report.error.details == ["fake-cc: expected 1.2.3, here 9.9.9"]
    monkeypatch.delenv(VERSION_ENV)

    monkeypatch.setenv("NEURON_CC_FLAGS", "-O3")  # flags the compiler reads here, not where it was selected
    report = build_one(build, store=store, identity=identity)
    assert (report.status, report.exit_code) == ("failed", 5)
    assert report.error is not None and report.error.message.endswith(": compiler_flags differ")
    assert report.error.details == ['compiler_flags: selected [], here ["-O3"]']
    monkeypatch.delenv("NEURON_CC_FLAGS")
    assert LocalStore(store).list() == []

    report = build_one(build, store=store, identity=identity)  # at the selected commit, not main's
    assert (report.status, report.config_hash) == ("built", identity.config_hash)
    assert [e.manifest.hashed_inputs["weights"]["revision"] for e in LocalStore(store).list()] == [COMMIT]
