"""optimum-neuron bundles against the real optimum-neuron 0.4.5: the export's neuron_config.json loads
through its ``from_pretrained`` config path (version checks included), and the emitted ``SM_ON_*``
variables, as the container's entrypoint turns them into arguments, parse with ``optimum-cli neuron
serve``'s own parser and equal what ``serve`` checks against the export (batch, sequence, tp).
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("optimum.neuron", reason="optimum-neuron is installed by run_serving_contract.sh")

from neuronc.bundle import read_manifest
from neuronc.deploy import DeployOptions, render
from neuronc.deploy._values import serving_values
from neuronc.deploy.optimum import entrypoint_argv, sm_on_env

NAME = "llama3.1-8b-optimum-neuron-tgi"
# optimum-neuron warns on import on a host without Neuron devices (utils/instance.py); expected here.
pytestmark = pytest.mark.filterwarnings("ignore:It seems this is running on a CPU-only machine:UserWarning")


@pytest.fixture(autouse=True)
def _neuronxcc_version(monkeypatch: pytest.MonkeyPatch, shipped: dict[str, Path]) -> None:
    """The compiler is not on PyPI: a stand-in module carrying the version the bundle recorded."""
    if importlib.util.find_spec("neuronxcc") is None:
        stand_in = types.ModuleType("neuronxcc")
        stand_in.__version__ = read_manifest(shipped[NAME]).toolchain["neuronx-cc"]  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "neuronxcc", stand_in)


def _serve_parser() -> argparse.ArgumentParser:
    from optimum.commands.neuron.serve import ServeCommand

    parser = argparse.ArgumentParser(prog="optimum-cli neuron serve")
    ServeCommand.parse_args(parser)
    return parser


def test_neuron_config_loads_with_optimum_neurons_from_pretrained(shipped: dict[str, Path]) -> None:
    # What NeuronModelForCausalLM.from_pretrained reads (the generic NeuronConfig.from_pretrained also
    # imports optimum's training models, which need neuronx_distributed, not on PyPI).
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    bundle = shipped[NAME]
    config = NxDNeuronConfig.from_pretrained(str(bundle / "artifacts"))
    values = serving_values(read_manifest(bundle), bundle)
    assert config.batch_size == values.batch_size
    assert config.sequence_length == values.max_length
    assert config.tp_degree == values.tp_degree


def test_sm_on_variables_parse_with_optimum_cli_serve(shipped: dict[str, Path]) -> None:
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    bundle = shipped[NAME]
    values = serving_values(read_manifest(bundle), bundle)
    env = sm_on_env(values, str(bundle / "artifacts"))
    args, unknown = _serve_parser().parse_known_args(entrypoint_argv(env)[3:], None)
    unknown = getattr(args, "_unknown_args", unknown)  # serve's parser keeps them on the namespace
    config = NxDNeuronConfig.from_pretrained(args.model)
    # optimum-cli neuron serve raises unless these equal the export's (serve.py, run()).
    assert (args.batch_size, args.sequence_length, args.tensor_parallel_size) == (
        config.batch_size,
        config.sequence_length,
        config.tp_degree,
    )
    assert args.port == 8080 and args.served_model_name == values.served_name
    assert unknown in (None, [], ["--max_model_len", str(values.longest_prompt)])


def test_serve_sh_parses_with_optimum_cli_serve(shipped: dict[str, Path]) -> None:
    rendered = render(shipped[NAME], "vllm")
    script = next(f.text for f in rendered.files if f.path == "serve.sh")
    argv = shlex.split(next(li for li in script.splitlines() if li.startswith("exec ")))[4:]
    args, _ = _serve_parser().parse_known_args(argv, None)
    assert args.model.endswith("/artifacts") and args.batch_size == read_manifest(shipped[NAME]).profile["batch_size"]
    rendered = render(shipped[NAME], "sagemaker", DeployOptions())
    assert rendered.image is not None and "optimum0.4.5" in rendered.image
