"""optimum-neuron 0.4.0 and 0.4.1 bundles against those versions' own ``optimum-cli neuron serve`` parser.

The contract venv holds optimum-neuron 0.4.5 (the others pin other vLLM and optimum releases), so
the runner downloads the 0.4.0 and 0.4.1 wheels (``NEURONC_OPTIMUM_WHEELS``) and this test loads each
wheel's ``optimum/commands/neuron/serve.py`` as a module of the installed ``optimum.commands.neuron``
package: its ``ServeCommand.parse_args`` (the code that declares the options) runs as released; the
names it imports resolve to 0.4.5's, where they all exist. Before 0.4.2 optimum's CLI calls
``parser.parse_args()``, so an argument the version does not declare is an error (exit 2): the test
parses strictly.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

pytest.importorskip("optimum.neuron", reason="optimum-neuron is installed by run_serving_contract.sh")

from test_deploy import FULL, _bundle, _exec_argv, _files

from neuronc.deploy import DeployOptions, render
from neuronc.deploy.optimum import entrypoint_argv

VERSIONS = ("0.4.0", "0.4.1")
CC = "2.21.18209.0"  # what both versions' pyproject.toml pins
pytestmark = pytest.mark.filterwarnings("ignore:It seems this is running on a CPU-only machine:UserWarning")


def _serve_module(version: str, tmp_path: Path) -> ModuleType:
    wheels = os.environ.get("NEURONC_OPTIMUM_WHEELS")
    if not wheels:
        pytest.fail("NEURONC_OPTIMUM_WHEELS is not set (tests/contract/run_serving_contract.sh downloads them)")
    [wheel] = Path(wheels).glob(f"optimum_neuron-{version}-*.whl")
    source = tmp_path / f"serve_{version.replace('.', '_')}.py"
    with zipfile.ZipFile(wheel) as archive:
        source.write_bytes(archive.read("optimum/commands/neuron/serve.py"))
    name = f"optimum.commands.neuron._serve_{version.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _strict_parse(version: str, tmp_path: Path, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="optimum-cli neuron serve", exit_on_error=False)
    _serve_module(version, tmp_path).ServeCommand.parse_args(parser)
    args, unknown = parser.parse_known_args(argv)
    assert not unknown, f"optimum-neuron {version}: unrecognized arguments: {' '.join(unknown)}"
    return args


@pytest.mark.parametrize("version", VERSIONS)
def test_the_emitted_arguments_parse_with_the_versions_own_serve_parser(tmp_path: Path, version: str) -> None:
    bundle = _bundle(
        tmp_path, "optimum-neuron", toolchain={"optimum-neuron": version, "neuronx-cc": CC}, sequence=FULL, tp_degree=2
    )
    files = _files(render(bundle, "vllm", DeployOptions(instance_type="inf2.24xlarge")))
    env = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]["environment"]
    for argv in (entrypoint_argv(env)[3:], _exec_argv(files["serve.sh"])[3:]):
        args = _strict_parse(version, tmp_path, argv)
        assert (str(args.tensor_parallel_size), str(args.batch_size), str(args.sequence_length)) == ("2", "4", "4096")
        if version == "0.4.0":
            assert not hasattr(args, "served_model_name")  # 0.4.0 has no such option: none is emitted
        else:
            assert args.served_model_name == "meta-llama/Llama-3.1-8B"
