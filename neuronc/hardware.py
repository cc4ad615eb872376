"""Neuron hardware facts in one place: NeuronCores per device, HBM, logical NeuronCore size (LNC),
tensor-parallel degrees per target, and the instance types that carry each target.

Read by the Neuron backends (which tp degrees and LNC a target accepts), the memory pre-flight (HBM
per core) and deploy (which instance holds a bundle, how many cores a replica sees). A leaf: it
imports nothing else from neuronc.

Sources:
- NeuronCores and HBM per device: AWS Neuron docs, about-neuron/arch/neuron-hardware/
  (inferentia2.rst, trainium.rst, trainium2.rst, trainium3.rst) in aws-neuron/aws-neuron-sdk. Trn3: 8
  NeuronCore-v4 per chip and 144 GiB of HBM (trainium3.rst at the SDK's HEAD, 2026-08).
- tp degrees: libraries/nxd-inference/api-guides/api-guide.rst (``tp_degree``) in the same
  repository; the trn2 list is given at LNC=2. At LNC=1 trn2 shows its 8 physical cores per device:
  neuronc allows the LNC=2 powers of two extended to 128 (not documented upstream).
- LNC: trn2 defaults to 2 and accepts 1 (NEURON_LOGICAL_NC_CONFIG, ``logical_nc_config`` in NxD
  Inference); inf2 and trn1 have no logical cores (LNC is 1). LNC "applies only to Trn2 and Trn3"
  (about-neuron/arch/neuron-features/logical-neuroncore-config.rst); Trn3's default is not stated
  there: neuronc takes 2 (trainium3.rst gives "LNC 1 or 2 (default 2)" for the chip). The chip's
  sizes are not every backend's: the vllm-neuron plugin compiles for LNC 2 only (its neuronx-cc
  command passes no --lnc; the support matrix's VLLM-NEURON-LNC), which the support matrix, not
  this table, says.
- tp degrees on trn3: not documented upstream; neuronc allows trn2's lists (powers of two to 64 at
  LNC 2, to 128 at LNC 1).
- Instance types: AWS's published instance specifications. No Trn3 instance size is named in any
  source neuronc's authors read (only the UltraServer family "Trn3pds", deploy/eks/
  ultraserver-operator.rst), so trn3 has no entry: deploy places a trn3 bundle on the devices its
  tp degree needs and takes ``--instance-type`` only for the families listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
LNC_OPTION = "logical_nc_config"


@dataclass(frozen=True)
class Chip:
    """One Neuron device of a target: physical NeuronCores, HBM, the LNC sizes it accepts."""

    target: str
    physical_cores: int
    hbm_bytes: int
    lnc_sizes: tuple[int, ...]
    default_lnc: int
    # Tensor-parallel degrees the runtime supports, per LNC size.
    tp_degrees: Mapping[int, frozenset[int]]

    def cores_per_device(self, lnc: int) -> int:
        """NeuronCores one device shows at this LNC size (LNC 2 pairs physical cores)."""
        return self.physical_cores // lnc

    def hbm_per_core(self, lnc: int) -> int:
        return self.hbm_bytes // self.cores_per_device(lnc)


CHIPS: Mapping[str, Chip] = {
    "inf2": Chip("inf2", 2, 32 * GIB, (1,), 1, {1: frozenset({1, 2, 4, 8, 24})}),
    "trn1": Chip("trn1", 2, 32 * GIB, (1,), 1, {1: frozenset({1, 2, 8, 16, 32})}),
    "trn2": Chip(
        "trn2",
        8,
        96 * GIB,
        (1, 2),
        2,
        {2: frozenset({1, 2, 4, 8, 16, 32, 64}), 1: frozenset({1, 2, 4, 8, 16, 32, 64, 128})},
    ),
    "trn3": Chip(
        "trn3",
        8,
        144 * GIB,
        (1, 2),
        2,
        {2: frozenset({1, 2, 4, 8, 16, 32, 64}), 1: frozenset({1, 2, 4, 8, 16, 32, 64, 128})},
    ),
}


def chip(target: str) -> Chip | None:
    """The device of a Neuron target; None for a target without one (cpu)."""
    return CHIPS.get(target)


def lnc(target: str, options: Mapping[str, Any] | None = None) -> int:
    """The logical NeuronCore size a build compiles for: the ``logical_nc_config`` option, else the
    target's default (2 on trn2 and trn3, 1 elsewhere, as NxD Inference decides)."""
    value = (options or {}).get(LNC_OPTION)
    if value is not None:
        return int(value)
    device = chip(target)
    return device.default_lnc if device is not None else 1


def tp_degrees(target: str, options: Mapping[str, Any] | None = None) -> frozenset[int] | None:
    """Tensor-parallel degrees the runtime supports for a build; None when unknown (cpu)."""
    device = chip(target)
    if device is None:
        return None
    return device.tp_degrees.get(lnc(target, options))


def hbm_per_core(target: str, options: Mapping[str, Any] | None = None) -> int | None:
    """HBM per NeuronCore at the build's LNC size; None for a target without HBM (cpu)."""
    device = chip(target)
    return None if device is None else device.hbm_per_core(lnc(target, options))


