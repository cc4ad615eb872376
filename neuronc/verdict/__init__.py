"""The pre-boot verdict: will this bundle start in that image (or on this host) with zero compiles?

A serving stack reuses a compiled graph only when every part of its key is the same where it was
compiled and where it is served. Which parts, and how each is compared, is the bundle's backend's
to say: its serving capability (``Backend.serving``, ``neuronc.backends.serving``), implemented in
the backend's own package; the verdict reaches a stack only through it. Three answers:

- **yes**: every part of the stack's key was checked against the serving side and is equal (parts
  that neuronc's own serve files pin count only under those files: they are listed as *pinned*);
- **no**: a checked part differs (each named with the bundle's and the serving side's value): exit 5;
- **cannot tell**: nothing checked differs, but some parts could not be checked (each named with
  why and how to check it): exit 7 (``CannotTellError``). Never a *yes* while a part is unchecked.

``--json``: ``starts_without_compiling`` is ``true`` / ``false`` / ``null`` (cannot tell), with
``answer``, ``differences``, ``unchecked``, ``pinned``, ``warnings`` and every part. Nothing here
imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from neuronc.backends.serving import Part, PartJSON, ServingSide, Status
from neuronc.errors import CannotTellError, EnvironmentIncompatibleError, InvalidInputError, NeuroncError

if TYPE_CHECKING:
    from neuronc.bundle import Manifest
YES, NO, CANNOT_TELL = "yes", "no", "cannot tell"
Answer = Literal["yes", "no", "cannot tell"]


class DifferenceJSON(TypedDict):
    field: str
    bundle: str
    image: str


class UncheckedJSON(TypedDict):
    field: str
    why: str


class VerdictJSON(TypedDict):
    """``Verdict.to_json()``: what ``--against-image`` and ``deploy``'s ``verdict`` report."""

    image: str
    source: str
    backend: str
    answer: str
    starts_without_compiling: bool | None
    differences: list[DifferenceJSON]
    unchecked: list[str]
    unchecked_why: list[UncheckedJSON]
    pinned: list[str]
    warnings: list[str]
    parts: list[PartJSON]


@dataclass(frozen=True)
class Verdict:
    backend: str
    side: ServingSide
    parts: tuple[Part, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = ()

    @property
    def differences(self) -> list[Part]:
        return [p for p in self.parts if p.differs]

    @property
    def unchecked(self) -> list[Part]:
        return [p for p in self.parts if p.status is Status.UNCHECKED]

    @property
    def answer(self) -> Answer:
        if self.differences:
            return "no"
        return "cannot tell" if self.unchecked else "yes"

    @property
    def starts_without_compiling(self) -> bool | None:
        return {YES: True, NO: False}.get(self.answer)

    def lines(self) -> list[str]:
        """The differing parts (a "no"), else the unchecked ones with why and how (a "cannot tell")."""
        return [p.line() for p in (self.differences or self.unchecked)]

    def to_json(self) -> VerdictJSON:
        return {
            "image": self.side.name,
            "source": self.side.source,
            "backend": self.backend,
            "answer": self.answer,
            "starts_without_compiling": self.starts_without_compiling,
            "differences": [{"field": p.field, "bundle": p.bundle, "image": p.image} for p in self.differences],
            "unchecked": [p.field for p in self.unchecked],
            "unchecked_why": [{"field": p.field, "why": p.note} for p in self.unchecked],
            "pinned": [p.field for p in self.parts if p.status is Status.PINNED],
            "warnings": list(self.warnings),
            "parts": [p.to_json() for p in self.parts],
        }

    def failure(self, what: str) -> NeuroncError | None:
        """None for a yes; exit 5 naming every differing part (no); exit 7 naming every unchecked part
        with why and how to check it (cannot tell)."""
        if self.answer == YES:
            return None
        if self.answer == NO:
            n = len(self.differences)
            msg = f"{what}: would not start with zero compiles in {self.side.name} ({n} part(s) differ)"
            hint = "serve it in the image it was compiled for (or rebuild it for this image)"
            return EnvironmentIncompatibleError(msg, details=self.lines(), hint=hint)
        n = len(self.unchecked)
        msg = f"{what}: cannot tell whether it starts with zero compiles in {self.side.name} ({n} part(s) unchecked)"
        return CannotTellError(msg, details=self.lines(), hint="check each part as its line says")


def bundle_verdict(bundle: Path, side: ServingSide) -> Verdict:
    """The verdict for the bundle at ``bundle`` against ``side``, from its backend's serving capability
    (InvalidInputError, exit 2, for a backend without one)."""
    from neuronc.backends import backend_for_manifest, is_registered
    from neuronc.bundle import read_manifest
    from neuronc.deploy import serving_values

    manifest = read_manifest(bundle)
    serving = backend_for_manifest(manifest).serving if is_registered(manifest.backend) else None
    if serving is None:
        msg = f"the {manifest.backend} backend's bundles have no serving-stack key neuronc compares"
        raise InvalidInputError(msg, hint="the verdict covers the backends whose serving stack keeps a compile cache")
    values = serving_values(manifest, bundle)
    parts, warnings = serving.key_parts(values, manifest.extra, side)
    return Verdict(manifest.backend, side, tuple(parts), tuple(warnings))


def image_verdict(bundle: Path, reference: str) -> Verdict:
    """The verdict against an image: its versions from the support matrix, else from the image itself."""
    from neuronc.verdict.image import image_side

    return bundle_verdict(bundle, image_side(reference, bundle))


def host_verdict(bundle: Path) -> Verdict:
    """The verdict against this host: the installed versions and this environment's variables."""
    import os
    import platform

    from neuronc.backends import backend_for_manifest
    from neuronc.bundle import read_manifest
    from neuronc.hardware import host_target
    from neuronc.verdict.image import neuron_env

    # A bundle read from disk names its backend: resolved here, once.
    manifest = read_manifest(bundle)
    try:
        installed = backend_for_manifest(manifest).toolchain.toolchain_versions()
    except ImportError:
        installed = {}
    how = "run it on the EC2 instance that serves it (its instance type names the chip)"
    chip = host_target()
    side = ServingSide(
        "this host",
        "installed versions and this environment" + (f"; a {chip} instance (its EC2 instance type)" if chip else ""),
        installed,
        (chip,) if chip else None,
        neuron_env(os.environ),
        python=platform.python_version(),
        how=how,
    )
    return bundle_verdict(bundle, side)


def has_verdict(manifest: Manifest) -> bool:
    """Whether the bundle's backend has a serving-stack key the verdict compares."""
    from neuronc.backends import backend_for_manifest, is_registered

    return is_registered(manifest.backend) and backend_for_manifest(manifest).serving is not None


__all__ = [
    "CANNOT_TELL",
    "NO",
    "YES",
    "Answer",
    "DifferenceJSON",
    "Part",
    "PartJSON",
    "ServingSide",
    "Status",
    "UncheckedJSON",
    "Verdict",
    "VerdictJSON",
    "bundle_verdict",
    "has_verdict",
    "host_verdict",
    "image_verdict",
]
