"""`neuronc compile` with each Neuron backend, through the SDK doubles, into bundles that verify."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.bundle import read_manifest, verify_bundle
from neuronc.cli import app

LLM = """
model: {{id: ./model}}
backend: {backend}
target: inf2
tp_degree: 2
batch_size: 2
amp: bf16
sequence: {{max_length: 256{buckets}}}
weights: {weights}
"""

CASES = {
    "nxdi": (LLM, {"buckets": ", context_buckets: [128, 256], token_buckets: [256]", "weights": "presharded"}),
    "optimum-neuron": (LLM, {"buckets": "", "weights": "on-load"}),
    "transformers-neuronx": (
        LLM,
        {"buckets": ", context_buckets: [128], token_buckets: [256]", "weights": "presharded"},
    ),
    "torch-neuronx": (
        """
        model: {{id: ./model, task: feature-extraction}}
        backend: {backend}
        target: inf2
        sequence: {{max_length: 64, context_buckets: [32, 64]}}
        """,
        {},
    ),
}
# What each backend must have put in the bundle (besides manifest, profile, model/ and logs/).
EXPECTED = {
    "nxdi": [
        "artifacts/model.pt",
        "artifacts/neuron_config.json",
        "artifacts/weights/tp1_sharded_checkpoint.safetensors",
    ],
    "optimum-neuron": ["artifacts/model.pt", "artifacts/neuron_config.json", "artifacts/model.safetensors"],
    "transformers-neuronx": ["artifacts/checkpoint/pytorch_model.bin/key_to_filename.json"],
    "torch-neuronx": ["artifacts/enc-b1-s32.pt", "artifacts/enc-b1-s64.pt", "artifacts/torch_neuronx.json"],
}


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    out.reset()
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_profile(tmp_path: Path, backend: str, checkpoint: Path) -> Path:
    shutil.copytree(checkpoint, tmp_path / "model")
    template, fields = CASES[backend]
    profile = tmp_path / f"{backend}.yaml"
    profile.write_text(textwrap.dedent(template).format(backend=backend, **fields))
    return profile


@pytest.mark.parametrize("backend", sorted(CASES))
def test_neuronc_compile_writes_a_bundle_that_verifies(
    backend: str,
    runner: CliRunner,
    sdk_doubles: Path,
    tiny_llama: Path,
    tiny_bert: Path,
    tmp_path: Path,
) -> None:
    profile = write_profile(tmp_path, backend, tiny_bert if backend == "torch-neuronx" else tiny_llama)
    code, stdout, stderr = invoke(runner, "compile", str(profile), "--json")
    assert code == 0, stderr
    [build] = json.loads(stdout)["builds"]
    bundle = Path(build["bundle"])
    report = verify_bundle(bundle)
    report.raise_for_problems()
    manifest = read_manifest(bundle)
    files = {f.path for f in manifest.files}
    assert set(EXPECTED[backend]) <= files, sorted(files)
    assert "logs/compile.log" in files
    # Each library shards in its own format: the pipeline writes no neuronc rank shards.
    assert not [f for f in files if f.startswith("weights/")]
    assert manifest.extra["load_snippet"].startswith('bundle = "/path/to/this/bundle"')
    assert manifest.toolchain["neuronx-cc"] == "2.21.33363.0+82129205"
    assert [g.name for g in manifest.graphs] == [g["name"] for g in build["graphs"]]
    code, stdout, stderr = invoke(runner, "inspect", str(bundle))
    assert code == 0, stderr
    assert "this bundle's directory" in stdout


def test_neuronc_compile_without_the_sdk_exits_5_with_the_install_hint(
    runner: CliRunner,
    tiny_llama: Path,
    tmp_path: Path,
) -> None:
    profile = write_profile(tmp_path, "nxdi", tiny_llama)
    code, _, stderr = invoke(runner, "compile", str(profile))
    assert code == 5
    assert "neuronx-distributed-inference" in stderr
    assert "pip.repos.neuron.amazonaws.com" in stderr


def test_neuronc_compile_reports_a_compiler_failure_with_exit_3_and_the_log_tail(
    runner: CliRunner,
    sdk_doubles: Path,
    tiny_llama: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEURONC_SDK_DOUBLE_FAIL", "Unsupported operator: aten::frobnicate")
    profile = write_profile(tmp_path, "nxdi", tiny_llama)
    code, _, stderr = invoke(runner, "compile", str(profile))
    assert code == 3
    assert "ERROR: Unsupported operator: aten::frobnicate" in stderr


def test_a_bundle_for_vllm_records_the_serving_stack_and_its_neuron_config(
    runner: CliRunner,
    sdk_doubles: Path,
    tiny_llama: Path,
    tmp_path: Path,
) -> None:
    profile = write_profile(tmp_path, "nxdi", tiny_llama)
    profile.write_text(profile.read_text() + "options: {serving: vllm}\n")
    code, stdout, stderr = invoke(runner, "compile", str(profile), "--json")
    assert code == 0, stderr
    [build] = json.loads(stdout)["builds"]
    manifest = read_manifest(Path(build["bundle"]))
    nxdi = manifest.extra["nxdi"]
    assert nxdi["serving"] == "vllm"
    assert nxdi["neuron_config"]["is_continuous_batching"] is True
    assert nxdi["neuron_config"]["ctx_batch_size"] == 1
    assert [g.name for g in manifest.graphs] == ["cte-b1-s128", "cte-b1-s256", "tkg-b2-s256"]