@dataclass(frozen=True)
class InstanceType:
    """An EC2 instance type with Neuron devices."""

    name: str
    target: str
    devices: int
    vcpus: int
    host_memory_gib: int

    @property
    def chip(self) -> Chip:
        return CHIPS[self.target]

    def cores_at(self, options: Mapping[str, Any] | None = None) -> int:
        """NeuronCores a build sees on this instance (trn2 at LNC=1 shows its physical cores)."""
        return self.devices * self.cores_per_device(options)

    def cores_per_device(self, options: Mapping[str, Any] | None = None) -> int:
        return self.chip.cores_per_device(lnc(self.target, options))


INSTANCE_TYPES: tuple[InstanceType, ...] = (
    InstanceType("inf2.xlarge", "inf2", 1, 4, 16),
    InstanceType("inf2.8xlarge", "inf2", 1, 32, 128),
    InstanceType("inf2.24xlarge", "inf2", 6, 96, 384),
    InstanceType("inf2.48xlarge", "inf2", 12, 192, 768),
    InstanceType("trn1.2xlarge", "trn1", 1, 8, 32),
    InstanceType("trn1.32xlarge", "trn1", 16, 128, 512),
    InstanceType("trn2.3xlarge", "trn2", 1, 12, 128),
    InstanceType("trn2.48xlarge", "trn2", 16, 192, 2048),
)
CPU_RUNNER = "cpu"


# On EC2 (Nitro) the DMI product name is the instance type and the system vendor "Amazon EC2" (AWS
# docs, "Identify EC2 Linux instances"). Read only, never a network call (no instance metadata).
DMI_DIR = Path("/sys/devices/virtual/dmi/id")
_FAMILY_TARGETS = {"inf2": "inf2", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2", "trn2u": "trn2", "trn3": "trn3"}


def host_target(dmi: Path | None = None) -> str | None:
    """The Neuron target of this host from its EC2 instance type (DMI), or None where it cannot say."""
    root = DMI_DIR if dmi is None else dmi
    try:
        vendor = (root / "sys_vendor").read_bytes()[:64].decode("ascii", "replace").strip()
        product = (root / "product_name").read_bytes()[:64].decode("ascii", "replace").strip()
    except OSError:
        return None
    if vendor != "Amazon EC2":
        return None
    return _FAMILY_TARGETS.get(product.partition(".")[0])


def max_cores(target: str, options: Mapping[str, Any] | None = None) -> int:
    """The most NeuronCores one instance of the target shows (1 for a target without devices)."""
    return max((i.cores_at(options) for i in INSTANCE_TYPES if i.target == target), default=1)


def instance_type(name: str) -> InstanceType | None:
    """Look an instance type up by name (``ml.`` SageMaker prefixes are accepted)."""
    bare = name.removeprefix("ml.")
    return next((i for i in INSTANCE_TYPES if i.name == bare), None)


def choose_runner(
    target: str, tp_degree: int, *, host_bytes: int | None = None, options: Mapping[str, Any] | None = None
) -> str:
    """The smallest instance of the target's family with tp NeuronCores and (when known) the host RAM.

    ``cpu`` for the CPU target; the target's own name for a Neuron target without a listed instance
    size (trn3). When no instance has the RAM, the largest one with enough cores.
    """
    if target not in {i.target for i in INSTANCE_TYPES}:
        return target if target in CHIPS else CPU_RUNNER
    family = sorted(
        (i for i in INSTANCE_TYPES if i.target == target and i.cores_at(options) >= tp_degree),
        key=lambda i: (i.host_memory_gib, i.devices),
    )
    if not family:
        return max((i for i in INSTANCE_TYPES if i.target == target), key=lambda i: i.devices).name
    if host_bytes is not None:
        for candidate in family:
            if candidate.host_memory_gib * GIB >= host_bytes:
                return candidate.name
        return family[-1].name
    return family[0].name


def default_instance(target: str, tp_degree: int, options: Mapping[str, Any] | None = None) -> InstanceType | None:
    """The instance a deployment of this build defaults to: the smallest with tp cores (None when
    the target has no listed instance size)."""
    return instance_type(choose_runner(target, tp_degree, options=options))


def devices_for(target: str, tp_degree: int, options: Mapping[str, Any] | None = None) -> int:
    """How many devices of the target hold tp_degree NeuronCores at the build's LNC (1 without a device)."""
    device = chip(target)
    if device is None:
        return 1
    per_device = device.cores_per_device(lnc(target, options))
    return max(1, -(-tp_degree // per_device))


__all__ = [
    "CHIPS",
    "CPU_RUNNER",
    "GIB",
    "INSTANCE_TYPES",
    "LNC_OPTION",
    "Chip",
    "InstanceType",
    "chip",
    "choose_runner",
    "default_instance",
    "devices_for",
    "hbm_per_core",
    "host_target",
    "instance_type",
    "lnc",
    "max_cores",
    "tp_degrees",
]
