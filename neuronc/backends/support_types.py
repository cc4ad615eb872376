"""The support matrix's row types: a Neuron SDK ``Release``, a backend's support in it, the Deep
Learning Container ``Image`` s that ship it. ``support_data`` holds the rows, ``support`` the
questions asked of them; both import this module, which imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from packaging.version import Version

TORCH_NEURONX = "torch-neuronx"


class Status(StrEnum):
    """How a release supports a backend on its targets."""

    SUPPORTED = "supported"
    BETA = "beta"
    MAINTENANCE = "maintenance"  # critical fixes only
    LAST = "last"  # the last release that ships the package (its end of support starts here)


class Serves(StrEnum):
    """What a Deep Learning Container image runs."""

    NXDI = "nxdi"  # vLLM V1 + the vllm-neuron plugin's NxD Inference path (0.2.x-0.5.x)
    VLLM_NEURON = "vllm-neuron"  # vLLM + the vllm-neuron plugin's torch.compile path (0.21+)
    VLLM_V0 = "vllm-v0"  # AWS's vLLM V0 fork (SDK 2.26.x and earlier)
    PYTORCH = "pytorch"  # pytorch-inference-neuronx: torch-neuronx, NxD, NxDI (no server)


@dataclass(frozen=True)
class Image:
    """One Deep Learning Container image: what it serves and the exact versions it pins."""

    repository: str
    tag: str
    serves: Serves
    targets: tuple[str, ...]
    # Distribution name -> the public version the image's Dockerfile pins (ARG lines).
    packages: Mapping[str, str]
    sources: tuple[str, ...]
    vllm: str | None = None
    plugin: str | None = None  # vllm-neuron
    python: str | None = None
    note: str = ""
    # Packages the image pins at a version its release's manifest does not list (the Dockerfile wins).
    off_release: tuple[str, ...] = ()
    # The image's own VLLM_NEURON_*/NEURON_* ENV (its Dockerfile's ENV lines; the source is in
    # ``sources``); None where no source was read. A compile or a server in the image sees them.
    env: Mapping[str, str] | None = None
    # The exact Python version (the Dockerfile's PYTHON_VERSION); None where no source names it.
    python_version: str | None = None

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


@dataclass(frozen=True)
class BackendSupport:
    """A backend in one release: the targets it compiles for and how they are supported."""

    targets: tuple[str, ...]
    status: Status = Status.SUPPORTED
    note: str = ""
    sources: tuple[str, ...] = ()
    # Target -> why this release is used for it only when a profile's ``sdk:`` names it (never chosen
    # by default, nor by the installed toolchain alone); the reason is a note wherever it is used.
    named_only: Mapping[str, str] = field(default_factory=dict)
    # The LNC values the backend compiles for (None: whatever the chip takes), and why.
    lnc: tuple[int, ...] | None = None
    lnc_note: str = ""


@dataclass(frozen=True)
class Release:
    """One Neuron SDK release: component versions, backends per target, the images that ship it."""

    version: str
    date: str | None
    # Distribution name -> public versions in the release, the one paired with the newest torch first.
    packages: Mapping[str, tuple[str, ...]]
    backends: Mapping[str, BackendSupport]
    sources: tuple[str, ...]
    images: tuple[Image, ...] = ()
    note: str = ""
    # False where no upstream release notes were found and the row is carried from its predecessor.
    verified: bool = True
    # TorchNeuron (the native PyTorch backend) versions published under the ``torch-neuronx`` name.
    torchneuron: tuple[str, ...] = ()

    @property
    def key(self) -> Version:
        return Version(self.version)

    def supports(self, backend: str, target: str) -> bool:
        entry = self.backends.get(backend)
        return entry is not None and target in entry.targets

    def version_of(self, package: str) -> str | None:
        versions = self.packages.get(package)
        return versions[0] if versions else None

    def images_serving(self, serves: Serves) -> tuple[Image, ...]:
        return tuple(i for i in self.images if i.serves is serves)

    def named_only(self, backend: str, target: str) -> str | None:
        """Why the release is used for the pair only when ``sdk:`` names it (None: no such rule)."""
        entry = self.backends.get(backend)
        return entry.named_only.get(target) if entry is not None else None

    def accepts(self, name: str, version: str) -> bool:
        """``version`` (public) is one the release ships as ``name`` (TorchNeuron counts as torch-neuronx)."""
        shipped = self.packages.get(name, ())
        return version in shipped or (name == TORCH_NEURONX and version in self.torchneuron)
