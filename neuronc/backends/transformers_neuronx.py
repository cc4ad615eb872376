"""transformers-neuronx backend: ``<Arch>ForSampling.from_pretrained(...).to_neuron()``, then ``save()``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

from neuronc.backends.base import MAX_CORES, BackendBase


class TransformersNeuronxBackend(BackendBase):
    name: ClassVar[str] = "transformers-neuronx"
    description: ClassVar[str] = "transformers-neuronx (deprecated by AWS): <Arch>ForSampling, to_neuron(), save()"
    targets: ClassVar[frozenset[str]] = frozenset({"inf2", "trn1"})
    # transformers-neuronx pads attention heads to the tp degree (the TorchServe Llama-2-13B
    # example runs 40 heads on tp 12), so it does not need tp to divide the head count.
    requires_tp_divides_heads: ClassVar[bool] = False
    packages: ClassVar[tuple[str, ...]] = ("transformers-neuronx", "neuronx-cc", "torch-neuronx", "torch", "transformers")
    required: ClassVar[tuple[str, ...]] = ("transformers-neuronx", "neuronx-cc", "torch-neuronx")
    install_hint: ClassVar[str | None] = (
        "pip install --extra-index-url https://pip.repos.neuron.amazonaws.com transformers-neuronx "
        "neuronx-cc torch-neuronx (last released with Neuron SDK 2.25)"
    )

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        # Any degree up to the instance's core count (tp 12 on inf2.48xlarge is a documented setup).
        return frozenset(range(1, MAX_CORES.get(target, 1) + 1))
