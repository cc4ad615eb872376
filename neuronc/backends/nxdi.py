"""NxD Inference backend (neuronx-distributed-inference): ``Neuron<Arch>ForCausalLM.compile()``."""

from __future__ import annotations

from typing import ClassVar

from neuronc.backends.base import BackendBase


class NxdiBackend(BackendBase):
    name: ClassVar[str] = "nxdi"
    description: ClassVar[str] = "NxD Inference: NeuronConfig/InferenceConfig, Neuron<Arch>ForCausalLM.compile()"
    packages: ClassVar[tuple[str, ...]] = (
        "neuronx-cc",
        "torch-neuronx",
        "libneuronxla",
        "neuronx-distributed",
        "neuronx-distributed-inference",
        "torch",
        "transformers",
    )
    required: ClassVar[tuple[str, ...]] = (
        "neuronx-cc",
        "torch-neuronx",
        "neuronx-distributed",
        "neuronx-distributed-inference",
    )
    install_hint: ClassVar[str | None] = (
        "pip install --extra-index-url https://pip.repos.neuron.amazonaws.com "
        "neuronx-cc torch-neuronx neuronx-distributed neuronx-distributed-inference "
        "(the Neuron SDK is not on PyPI; use a Neuron DLAMI or DLC)"
    )
