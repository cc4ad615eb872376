"""SDK test doubles: small stand-ins for the Neuron SDK packages, used by the backend tests.

The real ``torch_neuronx``, ``neuronxcc``, ``libneuronxla``, ``neuronx_distributed``,
``neuronx_distributed_inference``, ``transformers_neuronx`` and ``optimum.neuron`` are not
installable here (PyPI has placeholders). The packages under ``site/`` are **doubles**: they have
the signatures of the upstream sources (aws-neuron/neuronx-distributed-inference,
aws-neuron/transformers-neuronx, huggingface/optimum-neuron v0.4.5, and the torch-neuronx API
reference in aws-neuron/aws-neuron-sdk), check the arguments neuronc passes, and write
the files the real ones write (model.pt, neuron_config.json, *.neff, weights/tp*_sharded_checkpoint
.safetensors ...), without compiling anything. Every module says so in its docstring and carries
``SDK_DOUBLE = True``.

The ``sdk_doubles`` fixture (``fixtures.py``) puts them on ``sys.path`` and writes matching
``*.dist-info`` metadata, so the backends' availability check (which reads distribution metadata
without importing) sees them; ``subprocess_env`` does the same for a child process such as the
isolated compile.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"

# Distribution name -> version the doubles claim: the Neuron SDK 2.26.1 set (aws-neuron/aws-neuron-sdk
# src/helperscripts/n2-manifest.json; optimum-neuron 0.4.5's pins).
DISTRIBUTIONS: dict[str, str] = {
    "neuronx-cc": "2.21.33363.0+82129205",
    "torch-neuronx": "2.8.0.2.10.16998",
    "libneuronxla": "2.2.12677.0",
    "neuronx-distributed": "0.15.22404",
    "neuronx-distributed-inference": "0.6.10598",
    "transformers-neuronx": "0.13.1315",
    "optimum-neuron": "0.4.5",
}

TOP_LEVEL = (
    "neuronxcc",
    "torch_neuronx",
    "libneuronxla",
    "neuronx_distributed",
    "neuronx_distributed_inference",
    "transformers_neuronx",
    "optimum",
    "vllm",
    "vllm_neuron",
)

FAIL_ENV = "NEURONC_SDK_DOUBLE_FAIL"


def write_dist_info(directory: Path, distributions: Mapping[str, str] = DISTRIBUTIONS) -> Path:
    """Write ``<name>-<version>.dist-info/METADATA`` for each double into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, version in distributions.items():
        info = directory / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    return directory


def subprocess_env(dist_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment in which a child Python sees the doubles and their metadata."""
    env = dict(os.environ if base is None else base)
    parts = [str(SITE), str(dist_dir), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return env


def forget_doubles() -> None:
    """Drop the doubles from ``sys.modules`` so the next import starts clean."""
    for name in list(sys.modules):
        if name.split(".")[0] in TOP_LEVEL and getattr(sys.modules[name], "SDK_DOUBLE", True):
            del sys.modules[name]
