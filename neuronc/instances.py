"""Neuron instance types: devices, NeuronCores and host memory, for runner choice and deploy layouts.

Figures are AWS's published instance specifications. ``cores`` counts the NeuronCores the runtime
shows by default: 2 per device on inf2 and trn1; on trn2, 4 logical cores per device at LNC=2 (the
default), 8 physical ones at LNC=1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1024**3


@dataclass(frozen=True)
class InstanceType:
    name: str
    target: str
    devices: int
    cores_per_device: int
    vcpus: int
    host_memory_gib: int

    @property
    def cores(self) -> int:
        return self.devices * self.cores_per_device

    def cores_at(self, options: Mapping[str, Any] | None = None) -> int:
        """NeuronCores a build sees: trn2 at LNC=1 shows twice as many (physical) cores."""
        if self.target == "trn2" and int((options or {}).get("logical_nc_config", 2)) == 1:
            return self.cores * 2
        return self.cores


INSTANCE_TYPES: tuple[InstanceType, ...] = (
    InstanceType("inf2.xlarge", "inf2", 1, 2, 4, 16),
    InstanceType("inf2.8xlarge", "inf2", 1, 2, 32, 128),
    InstanceType("inf2.24xlarge", "inf2", 6, 2, 96, 384),
    InstanceType("inf2.48xlarge", "inf2", 12, 2, 192, 768),
    InstanceType("trn1.2xlarge", "trn1", 1, 2, 8, 32),
    InstanceType("trn1.32xlarge", "trn1", 16, 2, 128, 512),
    InstanceType("trn2.3xlarge", "trn2", 1, 4, 12, 128),
    InstanceType("trn2.48xlarge", "trn2", 16, 4, 192, 2048),
)
CPU_RUNNER = "cpu"


def instance_type(name: str) -> InstanceType | None:
    """Look an instance type up by name (``ml.`` SageMaker prefixes are accepted)."""
    bare = name.removeprefix("ml.")
    return next((i for i in INSTANCE_TYPES if i.name == bare), None)


def choose_runner(
    target: str, tp_degree: int, *, host_bytes: int | None = None, options: Mapping[str, Any] | None = None
) -> str:
    """The smallest instance of the target's family with tp NeuronCores and (when known) the host RAM.

    ``cpu`` for the CPU target. When no instance has the RAM, the largest one with enough cores.
    """
    if target not in {i.target for i in INSTANCE_TYPES}:
        return CPU_RUNNER
    family = sorted(
        (i for i in INSTANCE_TYPES if i.target == target and i.cores_at(options) >= tp_degree),
        key=lambda i: (i.host_memory_gib, i.cores),
    )
    if not family:
        return max((i for i in INSTANCE_TYPES if i.target == target), key=lambda i: i.cores).name
    if host_bytes is not None:
        for candidate in family:
            if candidate.host_memory_gib * GIB >= host_bytes:
                return candidate.name
        return family[-1].name
    return family[0].name


def default_instance(target: str, tp_degree: int, options: Mapping[str, Any] | None = None) -> InstanceType | None:
    """The instance a deployment of this build defaults to: the smallest with tp cores."""
    name = choose_runner(target, tp_degree, options=options)
    return instance_type(name)


__all__ = [
    "CPU_RUNNER",
    "INSTANCE_TYPES",
    "InstanceType",
    "choose_runner",
    "default_instance",
    "instance_type",
]
