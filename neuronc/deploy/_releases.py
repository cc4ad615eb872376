"""Which Neuron SDK release a bundle belongs to, and which of the release's vLLM images serves it.

Read-only questions to the support matrix (``neuronc.backends.support``); the image rows
themselves are the matrix's (``Release.images``). A release that has no image of the kind a
bundle needs is refused (InvalidInputError, exit 2) with the nearest image named, never swapped
for another release's image silently: the user passes ``--image`` to take it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from neuronc.backends.support import (
    Image,
    Release,
    Serves,
    detect_releases,
    find_release,
    matching,
    pin_mismatches,
    public,
    releases,
)
from neuronc.errors import InvalidInputError

NXDI = "neuronx-distributed-inference"


def image_agrees(image: Image, toolchain: Mapping[str, str | None], packages: Sequence[str]) -> bool:
    """The image pins exactly the bundle's versions of ``packages`` (public parts)."""
    return all(public(toolchain.get(p)) == public(image.packages.get(p)) for p in packages)


def nxdi_releases(toolchain: Mapping[str, str | None], sdk: str | None) -> list[Release]:
    """The releases an NxD Inference bundle can be: those shipping its neuronx-cc and NxDI, narrowed to
    the profile's ``sdk:`` when it names some of them (the toolchain wins where it names none)."""
    if public(toolchain.get(NXDI)) is None:
        return []
    found = [r for r in detect_releases(toolchain, ("neuronx-cc", NXDI)) if NXDI in r.packages]
    named = [r for r in found if sdk is not None and r in matching(sdk)]
    return named or found


def image_line(image: Image, release: Release) -> str:
    what = f"vLLM {image.vllm}" + (f", vllm-neuron {image.plugin}" if image.plugin else "")
    return f"{image.reference} (SDK {release.version}; {what})"


def nearest(serves: Serves, release: Release, target: str, fits: list[Image]) -> str:
    """The images to name when ``release`` has none: those that ship the bundle's versions, else the
    closest releases' before and after it."""
    if fits:
        owners = {i.reference: r for r in releases() for i in r.images}
        return "; ".join(image_line(i, owners[i.reference]) for i in fits)
    rows = [r for r in releases() if any(target in i.targets for i in r.images_serving(serves))]
    before = [r for r in rows if r.key < release.key][-1:]
    after = [r for r in rows if r.key > release.key][:1]
    found = [image_line(i, r) for r in before + after for i in r.images_serving(serves) if target in i.targets]
    return "; ".join(found) or "none"


def no_image(serves: Serves, release: Release, target: str, fits: list[Image], why: str = "") -> InvalidInputError:
    """Exit 2: ``release`` has no image of that kind; the message names the nearest."""
    kind = "NxD Inference (vllm-neuron plugin)" if serves is Serves.NXDI else "vllm-neuron (torch.compile)"
    msg = f"Neuron SDK {release.version} has no AWS vLLM container for {kind} bundles{why}"
    shipping = " (they ship this bundle's versions)" if fits else ""
    hint = (
        f"nearest images{shipping}: {nearest(serves, release, target, fits)}; pass --image with one of them, "
        "or recompile for a release with an image (`neuronc backends` lists them)"
    )
    return InvalidInputError(msg, hint=hint)


def v0_fork_reason(release: Release) -> str:
    """Why the V0 fork image of SDK 2.26.x is not emitted for."""
    image = release.images_serving(Serves.VLLM_V0)
    if not image:
        return ""
    return (
        f": its image {image[0].reference} runs AWS's vLLM V0 fork (vLLM {image[0].vllm}, "
        "aws-neuron/upstreaming-to-vllm branch 2.26.1), not the vllm-neuron plugin; that fork's argument "
        "parser is neither on PyPI nor in any public source neuronc could check the emitted flags against"
    )


# Compared when both the image's row and the bundle record it: NxDI's model.pt is TorchScript traced
# with one torch-neuronx (SDK 2.27.1's two images ship 2.8 and 2.9).
TRACED_WITH = ("torch-neuronx",)


def nxdi_fits(image: Image, toolchain: Mapping[str, str | None]) -> bool:
    also = [p for p in TRACED_WITH if p in image.packages and public(toolchain.get(p)) is not None]
    return image_agrees(image, toolchain, ("neuronx-cc", NXDI, *also))


def nxdi_image(toolchain: Mapping[str, str | None], sdk: str | None, target: str) -> Image | None:
    """The image that serves an NxD Inference bundle: its release's (newest vLLM first) that ships its
    exact neuronx-cc and NxDI (and torch-neuronx, where the matrix records the image's); None when no
    release ships those versions (a toolchain neuronc does not know); InvalidInputError when the
    bundle's release has no such image. SDK 2.26.x, whose only image runs AWS's V0 fork, gets None too:
    serve.sh only, with ``no_image_reason`` in the note."""
    found = nxdi_releases(toolchain, sdk)
    for release in reversed(found):
        for image in release.images_serving(Serves.NXDI):
            if target in image.targets and nxdi_fits(image, toolchain):
                return image
    if not found:
        return None
    release = found[-1]
    if release.images_serving(Serves.VLLM_V0) and not release.images_serving(Serves.NXDI):
        return None  # serve.sh for a host with the plugin; the note says why there is no compose file
    images = [i for r in releases() for i in r.images_serving(Serves.NXDI) if target in i.targets]
    fits = [i for i in images if nxdi_fits(i, toolchain)]
    raise no_image(Serves.NXDI, release, target, fits, v0_fork_reason(release))


def no_image_reason(toolchain: Mapping[str, str | None], sdk: str | None) -> str:
    """Why an NxD Inference bundle gets no compose file: its release's image is the V0 fork (or "")."""
    found = nxdi_releases(toolchain, sdk)
    if not found or not v0_fork_reason(found[-1]):
        return ""
    return f"Neuron SDK {found[-1].version}{v0_fork_reason(found[-1])}"


def release_of(version: str) -> Release:
    found = find_release(version)
    if found is None:
        known = f"{releases()[0].version} … {releases()[-1].version}"
        msg = f"the bundle records Neuron SDK {version}, which this neuronc does not know ({known})"
        raise InvalidInputError(msg, hint="deploy with the neuronc that compiled it, or a newer one")
    return found


def plugin_image(release: Release, target: str, toolchain: Mapping[str, str | None]) -> Image:
    """The release's vllm-neuron (torch.compile) image for ``target``; refused (exit 2) naming the nearest."""
    own = [i for i in release.images_serving(Serves.VLLM_NEURON) if target in i.targets]
    if own:
        return own[0]
    fits = [
        i
        for r in releases()
        for i in r.images_serving(Serves.VLLM_NEURON)
        if target in i.targets and not pin_mismatches(i, toolchain)
    ]
    raise no_image(Serves.VLLM_NEURON, release, target, fits)


__all__ = ["image_agrees", "no_image", "nxdi_image", "nxdi_releases", "plugin_image", "release_of"]
