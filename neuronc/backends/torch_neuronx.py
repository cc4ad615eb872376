"""torch-neuronx backend: ``torch_neuronx.trace`` per bucket, for encoders and custom models."""

from __future__ import annotations

from typing import ClassVar

from neuronc.backends.base import ENCODER_TASKS, LLM_TASKS, BackendBase


class TorchNeuronxBackend(BackendBase):
    name: ClassVar[str] = "torch-neuronx"
    description: ClassVar[str] = "torch-neuronx: torch_neuronx.trace per bucket (encoders, custom models)"
    tasks: ClassVar[frozenset[str]] = ENCODER_TASKS | LLM_TASKS
    packages: ClassVar[tuple[str, ...]] = ("torch-neuronx", "neuronx-cc", "libneuronxla", "torch", "transformers")
    required: ClassVar[tuple[str, ...]] = ("torch-neuronx", "neuronx-cc")
    install_hint: ClassVar[str | None] = (
        "pip install --extra-index-url https://pip.repos.neuron.amazonaws.com torch-neuronx neuronx-cc "
        "(the Neuron SDK is not on PyPI)"
    )
