"""The serving capability of a backend: what ``deploy`` and the pre-boot verdict (``neuronc.verdict``)
ask of the stack that serves its bundles, and the types they ask it in.

A backend family implements ``ServingCapability`` in its own package (``key_parts``: the parts of its
stack's key, the bundle's against a ``ServingSide``) and names it as its ``serving``; the verdict
reaches a stack only through it. A part is *compared* (same or differs), *unchecked* (the serving
side's value is not known: why, and how to check it) or *pinned* (neuronc's own serve files set it to
the bundle's value: not evidence about the image; unchecked when the bundle is served with another
command). Nothing here imports a backend family, torch or a serving stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypedDict, runtime_checkable

from packaging.version import InvalidVersion, Version

from neuronc.backends.support import find_release, public
from neuronc.errors import BundleFormatError, safe_text


class Status(StrEnum):
    SAME = "same"
    DIFFERS = "differs"
    UNCHECKED = "unchecked"
    PINNED = "pinned"


class PartJSON(TypedDict):
    field: str
    bundle: str
    image: str
    checked: bool
    status: str
    note: str


NOT_RECORDED = "not recorded"
UNKNOWN = "unknown"
PINNED_BY = "pinned by the serve files `neuronc deploy` writes (unchecked if you serve it with your own command)"


@dataclass(frozen=True)
class Part:
    field: str
    bundle: str
    image: str
    status: Status
    # compared: where the serving side's value comes from, when not the side's own source; unchecked:
    # why, and how to check it; pinned: what pins it.
    note: str = ""

    @property
    def checked(self) -> bool:
        return self.status in (Status.SAME, Status.DIFFERS)

    @property
    def differs(self) -> bool:
        return self.status is Status.DIFFERS

    def line(self) -> str:
        """``field: bundle X, image Y`` (and the note: why it is unchecked and how to check it)."""
        text = f"{self.field}: bundle {self.bundle}, image {self.image}"
        return f"{text} ({self.note})" if self.note and self.status is Status.UNCHECKED else text

    def to_json(self) -> PartJSON:
        return {
            "field": self.field,
            "bundle": self.bundle,
            "image": self.image,
            "checked": self.checked,
            "status": self.status.value,
            "note": self.note,
        }


def compare(field: str, bundle: str, image: str, note: str = "") -> Part:
    return Part(field, bundle, image, Status.SAME if bundle == image else Status.DIFFERS, note)


def unchecked(field: str, bundle: str, image: str, why: str) -> Part:
    return Part(field, bundle, image, Status.UNCHECKED, why)


def pinned(field: str, value: str, by: str = PINNED_BY) -> Part:
    return Part(field, value, value, Status.PINNED, by)


def text(value: object) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def env_text(env: dict[str, str] | None) -> str:
    if env is None:
        return UNKNOWN
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"


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


class ServingCapability(Protocol):
    """What the verdict asks a backend's serving stack: the parts of its key for a bundle (``values``:
    deploy's serving values, read and checked from the manifest; ``extra``: the manifest's ``extra``)
    against ``side``, and the warnings (what costs a partial recompile without changing the answer)."""

    def key_parts(self, values: Any, extra: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]: ...


@runtime_checkable
class RecordedEngine(Protocol):
    """A serving capability whose serve lines ``deploy`` writes from the engine record the compile left in
    the manifest (vllm-neuron's ``extra.vllm_neuron``): the checks of that record and the served engine's
    variables. Implemented in the family's package; deploy reaches it through ``recorded_engine``."""

    # The served engine's cache root variable (a writable copy of the bundle's cache tree, made at start)
    # and the variable that turns a cache miss into an error at start-up.
    cache_root_env: str
    fail_on_miss_env: str
    # The KV sizing variables the record may hold, and the prefixes of the compile's recorded variables.
    kv_sizing_env: tuple[str, ...]
    recorded_env_prefixes: tuple[str, ...]

    def engine_args_problem(self, args: Sequence[str]) -> tuple[str, str] | None:
        """The first recorded serve argument the compile would not have written, and why; or None."""
        ...

    def env_value_problem(self, name: str, value: str) -> str | None:
        """Why a recorded variable cannot be replayed in the serve files; or None."""
        ...

    def serve_env(
        self,
        *,
        logical_nc_config: int,
        plugin: str,
        route: str | None,
        recorded_env: Mapping[str, str],
        target: str | None = None,
    ) -> dict[str, str]:
        """The served engine's variables (but the cache root)."""
        ...


def recorded_engine(backend: str) -> RecordedEngine | None:
    """The serving capability of a bundle's backend (its manifest's name, read from disk) when deploy
    writes its serve lines from a recorded engine; None for any other backend (an unregistered one too)."""
    from neuronc.backends import backend_for_manifest, is_registered

    serving = backend_for_manifest(backend).serving if is_registered(backend) else None
    return serving if isinstance(serving, RecordedEngine) else None


RECOMPILE = "recompile the bundle with this neuronc (it records what the compile read)"


def refuse_record(field: str, value: object, why: str) -> BundleFormatError:
    msg = f"manifest.json: extra.vllm_neuron.{field} {why} (got {safe_text(repr(value), 80)})"
    return BundleFormatError(msg, hint="the manifest was edited or written by another tool: recompile the bundle")


def recorded_versions(info: Mapping[str, Any]) -> dict[str, str | None]:
    """``versions_in_runner``: distribution name -> version (BundleFormatError, exit 2, if ill-typed)."""
    found = info.get("versions_in_runner")
    if found is None:
        return {}
    if not isinstance(found, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in found.items()
    ):
        raise refuse_record("versions_in_runner", found, "is not a mapping of package names to versions")
    return dict(found)


def recorded_python(info: Mapping[str, Any]) -> str | None:
    value = info.get("python")
    if value is not None and (not isinstance(value, str) or len(value) > 32):
        raise refuse_record("python", value, "is not a Python version")
    return value


def how_to_check(side: ServingSide) -> str:
    return side.how or "read the serving side itself"


def _torch_of_lite(lite: str | None) -> str | None:
    """The torch release a libtorch-neuronx-lite build is for: its first three numbers
    (``2.11.0.1.0.1284`` is built against torch 2.11.0) [inferred from the naming]."""
    try:
        release = Version(lite).release if lite else ()
    except InvalidVersion:
        return None
    return ".".join(map(str, release[:3])) if len(release) >= 3 else None


def _release3(version: str) -> str:
    try:
        return ".".join(map(str, Version(version).release[:3]))
    except InvalidVersion:
        return version


def version_parts(packages: tuple[str, ...], mine: Mapping[str, str | None], side: ServingSide) -> list[Part]:
    """Each package's public version, the bundle's against the serving side's."""
    parts = []
    for package in packages:
        ours, theirs = public(mine.get(package)), public(side.versions.get(package))
        if package == "torch" and theirs is None and side.pins_only:
            derived = _torch_of_lite(public(side.versions.get("libtorch-neuronx-lite")))
            if ours is not None and derived is not None:
                lite = side.versions["libtorch-neuronx-lite"]
                note = f"torch {derived}: the release libtorch-neuronx-lite {lite} is built for"
                parts.append(compare(package, _release3(ours), derived, note))
                continue
        if ours is None:
            parts.append(unchecked(package, NOT_RECORDED, theirs or UNKNOWN, f"the bundle records none: {RECOMPILE}"))
        elif theirs is None and side.pins_only:
            why = f"{side.source} records no {package} for it: {how_to_check(side)}"
            parts.append(unchecked(package, ours, UNKNOWN, why))
        else:
            parts.append(compare(package, ours, theirs or "none"))
    return parts


def target_part(target: str | None, side: ServingSide, backend: str) -> Part:
    """The bundle's target against the ones the serving side runs on."""
    if target is None:
        return unchecked("target", NOT_RECORDED, UNKNOWN, f"the bundle records none: {RECOMPILE}")
    targets, note = side.targets, ""
    release = find_release(side.release) if targets is None and side.release else None
    entry = release.backends.get(backend) if release is not None else None
    if release is not None and entry is not None:
        targets, note = entry.targets, f"the targets Neuron SDK {release.version} supports for {backend}"
    if targets is None:
        why = f"{side.name} does not say which chip serves it: serve it on a {target} instance"
        return unchecked("target", target, UNKNOWN, why)
    return compare("target", target, target if target in targets else ",".join(targets) or "none", note)


def python_warning(compiled: str | None, side: ServingSide) -> list[str]:
    if compiled is None or side.python is None or compiled == side.python:
        return []
    return [
        f"Python {side.python} in {side.name}, {compiled} where it compiled: the NKI kernel cache is keyed on "
        "the Python version, so NKI kernels recompile (front end only) even when every graph hits"
    ]


__all__ = [
    "NOT_RECORDED",
    "PINNED_BY",
    "RECOMPILE",
    "UNKNOWN",
    "Part",
    "PartJSON",
    "RecordedEngine",
    "ServingCapability",
    "ServingSide",
    "Status",
    "compare",
    "env_text",
    "how_to_check",
    "pinned",
    "python_warning",
    "recorded_engine",
    "recorded_python",
    "recorded_versions",
    "refuse_record",
    "target_part",
    "text",
    "unchecked",
    "version_parts",
]
