"""optimum-neuron backend: ``NeuronModelForCausalLM.export`` with the profile's shapes."""

from __future__ import annotations

from typing import ClassVar

from neuronc.backends.base import BackendBase


class OptimumNeuronBackend(BackendBase):
    name: ClassVar[str] = "optimum-neuron"
    description: ClassVar[str] = "optimum-neuron: NeuronModelForCausalLM.export()"
    packages: ClassVar[tuple[str, ...]] = (
        "optimum-neuron",
        "neuronx-cc",
        "torch-neuronx",
        "libneuronxla",
        "neuronx-distributed",
        "torch",
        "transformers",
    )
    required: ClassVar[tuple[str, ...]] = ("optimum-neuron", "neuronx-cc", "torch-neuronx", "neuronx-distributed")
    install_hint: ClassVar[str | None] = (
        "pip install optimum-neuron, plus neuronx-cc, torch-neuronx and neuronx-distributed from "
        "https://pip.repos.neuron.amazonaws.com (the Neuron SDK is not on PyPI)"
    )
