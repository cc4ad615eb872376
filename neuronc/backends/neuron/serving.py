"""The serving capabilities of the NxD Inference and optimum-neuron backends (``neuronc.backends.serving``).

- nxdi: ``neuronx-cc``, ``neuronx-distributed-inference``, ``torch-neuronx`` (NxDI's model.pt is
  TorchScript traced with them) and ``target``; pinned: ``tp`` and ``buckets`` (the NeuronConfig in
  the bundle, which NxDI loads).
- optimum-neuron: ``optimum-neuron`` and ``neuronx-cc`` as exact strings, as optimum-neuron compares
  them before it loads an export (``configuration_utils.py``, ``from_dict``), and ``target`` (it
  refuses a model "compiled for ... but the current instance type is ...",
  ``pretrained_model.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronc.backends.serving import (
    NOT_RECORDED,
    RECOMPILE,
    UNKNOWN,
    Part,
    ServingSide,
    compare,
    how_to_check,
    pinned,
    target_part,
    text,
    unchecked,
    version_parts,
)
from neuronc.backends.support import public

NXDI_VERSIONS = ("neuronx-cc", "neuronx-distributed-inference", "torch-neuronx")
OPTIMUM_VERSIONS = ("optimum-neuron", "neuronx-cc")


def nxdi_parts(values: Any, side: ServingSide) -> tuple[list[Part], list[str]]:
    parts = version_parts(NXDI_VERSIONS, values.toolchain, side)
    parts.append(target_part(values.target, side, "nxdi"))
    config = dict(values.nxdi.neuron_config) if values.nxdi is not None else {}
    parts.append(pinned("tp", str(values.tp_degree), "the NeuronConfig in the bundle, which NxDI loads"))
    loaded = config.get("context_encoding_buckets")
    buckets = text(loaded if isinstance(loaded, list) else values.context_buckets)
    parts.append(pinned("buckets", buckets, "the NeuronConfig in the bundle, which NxDI loads"))
    return parts, []


def optimum_parts(values: Any, side: ServingSide) -> tuple[list[Part], list[str]]:
    """optimum-neuron compares its version and neuronx-cc's as exact strings before it loads an export."""
    parts = []
    for package in OPTIMUM_VERSIONS:
        ours, theirs = values.toolchain.get(package), side.versions.get(package)
        if not ours:
            parts.append(unchecked(package, NOT_RECORDED, theirs or UNKNOWN, f"the bundle records none: {RECOMPILE}"))
        elif theirs is None and side.pins_only:
            parts.append(unchecked(package, ours, UNKNOWN, f"{side.source} records none: {how_to_check(side)}"))
        elif side.pins_only and theirs is not None and public(theirs) == theirs:
            # A recipe records public versions only; the Neuron repository publishes one build of each.
            note = f"{side.source} records the public version; optimum-neuron compares the exact string {ours}"
            parts.append(compare(package, public(ours) or ours, theirs, note))
        else:
            parts.append(compare(package, ours, theirs or "none"))
    parts.append(target_part(values.target, side, "optimum-neuron"))
    return parts, []


class NxdiServing:
    """The serving capability of the nxdi backend."""

    def key_parts(self, values: Any, extra: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]:
        del extra  # the NeuronConfig it loads is in the serving values
        return nxdi_parts(values, side)


class OptimumServing:
    """The serving capability of the optimum-neuron backend."""

    def key_parts(self, values: Any, extra: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]:
        del extra
        return optimum_parts(values, side)


__all__ = ["NXDI_VERSIONS", "OPTIMUM_VERSIONS", "NxdiServing", "OptimumServing", "nxdi_parts", "optimum_parts"]
