"""The serving side of the pre-boot verdict (neuronc.verdict) for an image reference.

In order:
1. the image a vllm-neuron bundle was compiled in, by the digest its manifest records: the versions
   the compile read inside it (``versions_in_runner``);
2. a Deep Learning Container reference of the support matrix (``neuronc.backends.support``), or an
   image of deploy's table (``neuronc.deploy.images``): the versions its recipe pins;
3. else the image itself, through the container runtime (docker or podman): ``run --rm --network none``
   with ``python3`` as its entrypoint, which prints the installed versions (package metadata) and its
   ``VLLM_NEURON_*``/``NEURON_*`` variables. An image not on this machine is pulled only with
   ``NEURONC_PULL_IMAGES=1`` (else exit 5 with the ``pull`` command to run).

The matrix records no image's environment: from 1 and 2 the environment part is unchecked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronc.errors import BackendUnavailableError, EnvironmentIncompatibleError
from neuronc.verdict.side import ServingSide

PACKAGES = (
    "neuronx-cc",
    "nki",
    "libtorch-neuronx-lite",
    "torch",
    "torch-neuronx",
    "neuronx-distributed-inference",
    "optimum-neuron",
    "vllm",
    "vllm-neuron",
)
PREFIXES = ("VLLM_NEURON_", "NEURON_")
_PROBE_TIMEOUT_S = 300
# Run inside the image: the standard library only.
_PROBE = (
    "import importlib.metadata as m, json, os\n"
    "def v(n):\n"
    "    try:\n"
    "        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'versions': {n: v(n) for n in %r}, "
    "'env': {k: x for k, x in os.environ.items() if k.startswith(%r)}}))\n"
)


def neuron_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``VLLM_NEURON_*`` / ``NEURON_*`` variables of an environment."""
    return {k: v for k, v in environ.items() if k.startswith(PREFIXES)}


def _compiled_in(reference: str, bundle: Path) -> ServingSide | None:
    from neuronc.backends.support import releases
    from neuronc.bundle import read_manifest

    info = read_manifest(bundle).extra.get("vllm_neuron")
    runner = info.get("runner") if isinstance(info, Mapping) else None
    if not isinstance(runner, Mapping) or runner.get("pinned") != reference or not isinstance(info, Mapping):
        return None
    found = dict(info.get("versions_in_runner") or {})
    versions = {str(k): (str(v) if v is not None else None) for k, v in found.items()}
    tag = runner.get("image")
    targets = next((i.targets for r in releases() for i in r.images if i.reference == tag), None)
    return ServingSide(reference, "the image the compile ran in (its versions, read inside it)", versions, targets)


def _known(reference: str) -> ServingSide | None:
    from neuronc.backends.support import releases
    from neuronc.deploy.images import IMAGES

    for release in releases():
        for image in release.images:
            if image.reference == reference:
                source = f"the support matrix (Neuron SDK {release.version}'s image)"
                return ServingSide(reference, source, dict(image.packages), image.targets, pins_only=True)
    for row in IMAGES:
        # SageMaker images name their region: {region} stands for any.
        pattern = re.escape(row.image).replace(re.escape("{region}"), "[a-z0-9-]+")
        if re.fullmatch(pattern, reference):
            versions = {
                "neuronx-cc": row.neuronx_cc,
                "optimum-neuron": row.optimum_neuron,
                "neuronx-distributed-inference": row.nxdi,
                "vllm": row.vllm,
            }
            return ServingSide(reference, "neuronc's table of serving images", versions, pins_only=True)
    return None


def _probe(reference: str) -> ServingSide:
    """Ask the image itself, through docker or podman."""
    from neuronc.backends.vllm_neuron.runner import find_runtime, pinned_image, pull_allowed

    runtime = find_runtime()
    if runtime is None:
        msg = f"{reference} is not an image neuronc knows, and there is no container runtime to read it with"
        hint = "install docker or podman, or name a Deep Learning Container image of the support matrix"
        raise EnvironmentIncompatibleError(msg, hint=hint)
    with tempfile.TemporaryDirectory(prefix="neuronc-probe-") as tmp:
        pinned = pinned_image(runtime, reference, allow_pull=pull_allowed(), log=Path(tmp) / "pull.log", env=os.environ)
    script = _PROBE % (PACKAGES, PREFIXES)
    cmd = [runtime.executable, "run", "--rm", "--network", "none", "--entrypoint", "python3", pinned, "-c", script]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ), timeout=_PROBE_TIMEOUT_S, check=False
    )
    data: Any = None
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            data = json.loads(lines[-1])
        except ValueError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("versions"), dict):
        said = (done.stderr or done.stdout).strip().splitlines()
        msg = f"could not list the packages of {reference} ({runtime.kind} run exited {done.returncode})"
        raise BackendUnavailableError(msg, details=said[-5:], hint="the image needs python3 on its PATH")
    versions = {str(k): (str(v) if isinstance(v, str) else None) for k, v in data["versions"].items()}
    env = {str(k): str(v) for k, v in dict(data.get("env") or {}).items()}
    return ServingSide(reference, f"the image itself ({runtime.kind}, {pinned})", versions, None, env)


def image_side(reference: str, bundle: Path) -> ServingSide:
    """The serving side for ``reference``: recorded, known, or read from the image."""
    return _compiled_in(reference, bundle) or _known(reference) or _probe(reference)


__all__ = ["PACKAGES", "image_side", "neuron_env"]
