"""A pipeline test backend whose compiled artifacts keep the weights apart (``weights_binding.embeds``
False) and that reads neuronc's rank shards: what rebind needs, without a real compiler."""

from __future__ import annotations

from typing import ClassVar

from neuronc.backends.weights_binding import WeightsBinding
from plugins.pipeline_backend import PipelineBackend
from plugins.registry import register_backend, unregister_backend

NAME = "rebinding"


class RebindingBackend(PipelineBackend):
    name: ClassVar[str] = NAME
    description: ClassVar[str] = "test double whose compiled graphs hold no weights"
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(False, "test double: its artifacts hold no weights")


def register() -> None:
    register_backend(NAME, "plugins.rebind_backend:RebindingBackend")


def unregister() -> None:
    unregister_backend(NAME)
