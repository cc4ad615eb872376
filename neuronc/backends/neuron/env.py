"""The Neuron host and the environment of one Neuron compile (nothing here imports torch or the SDK).

Where a Neuron backend's compile runs matters in three ways: whether this host has Neuron devices
and of which instance family (detected as optimum-neuron does it,
huggingface/optimum-neuron optimum/neuron/utils/system.py), which compiler flags reach neuronx-cc
(the backend's ``compiler_flags_mode``), and where the persistent compile cache and NxD's scratch
directory are. ``build_env`` turns all three into the environment variables of the child process.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc import compile_cache
from neuronc.hardware import lnc
from neuronc.keys import CACHE_LOCATION_FLAGS

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# Import names of the distributions the Neuron backends use.
IMPORT_NAMES: dict[str, str] = {
    "neuronx-cc": "neuronxcc",
    "torch-neuronx": "torch_neuronx",
    "libneuronxla": "libneuronxla",
    "neuronx-distributed": "neuronx_distributed",
    "neuronx-distributed-inference": "neuronx_distributed_inference",
    "transformers-neuronx": "transformers_neuronx",
    "optimum-neuron": "optimum.neuron",
    "vllm-neuron": "vllm_neuron",
    "libtorch-neuronx-lite": "libtorch_neuronx_lite",
    "nki": "nki",
    "vllm": "vllm",
    "torch": "torch",
    "transformers": "transformers",
}

# PyPI holds placeholders for the Neuron SDK packages; the real wheels come from the AWS Neuron
# repository (aws-neuron/aws-neuron-sdk setup/pytorch/manual.rst). torch-neuronx 1.0 on PyPI raises
# ImportError("WRONG PACKAGE ..."); the others are the only versions PyPI lists for those names.
PYPI_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "torch-neuronx": frozenset({"1.0"}),
    "neuronx-cc": frozenset({"1.0.post1"}),
    "libneuronxla": frozenset({"1.0"}),
    "neuronx-distributed": frozenset({"0.1"}),
    "neuronx-distributed-inference": frozenset({"0.1.0"}),
    "transformers-neuronx": frozenset({"0.1"}),
    # `pip index versions`: vllm-neuron 0.1.0 (five files, no plugin) and libtorch-neuronx-lite 0.0.1.
    "vllm-neuron": frozenset({"0.1.0"}),
    "libtorch-neuronx-lite": frozenset({"0.0.1"}),
}

NEURON_EXTRA_INDEX = "https://pip.repos.neuron.amazonaws.com"

# neuronx-cc's compile target for each profile target: inf2 and trn1 share the NeuronCore-v2
# architecture (huggingface/optimum-neuron optimum/neuron/utils/instance.py INSTANCE_VALUE_MAP); trn3
# is its own (NEURON_PLATFORM_TARGET_OVERRIDE=trn3 in vllm-neuron docs/design/compilation/
# cpu_compilation.md, aws-neuron/aws-neuron-sdk).
PLATFORM_TARGET: dict[str, str] = {"inf2": "trn1", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2", "trn3": "trn3"}

DEFAULT_COMPILE_CACHE = compile_cache.DEFAULT_COMPILE_CACHE
PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")


def neuron_device_present(proc_devices: Path = Path("/proc/devices"), dev: Path = Path("/dev")) -> bool:
    """Whether this host has a Neuron device: /dev/neuron0, or a ``neuron`` line in /proc/devices."""
    if (dev / "neuron0").exists():
        return True
    try:
        text = proc_devices.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.split()[-1:] == ["neuron"] for line in text.splitlines())


def host_platform(product_name: Path = PRODUCT_NAME, *, device_present: bool | None = None) -> str | None:
    """The compile platform of this host's Neuron devices ("trn1" for inf2/trn1, "trn2", "trn3"), or None.

    None without a Neuron device, or when the instance type cannot be read or is not a Neuron one.
    """
    present = neuron_device_present() if device_present is None else device_present
    if not present:
        return None
    try:
        name = product_name.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return PLATFORM_TARGET.get(name.split(".")[0])


def platform_target(target: str) -> str:
    """The neuronx-cc / NEURON_PLATFORM_TARGET_OVERRIDE value for a profile target."""
    return PLATFORM_TARGET[target]


def cross_compiling(spec: BuildSpec, host: str | None) -> bool:
    """Whether the compile's target family differs from this host's devices (or the host has none)."""
    return host != platform_target(spec.target)


def logical_nc_config(spec: BuildSpec) -> int:
    """Logical NeuronCore size: the profile option, else the target's default (neuronc.hardware)."""
    return lnc(spec.target, spec.options)


def split_cache_flags(flags: Iterable[str]) -> tuple[list[str], list[str]]:
    """Separate compiler flags from the cache-location flags libneuronxla consumes."""
    compiler: list[str] = []
    cache: list[str] = []
    for flag in flags:
        (cache if flag.startswith(CACHE_LOCATION_FLAGS) else compiler).append(flag)
    return compiler, cache


def has_flag(flags: Sequence[str], *names: str) -> bool:
    """Whether ``flags`` sets any of ``names`` (as ``--name``, ``--name=value`` or ``--name value``)."""
    return any(f == n or f.startswith(n + "=") for f in flags for n in names)


def build_env(
    spec: BuildSpec,
    job_env: Mapping[str, str],
    work_dir: Path,
    *,
    compiler_flags: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    host: str | None = None,
    detect_host: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables one Neuron build sets for its compile (on top of the inherited ones).

    NEURON_CC_FLAGS carries ``compiler_flags`` (for a backend whose SDK reads NEURON_CC_FLAGS) plus
    the cache-location flags the user had there, and nothing else: flags the backend does not apply
    through it are not presented as applied. NEURON_COMPILE_CACHE_URL is the user's cache (or the
    SDK default) so compiles are reused across builds. BASE_COMPILE_WORK_DIR is private to this
    build because NxD wipes it on every trace. TMPDIR keeps compiler scratch files inside the work
    directory. When the target's family differs from this host's devices (or there are none),
    NEURON_PLATFORM_TARGET_OVERRIDE says which family to compile for, as ``optimum-cli export
    neuron --instance_type`` sets it (huggingface/optimum-neuron optimum/neuron/utils/instance.py
    ``align_compilation_target``).
    """
    env = os.environ if environ is None else environ
    _, cache_flags = split_cache_flags(shlex.split(env.get("NEURON_CC_FLAGS", "")))
    result: dict[str, str] = {
        "NEURON_CC_FLAGS": shlex.join([*compiler_flags, *cache_flags]),
        "NEURON_COMPILE_CACHE_URL": job_env.get("NEURON_COMPILE_CACHE_URL")
        or env.get("NEURON_COMPILE_CACHE_URL")
        or DEFAULT_COMPILE_CACHE,
        "BASE_COMPILE_WORK_DIR": str(work_dir / "nxd") + "/",
        "TMPDIR": str(work_dir / "tmp"),
    }
    found = host_platform() if host is None and detect_host else host
    if cross_compiling(spec, found):
        result["NEURON_PLATFORM_TARGET_OVERRIDE"] = platform_target(spec.target)
    result.update(extra or {})
    result.update(job_env)
    return result
