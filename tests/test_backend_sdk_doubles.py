"""The SDK doubles against the recorded upstream signatures (tests/fixtures/sdk_signatures).

Every double that stands in for an SDK callable neuronc calls binds its calls against the recorded
signature of the Neuron SDK release neuronc targets, so it refuses what the real API would refuse;
a double whose own signature differs from the record fails here. The optimum-neuron double is held
to the constructor recorded in ``neuronc.backends.neuron.optimum_fields`` (which the contract test checks
against the real optimum-neuron 0.4.5).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sdk_signatures as sigs

from neuronc.backends.neuron import nxdi, transformers_neuronx
from neuronc.backends.neuron.optimum_fields import NXD_NEURON_CONFIG_PARAMETERS

DOUBLE_MODULES = (
    "neuronx_distributed_inference.models.config",
    "neuronx_distributed_inference.models.llama.modeling_llama",
    "neuronx_distributed_inference.utils.hf_adapter",
    "transformers_neuronx",
    "torch_neuronx",
)


def _recorded(sdk_doubles: Path) -> list[tuple[str, str, Callable[..., Any]]]:
    for name in DOUBLE_MODULES:
        importlib.import_module(name)
    common = importlib.import_module("sdk_double_common")
    entries: list[tuple[str, str, Callable[..., Any]]] = common.RECORDED
    return entries


def _expanded(package: str, qualname: str) -> list[str]:
    """``{cls}`` stands for every class neuronc calls the method on."""
    if "{cls}" not in qualname:
        return [qualname]
    return [qualname.format(cls=cls) for cls in sorted(set(transformers_neuronx.MODEL_CLASSES.values()))]


def _bound_first(entry: dict[str, Any]) -> bool:
    return entry["kind"] == "method" and entry.get("binding") in ("instance", "classmethod")


def _double_as_written(func: Callable[..., Any], entry: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """The double's parameters (name, kind, default's repr) without self/cls."""
    params = list(inspect.signature(func).parameters.values())
    params = params[1:] if entry["kind"] == "class" or _bound_first(entry) else params
    return [(p.name, p.kind.name, None if p.default is p.empty else repr(p.default)) for p in params]


def _record_forms(entry: dict[str, Any]) -> list[list[tuple[str, str, str | None]]]:
    """The recorded parameters as the source writes them and, behind a forward, as a caller can use them."""
    written = list(entry["parameters"])
    written = written[1:] if _bound_first(entry) else written
    forms = [written]
    if "effective_parameters" in entry:
        forms.append(list(entry["effective_parameters"]))
    return [[(p["name"], p["kind"], p["default"]) for p in form] for form in forms]


def test_every_double_signature_is_the_recorded_one(sdk_doubles: Path) -> None:
    compared = 0
    for package, pattern, func in _recorded(sdk_doubles):
        record = sigs.load_record(package)
        for qualname in _expanded(package, pattern):
            if qualname in record["missing"]:
                continue  # the double refuses the call, as the release does (test below)
            entry = sigs.entry(record, qualname)
            own = _double_as_written(func, entry)
            if own == [("kwargs", "VAR_KEYWORD", None)]:
                continue  # takes (**kwargs) only: each call is bound against the record (recorded())
            assert own in _record_forms(entry), qualname
            compared += 1
    assert compared >= 10


def test_the_doubles_bind_every_call_neuronc_makes(sdk_doubles: Path) -> None:
    recorded = {q for package, pattern, _ in _recorded(sdk_doubles) for q in _expanded(package, pattern)}
    module, cls = nxdi.MODEL_CLASSES["llama"]
    for suffix in ("", ".compile", ".load", ".get_neuron_config_cls", ".get_config_cls"):
        assert f"{module}.{cls}{suffix}" in recorded
    for name in ("load_pretrained_config", "HuggingFaceGenerationAdapter"):
        assert f"neuronx_distributed_inference.utils.hf_adapter.{name}" in recorded
    for name in ("NeuronConfig", "InferenceConfig", "InferenceConfig.load"):
        assert f"neuronx_distributed_inference.models.config.{name}" in recorded
    for cls in set(transformers_neuronx.MODEL_CLASSES.values()):
        for method in ("from_pretrained", "to_neuron", "cpu_compile", "save", "load"):
            assert f"transformers_neuronx.{cls}.{method}" in recorded
    assert {"transformers_neuronx.NeuronConfig", "torch_neuronx.trace"} <= recorded


def test_a_double_refuses_what_the_real_api_refuses(sdk_doubles: Path, tmp_path: Path) -> None:
    import torch
    import torch_neuronx
    import transformers_neuronx as tnx
    from neuronx_distributed_inference.models.config import NeuronConfig
    from neuronx_distributed_inference.utils.hf_adapter import HuggingFaceGenerationAdapter

    NeuronConfig(tp_degree=2, is_continuous_batching=True, ctx_batch_size=1)
    with pytest.raises(TypeError, match=r"NeuronConfig .* got an unexpected keyword argument 'tp_degre'"):
        NeuronConfig(tp_degre=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'fuse_qvk'"):
        tnx.NeuronConfig(fuse_qvk=True)
    with pytest.raises(TypeError, match=r"LlamaForSampling\.from_pretrained"):
        tnx.LlamaForSampling.from_pretrained(str(tmp_path), n_position=128)
    with pytest.raises(TypeError, match="HuggingFaceGenerationAdapter"):
        HuggingFaceGenerationAdapter(object(), offsets=None)
    with pytest.raises(TypeError, match=r"torch_neuronx\.trace"):
        torch_neuronx.trace(torch.nn.Identity(), (torch.zeros(1),), compiler_arg="-O1")


def test_a_method_missing_at_the_release_is_missing_in_the_double(sdk_doubles: Path) -> None:
    import transformers_neuronx as tnx

    model = tnx.GPTJForSampling({}, tp_degree=2)
    with pytest.raises(AttributeError, match=r"GPTJForSampling\.save does not exist"):
        model.save("/tmp/neff")


def test_the_optimum_neuron_double_has_the_recorded_constructor(sdk_doubles: Path) -> None:
    from optimum.neuron import NxDNeuronConfig

    parameters = list(inspect.signature(NxDNeuronConfig.__init__).parameters.values())[1:]
    defaults = [(p.name, "torch.bfloat16" if p.name == "torch_dtype" else repr(p.default)) for p in parameters]
    # The double cannot import torch at module level; its torch_dtype default is the string form.
    assert [p.default for p in parameters if p.name == "torch_dtype"] == ["bfloat16"]
    assert defaults == list(NXD_NEURON_CONFIG_PARAMETERS)
