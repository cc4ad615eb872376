"""`neuronc cache-lookup` on the fixture snapshot: tables, JSON, filters, relations, profiles, exit codes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app
from neuronc.hubcache import Filters, SnapshotSource, lookup_builds, lookup_model
from neuronc.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
SNAPSHOT = FIXTURE / "snapshot"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
LLAMA = "example-org/tiny-llama"


def install_config(model_id: str, config: dict[str, Any] | None = None) -> str:
    """Put a fixture model's config.json in the (test's own) Hugging Face cache; return its commit."""
    if config is None:
        config = json.loads((FIXTURE / "models" / model_id / "config.json").read_text(encoding="utf-8"))
    sha = hashlib.sha1(model_id.encode()).hexdigest()
    repo = Path(os.environ["HF_HOME"]) / "hub" / f"models--{model_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    (repo / "snapshots" / sha).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / sha / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return sha


def invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()  # the output object keeps consoles bound to the previous invocation's streams
    return runner.invoke(app, args)


def lookup(runner: CliRunner, *args: str) -> Any:
    return invoke(runner, ["cache-lookup", *args, "--snapshot", str(SNAPSHOT)])


def lookup_json(runner: CliRunner, *args: str, code: int = 0) -> dict[str, Any]:
    result = lookup(runner, *args, "--json")
    assert result.exit_code == code, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _expected(model_id: str, **fields: Any) -> list[dict[str, Any]]:
    return [
        e
        for e in EXPECTED["entries"]
        if e["model_id"] == model_id and e["task"] == "text-generation" and all(e[k] == v for k, v in fields.items())
    ]


# -- model ids -------------------------------------------------------------------------------------


def test_model_table_lists_every_cached_configuration(runner: CliRunner) -> None:
    install_config(LLAMA)
    result = lookup(runner, LLAMA)
    assert result.exit_code == 0, result.output
    assert f"Cached configurations for {LLAMA}" in result.stdout
    header = next(line for line in result.stdout.splitlines() if "optimum-neuron" in line)
    for column in ("bs", "seq", "tp", "dtype", "target", "neuronx-cc", "revision"):
        assert column in header
    assert "0.4.4" in result.stdout and "0.3.0" in result.stdout and "0.0.25" in result.stdout
    assert "example-org/tiny-llama-instruct" in result.stdout  # same architecture, another model id


def test_model_json_counts_and_fields(runner: CliRunner) -> None:
    install_config(LLAMA)
    data = lookup_json(runner, LLAMA)
    assert data["schema_version"] == 1 and data["kind"] == "model"
    assert data["arch_digest"] == EXPECTED["models"][LLAMA]["lookup_digest"]["text-generation"]
    assert data["digest_method"] == "emulated" and data["model_type"] == "llama"
    own = [e for e in data["entries"] if e["relation"] == "model"]
    assert len(own) == len(_expected(LLAMA))
    instruct = [e for e in data["entries"] if e["relation"] == "architecture"]
    assert {e["model_id"] for e in instruct} == {"example-org/tiny-llama-instruct"}
    vector = next(e for e in own if e["hash"] == "f9f9f783a10b20b71829")
    assert vector["visible_to_optimum_neuron"] is True
    assert vector["checkpoint_revision"] == "0123456789abcdef0123456789abcdef01234567"
    assert vector["compiler_version"] == "2.21.33363.0+82129205"
    assert vector["layout"] == "arch-digest" and vector["aliases"]
    old = [e for e in own if e["optimum_neuron_version"] != "0.4.5"]
    assert old and all(e["visible_to_optimum_neuron"] is False for e in old)
    assert data["source"]["kind"] == "snapshot" and data["skipped"] == []


def test_without_a_config_entries_match_by_model_id(runner: CliRunner) -> None:
    data = lookup_json(runner, LLAMA)
    assert {e["relation"] for e in data["entries"]} == {"model"}
    assert len(data["entries"]) == len(_expected(LLAMA))
    assert any("architecture not checked" in n for n in data["notes"])


def test_local_model_directory_matches_by_architecture(runner: CliRunner) -> None:
    data = lookup_json(runner, str(FIXTURE / "models" / LLAMA))
    assert data["model_id"] is None
    ids = {e["model_id"] for e in data["entries"]}
    assert ids == {LLAMA, "example-org/tiny-llama-instruct"}
    assert {e["relation"] for e in data["entries"]} == {"architecture"}


@pytest.mark.parametrize(
    ("args", "fields"),
    [
        (["--tp", "8"], {"tp_degree": 8}),
        (["--batch-size", "16"], {"batch_size": 16}),
        (["--sequence-length", "8192"], {"sequence_length": 8192}),
        (["--instance-type", "trn2"], {"instance": "trn2"}),
        (["--tp", "2", "--batch-size", "4", "--sequence-length", "4096", "--dtype", "bf16"], {"tp_degree": 2}),
    ],
)
def test_filters_are_exact(runner: CliRunner, args: list[str], fields: dict[str, Any]) -> None:
    install_config(LLAMA)
    data = lookup_json(runner, LLAMA, *args)
    own = [e for e in data["entries"] if e["relation"] == "model"]
    assert own
    wanted = _expected(LLAMA, **fields)
    if "--batch-size" in args and "4" in args:
        wanted = [e for e in wanted if (e["batch_size"], e["sequence_length"]) == (4, 4096)]
    assert sorted(e["hash"] for e in own) == sorted(e["hash"] for e in wanted)
    assert data["related_entries"] > len(data["entries"])


def test_instance_type_inf2_means_trn1_entries(runner: CliRunner) -> None:
    install_config(LLAMA)
    inf2 = lookup_json(runner, LLAMA, "--instance-type", "inf2")
    trn1 = lookup_json(runner, LLAMA, "--instance-type", "trn1")
    assert inf2["entries"] == trn1["entries"]
    assert {e["target"] for e in inf2["entries"]} == {"trn1"}
    assert inf2["filters"]["target"] == "trn1"


def test_version_filters_match_by_prefix(runner: CliRunner) -> None:
    install_config(LLAMA)
    data = lookup_json(runner, LLAMA, "--compiler-version", "2.21")
    assert {e["optimum_neuron_version"] for e in data["entries"]} == {"0.4.5", "0.4.4"}
    data = lookup_json(runner, LLAMA, "--compiler-version", "2.21.33363.0", "--optimum-neuron-version", "0.4")
    assert {e["compiler_version"] for e in data["entries"]} == {"2.21.33363.0+82129205"}
    data = lookup_json(runner, LLAMA, "--optimum-neuron-version", "0.0.25")
    assert data["entries"] and all(e["layout"] == "model-type-mode" for e in data["entries"])


def test_entries_the_045_digest_hides_are_found_and_flagged(runner: CliRunner) -> None:
    for model_id, reason in (
        ("example-org/tiny-llama-fp16", "dtype"),
        ("other-org/tiny-llama-nodtype", "dtype"),
        ("example-org/tiny-mixtral", "head_dim"),
    ):
        install_config(model_id)
        data = lookup_json(runner, model_id, "--optimum-neuron-version", "0.4.5")
        expected = _expected(model_id, layout="0.4.5")
        assert len(data["entries"]) == len(expected)
        hidden = [e for e in data["entries"] if not e["visible_to_optimum_neuron"]]
        assert len(hidden) == sum(not e["visible_to_optimum_neuron_lookup"] for e in expected) > 0
        assert all(any(reason in note for note in e["notes"]) for e in hidden)
        assert all(e["relation"] == "model" for e in data["entries"])
    result = lookup(runner, "example-org/tiny-mixtral")
    assert "hidden: head_dim" in result.stdout


def test_model_whose_config_changed_is_listed_but_never_a_hit(runner: CliRunner) -> None:
    config = json.loads((FIXTURE / "models" / LLAMA / "config.json").read_text(encoding="utf-8"))
    install_config(LLAMA, {**config, "num_hidden_layers": 4})
    data = lookup_json(runner, LLAMA)
    assert {e["relation"] for e in data["entries"]} == {"model-config-differs"}
    assert all(e["architecture_differs"] == ["num_hidden_layers"] for e in data["entries"])
    assert data["hit"] is False
    result = lookup(runner, LLAMA, "--require-hit")
    assert result.exit_code == 6
    assert "with its current architecture" in result.output


def test_other_tasks_are_counted_and_selectable(runner: CliRunner) -> None:
    install_config("example-org/tiny-qwen3")
    data = lookup_json(runner, "example-org/tiny-qwen3")
    assert data["other_tasks"] == {"feature-extraction": 6}
    data = lookup_json(runner, "example-org/tiny-qwen3", "--task", "feature-extraction")
    assert len(data["entries"]) == 6 and data["task"] == "feature-extraction"
    assert all(e["visible_to_optimum_neuron"] for e in data["entries"])


def test_nothing_cached_is_a_clean_message(runner: CliRunner) -> None:
    result = lookup(runner, "nobody/nothing")
    assert result.exit_code == 0, result.output
    assert "No cached configurations for nobody/nothing." in result.stdout
    result = lookup(runner, "nobody/nothing", "--require-hit")
    assert result.exit_code == 6
    data = lookup_json(runner, "nobody/nothing", "--require-hit", code=6)
    assert data["entries"] == [] and data["hit"] is False


def test_require_hit_passes_on_a_hit(runner: CliRunner) -> None:
    result = lookup(runner, LLAMA, "--tp", "2", "--batch-size", "4", "--require-hit")
    assert result.exit_code == 0, result.output
    result = lookup(runner, LLAMA, "--tp", "3", "--require-hit")
    assert result.exit_code == 6
    assert "matches the filters" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--dtype", "int8"],
        ["--instance-type", "p4d"],
        ["--tp", "0"],
        ["--repo", "x/y"],
    ],
)
def test_bad_arguments_exit_2(runner: CliRunner, args: list[str]) -> None:
    assert lookup(runner, LLAMA, *args).exit_code == 2


def test_bad_snapshot_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, ["cache-lookup", LLAMA, "--snapshot", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "no such snapshot directory" in result.output


def test_empty_snapshot_says_nothing_cached(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, ["cache-lookup", LLAMA, "--snapshot", str(tmp_path)])
    assert result.exit_code == 0
    assert "No cached configurations" in result.stdout
    assert "no neuronxcc-*/0_REGISTRY folder" in result.output


def test_broken_entries_warn_and_the_rest_still_answers(runner: CliRunner, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, root)
    digest = EXPECTED["models"][LLAMA]["lookup_digest"]["text-generation"]
    folder = root / "neuronxcc-2.21.33363.0+82129205" / "0_REGISTRY" / "0.4.5" / digest
    (folder / "0000000000000000bad1.json").write_text("{oops")
    (folder / "0000000000000000bad2.json").write_text('{"model_type": "llama", "neuron": {"batch_size": true}}')
    result = invoke(runner, ["cache-lookup", LLAMA, "--snapshot", str(root), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["skipped"]) == 2 and data["stats"]["skipped"] == 2
    assert len(data["entries"]) == len(_expected(LLAMA))
    assert "2 registry files skipped" in result.stderr


# -- profiles --------------------------------------------------------------------------------------


def _profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def _tiny_llama_profile(tmp_path: Path, target: str = "trn1", extra: str = "") -> Path:
    sha = install_config(LLAMA)
    return _profile(
        tmp_path,
        f"""name: tiny
