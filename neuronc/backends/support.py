"""Which Neuron SDK release supports which backend on which target: the support matrix, as data.

The rows are in ``support_data.py`` (one ``Release`` per SDK release from 2.26.1, each citing its
sources), their types in ``support_types.py``; this module holds the questions everyone asks of
them: which release a profile's ``sdk:`` names, which release the installed toolchain is, whether a backend compiles for
a target in a release, and the last release that did. ``neuronc validate`` (through the backends'
``support_problems``), ``plan``, ``backends``, ``verify --against-env`` and ``deploy`` read it;
``scripts/gen_support_matrix.py`` writes the tables in docs/backends.md and docs/deploy.md from it.

Nothing here imports anything but the standard library and ``packaging``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

# The matrix's row types live below the rows (support_types, imported by support_data); the
# questions asked of them are here.
from neuronc.backends.support_types import TORCH_NEURONX, BackendSupport, Image, Release, Serves, Status

# What each kind of image pins (its Dockerfile's ``ARG ..._VERSION`` lines) that a compiled artifact is
# tied to. vllm-neuron: the plugin's cache key covers the libtorch-neuronx-lite, neuronx-cc and NKI
# versions (vllm-neuron ``docs/design/compilation/compilation_cache.md``) and the DLC pins exactly those
# three (aws-neuron/deep-learning-containers ``vllm/inference/0.21.0.1.0.0`` and ``0.24.0.1.1.0``
# ``Dockerfile.neuronx``: NEURONX_CC_VERSION, NKI_VERSION, LIBTORCH_NEURONX_LITE_VERSION); vllm-neuron
# comes from a git branch and vLLM and torch as its dependencies: recorded, never pinned. NxD Inference:
# ``model.pt`` is TorchScript traced with one neuronx-cc, NxDI and torch-neuronx
# (NEURONX_CC_VERSION, NEURONX_DISTRIBUTED_INFERENCE_VERSION, NEURONX_FRAMEWORK_VERSION).
PINNED: dict[Serves, tuple[str, ...]] = {
    Serves.VLLM_NEURON: ("neuronx-cc", "nki", "libtorch-neuronx-lite"),
    Serves.NXDI: ("neuronx-cc", "neuronx-distributed-inference", "torch-neuronx"),
}


def image_pins(image: Image) -> dict[str, str | None]:
    """The packages ``image`` pins that a compiled artifact is tied to, with the version the matrix
    records for each (None where no source gave it)."""
    return {name: image.packages.get(name) for name in PINNED.get(image.serves, ("neuronx-cc",))}


def pin_mismatches(
    image: Image, versions: Mapping[str, str | None], *, strict: bool = True
) -> list[tuple[str, str | None, str | None]]:
    """``(package, what the image pins, what versions has)`` for each package ``image`` pins whose version
    differs from ``versions`` (a bundle's toolchain, or what a compile found in the image), compared on
    public versions; a version ``versions`` lacks differs. A pin the matrix does not know (None) differs
    when ``strict`` (deploy: nothing shows the bundle agrees with it), else is skipped (a compile that
    reads the image's own versions). Empty: an artifact made with ``versions`` loads in ``image``."""
    found = []
    for name, pinned in image_pins(image).items():
        have = versions.get(name)
        if pinned is None and not strict:
            continue
        if pinned is None or public(have) != public(pinned):
            found.append((name, pinned, have))
    return found


@dataclass(frozen=True)
class Resolution:
    """The release a build is judged against, and how it was chosen."""

    release: Release | None
    how: str  # "profile" (sdk:), "installed" (detected from the toolchain), "newest" (default)
    problem: str | None = None
    requested: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, object]:
        return {
            "release": self.release.version if self.release else None,
            "chosen_by": self.how,
            "requested": self.requested,
            "problem": self.problem,
            "notes": list(self.notes),
        }


# PyTorch 2.9 is the last PyTorch the XLA torch-neuronx supports; from 2.10 the same package name
# carries TorchNeuron (aws-neuron-sdk release-notes/components/pytorch.rst, 2.29.0 "Breaking Changes";
# 2.33.0 torchneuron.rst: torch-neuronx 2.13.3.0 / 2.14.3.0 for PyTorch 2.13 / 2.14).
LAST_XLA_TORCH = (2, 9)


def is_torchneuron(version: str | None) -> bool:
    """A ``torch-neuronx`` version that is TorchNeuron, not the XLA torch-neuronx: one a release lists
    as TorchNeuron, or one for a PyTorch newer than the XLA line's last (torch-neuronx versions start
    with the PyTorch version they pair with: 2.9.0.2.15.32035, 2.13.3.0)."""
    found = public(version)
    if found is None:
        return False
    if any(found in r.torchneuron for r in _releases()):
        return True
    return Version(found).release[:2] > LAST_XLA_TORCH


def public(version: str | None) -> str | None:
    """The public part of a PEP 440 version (``2.21.33363.0+8212`` -> ``2.21.33363.0``), or None."""
    if not version:
        return None
    try:
        return Version(version).public
    except InvalidVersion:
        return None


def _releases() -> tuple[Release, ...]:
    from neuronc.backends.support_data import RELEASES

    return RELEASES


def releases() -> tuple[Release, ...]:
    """Every release neuronc knows, oldest first."""
    return _releases()


def known_versions() -> str:
    """``2.26.1 … 2.33.1``: the range of releases in the table, for messages."""
    rows = _releases()
    return f"{rows[0].version} … {rows[-1].version}"


def find_release(version: str) -> Release | None:
    return next((r for r in _releases() if r.version == version), None)


def matching(sdk: str) -> list[Release]:
    """The releases an ``sdk:`` value names: ``2.31`` is every 2.31.x, ``2.31.1`` exactly that one."""
    parts = sdk.split(".")
    return [r for r in _releases() if r.version.split(".")[: len(parts)] == parts]


def backend_targets(backend: str) -> frozenset[str]:
    """Every target any release supports the backend on."""
    return frozenset(t for r in _releases() for t in (r.backends[backend].targets if backend in r.backends else ()))


def supporting(backend: str, target: str) -> list[Release]:
    return [r for r in _releases() if r.supports(backend, target)]


def last_supporting(backend: str, target: str) -> Release | None:
    found = supporting(backend, target)
    return found[-1] if found else None


def first_supporting(backend: str, target: str) -> Release | None:
    found = supporting(backend, target)
    return found[0] if found else None


def span(backend: str, target: str) -> str:
    """``2.27.0–2.31.1`` (or one version, or ``none``): the releases that support backend on target."""
    found = supporting(backend, target)
    if not found:
        return "none"
    return found[0].version if len(found) == 1 else f"{found[0].version}–{found[-1].version}"


def detect_releases(versions: Mapping[str, str | None], packages: Iterable[str] | None = None) -> list[Release]:
    """Every release whose versions agree with the installed ones, oldest first.

    ``neuronx-cc`` must be installed and listed; every other package of ``packages`` (default: all
    the row lists) that is installed must be one of the row's versions. Compared on public versions.
    More than one release can agree: a patch release that changed no package (2.28.1) or whose
    versions are carried from its predecessor (2.33.1) ships what the one before it did.
    """
    cc = public(versions.get("neuronx-cc"))
    if cc is None:
        return []
    found: list[Release] = []
    for release in _releases():
        if cc not in release.packages.get("neuronx-cc", ()):
            continue
        names = release.packages if packages is None else [p for p in packages if p in release.packages]
        if all((installed := public(versions.get(name))) is None or release.accepts(name, installed) for name in names):
            found.append(release)
    return found


def detect_release(versions: Mapping[str, str | None], packages: Iterable[str] | None = None) -> Release | None:
    """The release the installed versions are: of those that agree (``detect_releases``), the newest
    whose row was read from its own sources (a row carried from its predecessor only when none was)."""
    found = detect_releases(versions, packages)
    verified = [r for r in found if r.verified]
    return (verified or found)[-1] if found else None


def unsupported_message(backend: str, target: str, release: Release | None, where: str) -> str:
    """Why ``backend`` cannot compile for ``target`` in ``release`` (named by ``where``), with the last
    release that could, or the backends that do support the target."""
    last = last_supporting(backend, target)
    first = first_supporting(backend, target)
    in_release = f"in Neuron SDK {release.version} ({where})" if release else f"({where})"
    if last is None:
        others = sorted(
            {name for r in _releases() for name, entry in r.backends.items() if target in entry.targets} - {backend}
        )
        alternatives = "; ".join(f"{name} (SDK {span(name, target)})" for name in others)
        msg = f"no Neuron SDK release supports the {backend} backend on {target}"
        return f"{msg}; for {target} use {alternatives}" if alternatives else msg
    if release is not None and first is not None and release.key < first.key:
        return f"the {backend} backend does not support {target} {in_release}: it does from SDK {first.version}"
    return (
        f"the {backend} backend does not support {target} {in_release}; "
        f"the last release that does is SDK {last.version}"
    )


def default_release(backend: str, target: str) -> Release | None:
    """The newest release that supports the pair without needing ``sdk:`` to name it."""
    found = [r for r in supporting(backend, target) if not r.named_only(backend, target)]
    return found[-1] if found else None


def _named_only_notes(backend: str, target: str, after: Release | None) -> tuple[str, ...]:
    """What the default leaves out: the newer releases used only when ``sdk:`` names them, and why."""
    newer = [r for r in supporting(backend, target) if after is None or r.key > after.key]
    reasons = dict.fromkeys(why for r in newer if (why := r.named_only(backend, target)))
    if not reasons:
        return ()
    names = f"{newer[0].version}" if len(newer) == 1 else f"{newer[0].version}–{newer[-1].version}"
    return (f"SDK {names} only when sdk: names it: {'; '.join(reasons)}",)


def resolve(backend: str, target: str, sdk: str | None, installed: Mapping[str, str | None] | None) -> Resolution:
    """The release a build of ``backend`` for ``target`` is judged against.

    ``sdk`` (the profile's field) wins: the newest release it names that supports the pair, with the
    pair's ``named_only`` reason as a note. Without it, the release of the installed toolchain when
    one is detected (refused where that release is used for the pair only when named); else the
    newest release that supports the pair and needs no naming. ``problem`` says why the pair is refused.
    """
    if sdk is not None:
        named = matching(sdk)
        if not named:
            return Resolution(
                None,
                "profile",
                f"sdk: {sdk} is not a Neuron SDK release neuronc knows ({known_versions()})",
                requested=sdk,
            )
        good = [r for r in named if r.supports(backend, target)]
        if good:
            why = good[-1].named_only(backend, target)
            return Resolution(good[-1], "profile", requested=sdk, notes=(why,) if why else ())
        return Resolution(named[-1], "profile", unsupported_message(backend, target, named[-1], "sdk:"), sdk)
    detected = detect_release(installed or {})
    if detected is not None:
        if not detected.supports(backend, target):
            return Resolution(
                detected, "installed", unsupported_message(backend, target, detected, "the installed toolchain")
            )
        why = detected.named_only(backend, target)
        if why is None:
            return Resolution(detected, "installed")
        fallback = default_release(backend, target)
        minor = ".".join(detected.version.split(".")[:2])
        problem = (
            f"Neuron SDK {detected.version} (the installed toolchain) builds {backend} for {target} only when "
            f"the profile's sdk: names it: {why}; set sdk: '{minor}' to build with it anyway"
            + (f", or install SDK {fallback.version}" if fallback is not None else "")
        )
        return Resolution(detected, "installed", problem)
    newest = default_release(backend, target)
    if newest is None:
        if last_supporting(backend, target) is not None:
            notes = _named_only_notes(backend, target, None)
            return Resolution(
                None, "newest", f"no release supports {backend} on {target} unless sdk: names it: " + "; ".join(notes)
            )
        return Resolution(None, "newest", unsupported_message(backend, target, None, "no release"))
    return Resolution(newest, "newest", notes=_named_only_notes(backend, target, newest))


def lnc_problem(backend: str, value: int) -> str | None:
    """Why no release supports ``backend`` at logical NeuronCore size ``value`` (None: one does)."""
    entries = [e for r in _releases() if (e := r.backends.get(backend)) is not None]
    if not entries or any(e.lnc is None or value in e.lnc for e in entries):
        return None
    allowed = ", ".join(str(v) for v in sorted({v for e in entries for v in e.lnc or ()}))
    note = next((e.lnc_note for e in entries if e.lnc_note), "")
    return f"LNC {value} is not supported by the {backend} backend (it compiles for LNC {allowed})" + (
        f": {note}" if note else ""
    )


# How a release was chosen, for people (Resolution.how).
CHOSEN_BY_WORDS = {
    "profile": "the profile's sdk:",
    "installed": "the installed toolchain",
    "newest": "the newest release that supports it",
}


def release_line(data: Mapping[str, object]) -> str:
    """``Neuron SDK 2.31.1 (the newest release that supports it; nxdi: maintenance)`` from release_json."""
    how = CHOSEN_BY_WORDS.get(str(data.get("chosen_by")), str(data.get("chosen_by")))
    support = f"; {data['support']}" if data.get("support") not in (None, "supported") else ""
    given = data.get("notes")
    notes = "".join(f"; {n}" for n in given) if isinstance(given, list) else ""
    return f"Neuron SDK {data.get('release')} ({how}{support}){notes}"


def release_json(resolution: Resolution | None, backend: str) -> dict[str, object] | None:
    """``resolution`` as JSON with how its release supports ``backend`` (None outside the Neuron SDK)."""
    if resolution is None:
        return None
    data = resolution.to_json()
    entry = resolution.release.backends.get(backend) if resolution.release is not None else None
    data["support"] = str(entry.status) if entry is not None else None
    return data


__all__ = [
    "CHOSEN_BY_WORDS",
    "LAST_XLA_TORCH",
    "PINNED",
    "TORCH_NEURONX",
    "BackendSupport",
    "Image",
    "Release",
    "Resolution",
    "Serves",
    "Status",
    "backend_targets",
    "default_release",
    "detect_release",
    "detect_releases",
    "find_release",
    "first_supporting",
    "image_pins",
    "is_torchneuron",
    "known_versions",
    "last_supporting",
    "lnc_problem",
    "matching",
    "pin_mismatches",
    "public",
    "release_json",
    "release_line",
    "releases",
    "resolve",
    "span",
    "supporting",
    "unsupported_message",
]
