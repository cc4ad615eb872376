"""`neuronc matrix`: one entry per bundle for a CI job matrix, and `compile --only KEY` builds exactly that one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.fake_backend import register, spec_key

from neuronc._output import out
from neuronc.cli import app
from neuronc.hardware import choose_runner
from neuronc.keys import spec_model_dir
from neuronc.profile import load_profile
from neuronc.store import LocalStore


def _invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()  # the output object caches consoles bound to the previous invocation's streams
    return runner.invoke(app, args)


def test_matrix_json_has_one_entry_per_bundle(repo_root: Path, runner: CliRunner) -> None:
    profiles = repo_root / "profiles"
    result = _invoke(runner, ["matrix", str(profiles), "--format", "json"])
    assert result.exit_code == 0, result.output
    matrix = json.loads(result.stdout)
    entries = matrix["include"]
    expected = [spec for path in sorted(profiles.glob("*.yaml")) for spec in load_profile(path).specs]
    assert len(entries) == len(expected)
    unresolved = 0
    for entry, spec in zip(entries, expected, strict=True):
        assert entry["profile"] == spec.profile_path
        assert entry["build"] == spec.build_index
        if spec_model_dir(spec) is None and spec.model.revision is None:
            # A Hub model with no pinned revision, offline and not in the HF cache: no key is guessed.
            assert (entry["config_hash"], entry["key"]) == (None, None)
            unresolved += 1
        else:
            assert entry["config_hash"] == spec_key(spec).hash
            assert entry["key"] == entry["config_hash"][:12]
        assert (entry["backend"], entry["target"], entry["tp_degree"]) == (spec.backend, spec.target, spec.tp_degree)
    assert unresolved and result.stderr.count("key unresolved") == unresolved
    by_name = {(e["name"], e["build"]): e for e in entries}
    assert by_name[("tiny-llama-cpu", 0)]["runner"] == "cpu"
    assert by_name[("llama3.1-8b-instruct-inf2-tp8", 0)]["runner"] == "inf2.24xlarge"  # 8 NeuronCores
    assert by_name[("llama2-13b-torchserve-inf2", 0)]["runner"] == "inf2.24xlarge"  # tp 12
    assert by_name[("opt-6.7b-inf2-tp2", 0)]["runner"] == "inf2.xlarge"  # 2 cores; host RAM unknown here
    # The encoder profile's `matrix:` expands into two bundles with their own keys.
    minilm = [e for e in entries if e["name"].startswith("minilm")]
    assert [e["build"] for e in minilm] == [0, 1]
    assert [e["batch_size"] for e in minilm] == [1, 8]


def test_matrix_github_format_is_one_output_line(repo_root: Path, runner: CliRunner) -> None:
    profile = repo_root / "profiles" / "minilm-encoder-torch-neuronx.yaml"
    result = _invoke(runner, ["matrix", str(profile), "--format", "github"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("matrix=")
    matrix = json.loads(lines[0].removeprefix("matrix="))  # what fromJSON() reads in the workflow
    assert list(matrix) == ["include"]
    assert [e["build"] for e in matrix["include"]] == [0, 1]
    assert "2 bundles in the matrix" in result.stderr


def test_runner_follows_host_ram_when_the_model_config_is_known(tmp_path: Path, runner: CliRunner) -> None:
    model = tmp_path / "opt"
    model.mkdir()
    config = {
        "model_type": "opt",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "ffn_dim": 16384,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
    }
    (model / "config.json").write_text(json.dumps(config))
    profile = tmp_path / "opt.yaml"
    profile.write_text(
        "model: {id: opt}\nbackend: transformers-neuronx\ntarget: inf2\ntp_degree: 2\namp: fp16\n"
        "sequence: {max_length: 2048}\n"
    )
    result = _invoke(runner, ["matrix", str(profile)])
    entry = json.loads(result.stdout)["include"][0]
    # transformers-neuronx holds ~2× the 13.3 GB of fp16 weights while compiling: inf2.xlarge's 16 GiB is too small.
    assert entry["runner"] == "inf2.8xlarge"
    assert entry["preflight"] == "fits"


@pytest.mark.parametrize(
    ("target", "tp", "host", "options", "runner"),
    [
        ("cpu", 1, None, None, "cpu"),
        ("inf2", 1, None, None, "inf2.xlarge"),
        ("inf2", 2, 40 * 1024**3, None, "inf2.8xlarge"),
        ("inf2", 8, None, None, "inf2.24xlarge"),
        ("inf2", 24, None, None, "inf2.48xlarge"),
        ("inf2", 8, 500 * 1024**3, None, "inf2.48xlarge"),
        ("trn1", 2, None, None, "trn1.2xlarge"),
        ("trn1", 2, 64 * 1024**3, None, "trn1.32xlarge"),
        ("trn1", 32, None, None, "trn1.32xlarge"),
        ("trn2", 4, None, None, "trn2.3xlarge"),
        ("trn2", 8, None, {"logical_nc_config": 1}, "trn2.3xlarge"),
        ("trn2", 64, None, None, "trn2.48xlarge"),
    ],
)
def test_choose_runner(target: str, tp: int, host: int | None, options: dict[str, Any] | None, runner: str) -> None:
    assert choose_runner(target, tp, host_bytes=host, options=options) == runner


def test_matrix_refuses_more_jobs_than_github_runs(tmp_path: Path, runner: CliRunner) -> None:
    register()
    profile = tmp_path / "big.yaml"
    sizes = ", ".join(str(b) for b in range(1, 258))
    profile.write_text(
        "model: {id: acme/m, revision: 0123456789abcdef0123456789abcdef01234567}\nbackend: fake\ntarget: inf2\n"
        f"sequence: {{max_length: 128}}\nmatrix: {{batch_size: [{sizes}]}}\n"
    )
    result = _invoke(runner, ["matrix", str(profile), "--format", "github"])
    assert result.exit_code == 2
    assert "257 bundles; GitHub Actions runs at most 256 jobs per matrix" in result.stderr
    result = _invoke(runner, ["matrix", str(profile), "--format", "json"])
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["include"]) == 257


def test_matrix_bad_inputs_exit_2(tmp_path: Path, runner: CliRunner) -> None:
    (tmp_path / "empty").mkdir()
    result = _invoke(runner, ["matrix", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no *.yaml profiles" in result.stderr
    result = _invoke(runner, ["matrix", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "no such profile" in result.stderr


def test_compile_only_key_from_the_matrix_builds_exactly_that_bundle(
    tmp_path: Path, runner: CliRunner, repo_root: Path
) -> None:
    """The fan-out contract: each matrix job compiles one bundle by its key."""
    register()
    profile = tmp_path / "fan.yaml"
    model = repo_root / "profiles" / "models" / "tiny-llama"
    profile.write_text(
        f"model: {{id: {model}}}\nbackend: fake\ntarget: inf2\n"
        "tp_degree: 1\nsequence: {max_length: 128}\nmatrix: {batch_size: [1, 2, 4]}\n"
    )
    result = _invoke(runner, ["matrix", str(profile)])
    entries = json.loads(result.stdout)["include"]
    assert len(entries) == 3
    store = tmp_path / "store"
    chosen = entries[1]
    report = tmp_path / "report.json"
    result = _invoke(
        runner,
        [
            "compile",
            chosen["profile"],
            "--only",
            chosen["key"],
            "--store",
            str(store),
            "--report",
            str(report),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    records = data["builds"]
    assert [(r["config_hash"], r["status"]) for r in records] == [(chosen["config_hash"], "built")]
    assert data["exit_code"] == 0
    assert [e.manifest.config_hash for e in LocalStore(store).list()] == [chosen["config_hash"]]
