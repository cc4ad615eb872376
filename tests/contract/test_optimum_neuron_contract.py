"""Contract test against the real optimum-neuron 0.4.5 (its config classes import on CPU).

neuronc's optimum-neuron mapping is checked against optimum-neuron's own code, not a double:
``NxDNeuronConfig``'s constructor must be the one neuronc recorded (``_optimum_fields``, which
``options.neuron_config`` is validated against), must accept every field neuronc sets and keep it
through ``to_dict``, ``save_pretrained`` and ``from_pretrained``; ``get_neuron_config`` and
``export`` must accept the arguments neuronc passes; the instance type and dtype must normalise to
what neuronc records. The SDK double of ``optimum.neuron`` must write the same neuron_config.json
keys as the real class.

optimum-neuron pins transformers 4.57.x and torch 2.8, so this runs in its own environment:
``tests/contract/run_optimum_contract.sh``. Elsewhere it is skipped. The only stand-in is a
``neuronxcc`` module carrying a version string (the compiler is not on PyPI); optimum-neuron reads
nothing else from it here.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip(
    "optimum.neuron", reason="optimum-neuron is not installed (run tests/contract/run_optimum_contract.sh)"
)

from neuronc.backends._optimum_fields import NXD_NEURON_CONFIG_PARAMETERS, OPTIMUM_NEURON_VERSION
from neuronc.backends.optimum_neuron import get_neuron_config_arguments, neuron_config_kwargs
from neuronc.profile import load_profile, parse_profile

REPO = Path(__file__).resolve().parents[2]
NEURONXCC_VERSION = "2.21.33363.0+82129205"  # the compiler optimum-neuron 0.4.5 pins


@pytest.fixture(autouse=True)
def _neuronxcc_version(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("neuronxcc") is None:
        stand_in = types.ModuleType("neuronxcc")
        stand_in.__version__ = NEURONXCC_VERSION  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "neuronxcc", stand_in)


def _specs(tmp_path: Path) -> list:  # type: ignore[type-arg]
    shipped = load_profile(REPO / "profiles/llama3.1-8b-optimum-neuron-tgi.yaml").builds
    text = """
    model: {id: example-org/tiny-llama, revision: 0123456789abcdef0123456789abcdef01234567}
    backend: optimum-neuron
    target: trn2
    tp_degree: 4
    batch_size: 1
    amp: fp16
    sequence: {max_length: 4096, max_context_length: 1024}
    weights: reference
    matrix: {amp: [fp16, bf16, fp32]}
    """
    local = parse_profile(text, str(tmp_path / "p.yaml"), base_dir=tmp_path).builds
    return [*shipped, *local]


def test_the_recorded_constructor_is_the_real_one() -> None:
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig
    from optimum.neuron.version import __version__

    assert __version__ == OPTIMUM_NEURON_VERSION
    parameters = list(inspect.signature(NxDNeuronConfig.__init__).parameters.values())[1:]
    assert [(p.name, repr(p.default)) for p in parameters] == list(NXD_NEURON_CONFIG_PARAMETERS)


def test_nxd_neuron_config_accepts_and_keeps_every_field(tmp_path: Path) -> None:
    import torch
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    parameters = inspect.signature(NxDNeuronConfig.__init__).parameters
    for spec in _specs(tmp_path):
        kwargs = neuron_config_kwargs(spec)
        assert set(kwargs) <= set(parameters), sorted(set(kwargs) - set(parameters))
        config = NxDNeuronConfig(**kwargs)
        assert config.torch_dtype == getattr(torch, spec.dtype)
        data = config.to_dict()
        assert {k: data[k] for k in kwargs} == kwargs
        assert data["_serialized_key"] == "NxDNeuronConfig"
        out = tmp_path / spec.amp / str(spec.build_index)
        config.save_pretrained(out)
        # What the decoder models' from_pretrained does (version checks included).
        reloaded = NxDNeuronConfig.from_pretrained(out)
        assert {k: reloaded.to_dict()[k] for k in kwargs} == kwargs


def test_export_arguments_fit_get_neuron_config_and_normalise_like_neuronc(tmp_path: Path) -> None:
    import torch
    from optimum.neuron import NeuronModelForCausalLM
    from optimum.neuron.utils.argument_utils import DTYPE_MAPPER
    from optimum.neuron.utils.instance import normalize_instance_type

    for spec in _specs(tmp_path):
        args = get_neuron_config_arguments(spec)
        inspect.signature(NeuronModelForCausalLM.get_neuron_config).bind(spec.model.id, config=None, **args)
        assert normalize_instance_type(args["instance_type"]) == neuron_config_kwargs(spec)["target"]
        assert DTYPE_MAPPER.pt(spec.dtype) == getattr(torch, spec.dtype)
        inspect.signature(NeuronModelForCausalLM.export).bind(
            model_id="dir", neuron_config=object(), config=None, load_weights=False
        )


def test_the_sdk_double_writes_the_same_neuron_config_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    site = REPO / "tests/sdk_doubles/site"
    monkeypatch.syspath_prepend(str(site))
    location = site / "optimum/neuron/__init__.py"
    module_spec = importlib.util.spec_from_file_location("optimum_neuron_sdk_double", location)
    assert module_spec is not None and module_spec.loader is not None
    double = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(double)
    for spec in _specs(tmp_path)[:1]:
        kwargs = neuron_config_kwargs(spec)
        real = NxDNeuronConfig(**kwargs).to_dict()
        fake = double.NxDNeuronConfig(**kwargs).to_dict()
        assert sorted(fake) == sorted(real)
        assert json.dumps(fake, sort_keys=True) == json.dumps(real, sort_keys=True)
