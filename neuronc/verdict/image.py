"""The serving side of the pre-boot verdict (neuronc.verdict) for an image reference.

The reference is checked as ``deploy --image`` checks one (an image reference by the registry
grammar, exit 2 otherwise), so nothing that reads as an option reaches the container engine; every
engine command also ends its options with ``--``. Then, in order:
1. the image a vllm-neuron bundle was compiled in, by the digest its manifest records: the versions
   the compile read inside it (``versions_in_runner``); its own ENV is the compile's by construction;
2. a Deep Learning Container reference of the support matrix (``neuronc.backends.support``), or an
   image of deploy's table (``neuronc.deploy.images``): the versions its recipe pins, and the ENV and
   exact Python its Dockerfile sets where the matrix records them (``Image.env``, ``python_version``);
3. else the image itself, through the container runtime (docker or podman): ``run --rm --network none``
   with ``python3`` as its entrypoint, which prints the installed versions (package metadata), its
   ``VLLM_NEURON_*``/``NEURON_*`` variables and its Python version. An image not on this machine is
   pulled only with ``NEURONC_PULL_IMAGES=1`` (else exit 5 with the ``pull`` command to run). An
   engine that does not answer within ``NEURONC_CONTAINER_TIMEOUT`` seconds (inspect 120, the probe
   300 by default) is exit 5, naming it.
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

from neuronc.backends.serving import ServingSide
from neuronc.errors import BackendUnavailableError, EnvironmentIncompatibleError

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
# How to check what the support matrix does not record about an image: read the image itself.
HOW_PROBE = (
    "pass the image by digest (REPOSITORY@sha256:...): neuronc reads an image it does not know inside it "
    "through docker/podman (NEURONC_PULL_IMAGES=1 lets it pull)"
)
# Run inside the image: the standard library only.
_PROBE = (
    "import importlib.metadata as m, json, os, platform\n"
    "def v(n):\n"
    "    try:\n"
    "        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'versions': {n: v(n) for n in %r}, 'python': platform.python_version(), "
    "'env': {k: x for k, x in os.environ.items() if k.startswith(%r)}}))\n"
)


def neuron_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``VLLM_NEURON_*`` / ``NEURON_*`` variables of an environment."""
    return {k: v for k, v in environ.items() if k.startswith(PREFIXES)}


def _compiled_in(reference: str, bundle: Path) -> ServingSide | None:
    from neuronc.backends.serving import recorded_python, recorded_versions
    from neuronc.backends.support import releases
    from neuronc.bundle import read_manifest

    info = read_manifest(bundle).extra.get("vllm_neuron")
    runner = info.get("runner") if isinstance(info, Mapping) else None
    if not isinstance(runner, Mapping) or runner.get("pinned") != reference or not isinstance(info, Mapping):
        return None
    tag = runner.get("image")
    targets = next((i.targets for r in releases() for i in r.images if i.reference == tag), None)
    return ServingSide(
        reference,
        "the image the compile ran in (its versions, read inside it)",
        recorded_versions(info),
        targets,
        python=recorded_python(info),
        compiled_here=True,
        how=HOW_PROBE,
    )


def _known(reference: str) -> ServingSide | None:
    from neuronc.backends.support import backend_targets, detect_release, releases
    from neuronc.deploy.images import IMAGES

    for release in releases():
        for image in release.images:
            if image.reference == reference:
                source = f"the support matrix (Neuron SDK {release.version}'s image)"
                return ServingSide(
                    reference,
                    source,
                    dict(image.packages),
                    image.targets,
                    dict(image.env) if image.env is not None else None,
                    pins_only=True,
                    python=image.python_version,
                    how=HOW_PROBE,
                )
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
            source = "neuronc's table of serving images"
            found = detect_release({"neuronx-cc": row.neuronx_cc})
            if found is not None:
                return ServingSide(reference, source, versions, pins_only=True, how=HOW_PROBE, release=found.version)
            # An SDK older than the support matrix: the chips its stack serves on, over every release
            # the matrix has (optimum-neuron's instance check, utils/instance.py, knows no newer ones).
            stack = "optimum-neuron" if row.optimum_neuron else "nxdi" if row.nxdi else None
            targets = tuple(sorted(backend_targets(stack))) if stack else None
            source += f" (its SDK predates the support matrix: the targets are {stack}'s)" if stack else ""
            return ServingSide(reference, source, versions, targets, pins_only=True, how=HOW_PROBE)
    return None


def _probe(reference: str) -> ServingSide:
    """Ask the image itself, through docker or podman."""
    from neuronc.backends.containers import (
        container_timeout,
        engine_silent,
        find_runtime,
        pinned_image,
        pull_allowed,
    )

    runtime = find_runtime()
    if runtime is None:
        msg = f"{reference} is not an image neuronc knows, and there is no container runtime to read it with"
        hint = "install docker or podman, or name a Deep Learning Container image of the support matrix"
        raise EnvironmentIncompatibleError(msg, hint=hint)
    with tempfile.TemporaryDirectory(prefix="neuronc-probe-") as tmp:
        pinned = pinned_image(runtime, reference, allow_pull=pull_allowed(), log=Path(tmp) / "pull.log", env=os.environ)
    script = _PROBE % (PACKAGES, PREFIXES)
    cmd = [runtime.executable, "run", "--rm", "--network", "none", "--entrypoint", "python3", "--", pinned, "-c"]
    limit = container_timeout(_PROBE_TIMEOUT_S)
    try:
        done = subprocess.run(
            [*cmd, script], capture_output=True, text=True, env=dict(os.environ), timeout=limit, check=False
        )
    except subprocess.TimeoutExpired:
        raise engine_silent(runtime, "run", limit) from None
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
    found = data.get("env")
    env = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
    python = data.get("python") if isinstance(data.get("python"), str) else None
    from neuronc.backends.support import detect_release

    release = detect_release(versions)
    source = f"the image itself ({runtime.kind}, {pinned})"
    how = "the image's versions are no Neuron SDK release neuronc knows: serve it on a chip its SDK supports"
    return ServingSide(
        reference, source, versions, None, env, python=python, how=how, release=release.version if release else None
    )


def image_side(reference: str, bundle: Path) -> ServingSide:
    """The serving side for ``reference``: recorded, known, or read from the image (a reference that is
    not an image reference: InvalidInputError, exit 2, before any engine is asked)."""
    from neuronc.deploy import check_image

    check_image(reference, "--against-image")
    return _compiled_in(reference, bundle) or _known(reference) or _probe(reference)


__all__ = ["HOW_PROBE", "PACKAGES", "image_side", "neuron_env"]
