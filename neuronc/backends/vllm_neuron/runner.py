"""Where a vllm-neuron compile runs: on this host (the SDK installed), or in the release's DLC image
through the container runtime (``neuronc.backends.containers``).

Environment (none of it changes what is compiled, so none of it is in the config hash):
``NEURONC_VLLM_NEURON_RUNNER`` = auto (default: the host when its installed release is the build's,
else a container) | host | docker | podman; ``NEURONC_VLLM_NEURON_IMAGE`` = an image reference
pinned by digest to use instead of the release's tag (it must ship the release's versions: the
compile checks them inside the container).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from neuronc.errors import InvalidInputError

RUNNER_ENV = "NEURONC_VLLM_NEURON_RUNNER"
IMAGE_ENV = "NEURONC_VLLM_NEURON_IMAGE"
RUNNERS = ("auto", "host", "docker", "podman")


def requested_runner(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    value = (env.get(RUNNER_ENV) or "auto").strip().lower()
    if value not in RUNNERS:
        raise InvalidInputError(f"{RUNNER_ENV}={value}: choose one of {', '.join(RUNNERS)}")
    return value


__all__ = ["IMAGE_ENV", "RUNNERS", "RUNNER_ENV", "requested_runner"]
