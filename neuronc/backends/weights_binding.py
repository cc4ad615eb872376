"""Whether a backend's compiled artifacts embed the model's weights, and the upstream source that says so.

The answer decides what a build's graphs key covers (``neuronc.keys``): where the compiled graphs
do not hold the weights (``embeds=False``), the graphs key leaves the weights out, so another
checkpoint of the same architecture finds the graphs and only its weights are staged (a rebind).
Where they do (``True``), or no source says (``None``), the weights key is part of the graphs key:
correct first, reuse second. Each backend class declares one as ``weights_binding``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuronc.backends.base import Backend


@dataclass(frozen=True)
class WeightsBinding:
    """``embeds``: True (the compiled artifacts hold the weights), False (they are bound or loaded
    beside them), None (no source says); ``source``: where upstream says so."""

    embeds: bool | None
    source: str

    @property
    def separate(self) -> bool:
        """The graphs are known not to hold the weights (another checkpoint may reuse them)."""
        return self.embeds is False

    def describe(self) -> str:
        answer = {True: "embed the weights", False: "keep the weights apart", None: "may embed the weights"}
        return f"compiled graphs {answer[self.embeds]} ({self.source})"


UNKNOWN = WeightsBinding(None, "not declared by the backend: its graphs are treated as holding the weights")


def weights_binding_of(backend: Backend | object) -> WeightsBinding:
    """A backend's declared binding; a backend that declares none (a third-party plugin written
    before the attribute existed) is treated as embedding the weights."""
    binding = getattr(backend, "weights_binding", None)
    return binding if isinstance(binding, WeightsBinding) else UNKNOWN


__all__ = ["UNKNOWN", "WeightsBinding", "weights_binding_of"]
