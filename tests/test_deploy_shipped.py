"""Every shipped Neuron LLM profile, compiled through the SDK doubles, deploys to the stacks that serve it.

The stacks' own parsers check these same bundles in tests/contract/serving/ (their own venvs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _serving import compile_shipped

from neuronc.bundle import read_manifest
from neuronc.deploy import DeployOptions, render
from neuronc.errors import InvalidInputError

pytest.importorskip("torch")
pytest.importorskip("transformers")
# Compiling every shipped profile through the SDK doubles takes about half a minute: run by .ci/run
# (`pytest -m slow`); tests/test_deploy.py covers the emitters in the plain run.
pytestmark = pytest.mark.slow

# What each compiled profile deploys to (stack -> True when served, else the words of the refusal).
EXPECTED = {
    "llama2-13b-tnx-inf2-tp12": {"torchserve": True, "vllm": "--for torchserve"},
    "opt-6.7b-tnx-inf2-tp2": {"torchserve": True, "sagemaker": "--for torchserve"},
    "llama3.1-8b-instruct-nxdi-inf2": {"vllm": "serving: vllm", "tgi": "--for vllm"},
    "llama3.1-8b-instruct-nxdi-inf2+vllm": {"vllm": True},
    "llama3.1-8b-optimum-neuron-tgi": {"vllm": True, "sagemaker": True, "tgi": "--for vllm"},
}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return compile_shipped(tmp_path_factory.mktemp("shipped"))


def test_every_shipped_profile_is_covered(shipped: dict[str, Path]) -> None:
    assert set(shipped) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_profile_deploys_where_it_can(shipped: dict[str, Path], name: str, tmp_path: Path) -> None:
    bundle = shipped[name]
    manifest = read_manifest(bundle)
    for stack, expected in EXPECTED[name].items():
        if expected is True:
            rendered = render(bundle, stack, DeployOptions(image="registry.example/serving:test"))
            files = {f.path: f.text for f in rendered.files}
            assert "benchmark.sh" in files
            scenario = json.loads(files["guidellm-scenario.json"])["spec"]
            compose = yaml.safe_load(files.get("docker-compose.yml", "services: {}"))["services"]
            replicas = len([s for s in compose if s != "nginx"]) or 1
            assert scenario["profile"]["max_concurrency"] == manifest.profile["batch_size"] * replicas
            if "docker-compose.yml" in files:
                services = yaml.safe_load(files["docker-compose.yml"])["services"]
                for service_name, service in services.items():
                    if service_name != "nginx":
                        mount = {"type": "bind", "source": f"{bundle}/artifacts", "target": "/bundle/artifacts"}
                        assert {**mount, "read_only": True} in service["volumes"]
        else:
            with pytest.raises(InvalidInputError) as caught:
                render(bundle, stack)
            assert str(expected) in str(caught.value.hint)