model:
  id: {LLAMA}
  revision: {sha}
backend: optimum-neuron
target: {target}
tp_degree: 2
batch_size: 4
amp: bf16
sequence:
  max_length: 4096
weights: on-load
{extra}""",
    )


def test_profile_hit_and_miss_with_nearest(runner: CliRunner, tmp_path: Path) -> None:
    path = _tiny_llama_profile(tmp_path, extra="matrix:\n  batch_size: [4, 3]\n")
    result = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kind"] == "profile" and data["hit"] is False
    hit, miss = data["builds"]
    assert hit["status"] == "hit" and hit["wanted"]["target"] == "trn1"
    assert "f9f9f783a10b20b71829" in {h["hash"] for h in hit["hits"]}
    assert miss["status"] == "miss" and miss["hits"] == []
    nearest = miss["nearest"][0]
    # Fewest differing fields first, then the closest value (log scale): batch 4 beats batch 2.
    assert nearest["differences"] == [{"field": "batch_size", "entry": 4, "wanted": 3}]
    assert len(miss["nearest"]) == 3
    human = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT)])
    assert "HIT  build 0" in human.stdout and "MISS  build 1" in human.stdout
    assert "nearest: batch_size" in human.stdout
    assert invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--require-hit"]).exit_code == 6


def test_profile_inf2_target_hits_trn1_entries(runner: CliRunner, tmp_path: Path) -> None:
    path = _tiny_llama_profile(tmp_path, target="inf2")
    result = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--require-hit", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["builds"][0]["status"] == "hit"


def test_profile_compiler_constraint_turns_a_hit_into_a_miss(runner: CliRunner, tmp_path: Path) -> None:
    path = _tiny_llama_profile(tmp_path)
    args = ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--compiler-version", "2.22", "--json"]
    result = invoke(runner, args)
    build = json.loads(result.stdout)["builds"][0]
    assert build["status"] == "miss"
    assert {"field": "compiler_version", "entry": "2.21.33363.0+82129205", "wanted": "2.22"} in build["nearest"][0][
        "differences"
    ]


def test_profile_rejects_shape_filters(runner: CliRunner, tmp_path: Path) -> None:
    path = _tiny_llama_profile(tmp_path)
    result = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--tp", "2"])
    assert result.exit_code == 2


def test_cpu_builds_are_not_applicable(runner: CliRunner, tmp_path: Path) -> None:
    path = _profile(
        tmp_path,
        f"model:\n  id: {FIXTURE / 'models' / LLAMA}\nbackend: inductor\ntarget: cpu\nsequence:\n  max_length: 128\n",
    )
    result = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT), "--json", "--require-hit"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["builds"][0]["status"] == "not-applicable"


def test_human_output_shows_no_python_values(runner: CliRunner, tmp_path: Path) -> None:
    """Issue 17: a CPU build printed "float32, None"; a missing value printed "None" in nearest lines."""
    path = _profile(
        tmp_path,
        f"model:\n  id: {FIXTURE / 'models' / LLAMA}\nbackend: inductor\ntarget: cpu\nsequence:\n  max_length: 128\n",
    )
    result = invoke(runner, ["cache-lookup", str(path), "--snapshot", str(SNAPSHOT)])
    assert result.exit_code == 0, result.output
    assert "n/a  build 0" in result.stdout and "float32, cpu" in result.stdout
    miss = _tiny_llama_profile(tmp_path, extra="matrix:\n  batch_size: [3]\n")
    result = invoke(runner, ["cache-lookup", str(miss), "--snapshot", str(SNAPSHOT)])
    for internal in ("None", "True", "False", "<", "'"):
        assert internal not in result.stdout, result.stdout
    result = lookup(runner, LLAMA, "--dtype", "int8")
    assert result.exit_code == 2 and "--dtype int8: not one of bf16" in result.output


def test_python_api_for_plan(tmp_path: Path) -> None:
    path = _tiny_llama_profile(tmp_path, extra="matrix:\n  batch_size: [4, 16, 5]\n")
    source = SnapshotSource(SNAPSHOT)
    builds, registry = lookup_builds(load_profile(path).builds, source)
    assert [b.status for b in builds] == ["hit", "hit", "miss"]
    assert registry is not None and not registry.problems
    assert [d.field for d in builds[2].nearest[0].differences] == ["batch_size"]
    result = lookup_model(LLAMA, source, Filters(tp_degree=8, batch_size=4))
    assert result.hit and all(m.entry.tp_degree == 8 for m in result.matches)


# -- staying light -----------------------------------------------------------------------------------


def _imported(args: list[str], env: dict[str, str]) -> set[str]:
    code = "import sys; from neuronc.cli import main; sys.argv = ['neuronc', *sys.argv[1:]]; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_lookups_import_neither_torch_nor_transformers(tmp_path: Path) -> None:
    install_config(LLAMA)
    env = dict(os.environ)
    model = _imported(["cache-lookup", LLAMA, "--snapshot", str(SNAPSHOT), "--json"], env)
    assert not model & {"torch", "transformers", "numpy"}
    # A snapshot lookup of a Hub id does not even need huggingface_hub (0.2 s of imports).
    assert "huggingface_hub" not in model
    path = _tiny_llama_profile(tmp_path)
    profile = _imported(["cache-lookup", str(path), "--snapshot", str(SNAPSHOT)], env)
    assert not profile & {"torch", "transformers", "numpy"}


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "llama", "hidden_size": None},
        # no num_hidden_layers: the class default (36) is longer than the list given
        {"model_type": "smollm3", "no_rope_layers": [1], "use_sliding_window": True, "sliding_window": 10},
    ],
    ids=["null-hidden-size", "short-no-rope-layers"],
)
def test_a_config_its_class_could_not_build_is_exit_2_not_a_traceback(
    runner: CliRunner, tmp_path: Path, config: dict[str, Any]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    result = invoke(runner, ["cache-lookup", str(model), "--snapshot", str(SNAPSHOT)])
    assert result.exit_code == 2, result.output
    assert "transformers could not build its config" in result.stderr
