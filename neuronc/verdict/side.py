"""What serves a bundle (an image or this host), as the verdict compares it: ``image.py`` builds
one for an image, ``neuronc.verdict`` judges a bundle against it. Below both, so that neither
imports the other's caller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingSide:
    """What serves the bundle: an image or this host."""

    name: str  # the image reference, or "this host"
    source: str  # where its values come from
    versions: Mapping[str, str | None]
    targets: tuple[str, ...] | None = None  # None: not known
    env: Mapping[str, str] | None = None  # its own VLLM_NEURON_*/NEURON_* variables; None: not known
    # True where the versions are what a recipe pins (the support matrix): a package it does not record
    # is unknown there (unchecked), not absent. False where they were read from the image or host.
    pins_only: bool = False
    python: str | None = None  # the exact Python version (NKI kernels are cached per version); None: not known
    # True for the very image (by digest) the bundle was compiled in: its own ENV is the compile's.
    compiled_here: bool = False
    # How to check what this side cannot tell (said with every unchecked part it leaves).
    how: str = ""
    # An image read through the engine: the Neuron SDK release its versions are (the targets that
    # release supports for a backend are the image's). Never set for a host: its chip is one of them.
    release: str | None = None
