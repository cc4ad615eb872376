"""`neuronc deploy --for neuronc`: serve.sh holds the `neuronc serve` command, the GuideLLM hand-off is sized
to the bundle's compiled shapes, and bundles `neuronc serve` cannot serve are refused.

GuideLLM's own code checks the scenario in tests/contract/guidellm_serve.py (its venv).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from _demo import Demo
from click.testing import CliRunner

from neuronc.bundle import read_manifest
from neuronc.cli import app
from neuronc.deploy import DeployOptions, render
from neuronc.errors import InvalidInputError


def test_deploy_writes_the_serve_command_and_the_guidellm_hand_off(
    demo: Demo, tmp_path: Path, runner: CliRunner
) -> None:
    out = tmp_path / "deploy"
    result = runner.invoke(app, ["deploy", str(demo.bundle), "--for", "neuronc", "--out", str(out), "--port", "8123"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(demo.bundle)
    name = f"tiny-llama-{manifest.config_hash[:12]}"
    script = (out / "serve.sh").read_text()
    [command] = [line for line in script.splitlines() if line.startswith("exec ")]
    argv = shlex.split(command)[1:]
    assert argv[:3] == ["neuronc", "serve", str(demo.bundle.absolute())]
    assert argv[3:] == ["--host", "127.0.0.1", "--port", "8123", "--served-model-name", name, "$@"]
    assert (out / "serve.sh").stat().st_mode & 0o111
    scenario = json.loads((out / "guidellm-scenario.json").read_text())["spec"]
    assert scenario["backend"]["target"] == "http://localhost:8123"
    assert scenario["backend"]["model"] == name
    assert scenario["tokenizer"]["model"] == f"{demo.bundle.absolute()}/model"
    assert scenario["profile"]["max_concurrency"] == 1  # the demo's batch size
    [data] = scenario["data"]
    assert data["prompt_tokens_max"] < 64  # the largest context bucket, BOS included
    assert data["prompt_tokens_max"] + data["output_tokens_max"] < 128  # max_length
    assert "guidellm run --scenario guidellm-scenario.json" in (out / "benchmark.sh").read_text()


def test_deploy_for_neuronc_refuses_a_neuron_bundle(demo: Demo, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(demo.bundle, bundle)
    manifest = bundle / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"target": "cpu"', '"target": "inf2"', 1))
    with pytest.raises(InvalidInputError, match="CPU \\(inductor\\) bundles"):
        render(bundle, "neuronc", DeployOptions())
