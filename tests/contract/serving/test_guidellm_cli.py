"""Each target's ``benchmark.sh`` runs GuideLLM's own CLI (PyPI ``guidellm``) on its scenario: the script
is executed with a ``guidellm`` shim on PATH that runs the real CLI in-process with only the final
benchmark call replaced by a recorder, so option parsing and the scenario's validation
(``BenchmarkScenario.create``) are GuideLLM's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("guidellm", reason="guidellm is installed by run_serving_contract.sh")

from neuronc.bundle import read_manifest
from neuronc.deploy import DeployOptions, render, write

SHIM = """#!{python}
import asyncio, json, os, sys
import guidellm.entrypoints as entry

async def record(args, **kwargs):
    with open(os.environ["GUIDELLM_RECORD"], "w") as f:
        json.dump(args.model_dump(mode="json"), f)

entry.benchmark_generative_text = record
from guidellm.__main__ import cli
sys.argv[0] = "guidellm"
cli()
"""

CASES = [
    ("llama3.1-8b-instruct-nxdi-inf2+vllm", "vllm"),
    ("llama3.1-8b-optimum-neuron-tgi", "vllm"),
    ("llama3.1-8b-optimum-neuron-tgi", "sagemaker"),
    ("llama2-13b-tnx-inf2-tp12", "torchserve"),
    ("opt-6.7b-tnx-inf2-tp2", "torchserve"),
    ("vllm-neuron-2.32.0", "vllm"),
]


@pytest.mark.parametrize(("name", "stack"), CASES)
def test_benchmark_runs_guidellms_cli(
    shipped: dict[str, Path], vllm_neuron_bundles: dict[str, Path], name: str, stack: str, tmp_path: Path
) -> None:
    bundle = {**shipped, **vllm_neuron_bundles}[name]
    manifest = read_manifest(bundle)
    out = tmp_path / stack
    write(render(bundle, stack, DeployOptions(image="registry.example/x:y")), out)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "guidellm"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    record = tmp_path / "args.json"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GUIDELLM_RECORD": str(record)}
    result = subprocess.run(["sh", str(out / "benchmark.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    spec = json.loads(record.read_text())["spec"]
    assert spec["profile"]["kind"] == "sweep"
    compose = out / "docker-compose.yml"
    services = yaml.safe_load(compose.read_text())["services"] if compose.is_file() else {}
    replicas = len([s for s in services if s != "nginx"]) or 1
    assert spec["profile"]["max_concurrency"] == manifest.profile["batch_size"] * replicas
    [data] = spec["data"]
    seq = manifest.profile["sequence"]
    assert data["prompt_tokens_max"] <= max(seq["context_buckets"])
    assert data["prompt_tokens_max"] + data["output_tokens_max"] <= seq["max_length"]
    assert spec["outputs"][0]["kind"] == "json" and spec["outputs"][0]["path"].endswith(".json")
