"""The one table of serving images neuronc knows, and the exact-version rule that picks one.

A compiled bundle only loads where the serving image ships the versions it was built with:
optimum-neuron refuses an export whose ``optimum_neuron_version`` or ``neuronxcc_version`` differs
from the installed ones (optimum-neuron ``optimum/neuron/configuration_utils.py``), and NxDI's
``model.pt`` is TorchScript tied to the neuronx-cc / NxD / NxDI it was traced with. So the
bundle's recorded versions (``manifest.toolchain``) choose the image; a bundle no image here
matches is refused with its versions named. Versions are compared on their public part
(``2.21.33363.0+82129205`` matches ``2.21.33363.0``): image recipes pin either form of the same wheel.

Sources, per family:
- ``optimum-vllm``: huggingface/optimum-neuron ``.github/workflows/build-vllm-image.yml`` pushes
  ``ghcr.io/huggingface/optimum-neuron-vllm:<version>`` at every release tag from v0.4.0, built from
  ``docker/vllm/Dockerfile`` (entrypoint: ``SM_ON_*`` -> ``optimum-cli neuron serve``); the
  neuronx-cc and vLLM pins are the tag's ``pyproject.toml``.
- ``sagemaker-vllm``: the Hugging Face vLLM neuronx DLC, same Dockerfile (optimum-neuron
  ``docs/source/containers.mdx`` at v0.4.5; huggingface/hub-docs ``docs/sagemaker/source/dlcs/available.md``).
- ``tgi``: huggingface/text-generation-inference ``Dockerfile.neuron`` at v3.3.5-v3.3.7 (optimum-neuron
  v0.3.0 sources, ``neuronx-cc==2.19.8089.0+8ab9f450``); tags from ``docs/source/backends/neuron.md``.
- ``vllm-neuron``: not listed here but derived from the support matrix (``neuronc.backends.support_data``):
  every release's image that serves NxD Inference through the vllm-neuron plugin (``Serves.NXDI``:
  vLLM 0.11.0 / 0.13.0 / 0.16.0, SDK 2.27.0-2.31.1), read there from aws-neuron/deep-learning-containers
  ``vllm/inference/<vllm>/Dockerfile.neuronx`` (``NEURONX_CC_VERSION``,
  ``NEURONX_DISTRIBUTED_INFERENCE_VERSION``) and its README table. Newest release first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from neuronc.backends.support import public
from neuronc.errors import InvalidInputError

HF_DLC_ACCOUNT = "763104351884"
# The regions the Hugging Face vLLM neuronx DLC is published in, all under account 763104351884 at
# ``.amazonaws.com``: aws/sagemaker-python-sdk master (a2481266)
# ``sagemaker-core/src/sagemaker/core/image_uri_config/huggingface-vllm-neuronx.json`` ``registries``.
# Other regions use other accounts for the other Hugging Face neuron images (China: 727897471807 at
# ``.amazonaws.com.cn``; GovCloud: 446045086412 / 442386744353) and have no vLLM neuronx DLC at all.
SAGEMAKER_VLLM_REGIONS: tuple[str, ...] = (
    "ap-northeast-1",
    "ap-south-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "eu-central-1",
    "eu-west-1",
    "eu-west-3",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-west-2",
)


@dataclass(frozen=True)
class ServingImage:
    family: str  # optimum-vllm | sagemaker-vllm | tgi | vllm-neuron
    image: str  # {region} is filled in for SageMaker images
    neuronx_cc: str
    optimum_neuron: str | None = None
    nxdi: str | None = None  # neuronx-distributed-inference
    vllm: str | None = None
    tgi: str | None = None
    sdk: str | None = None  # the Neuron SDK release the image belongs to (vllm-neuron family)
    plugin: str | None = None  # the vllm-neuron version it ships (vllm-neuron family)


def _optimum_vllm(version: str, cc: str, vllm: str) -> ServingImage:
    return ServingImage("optimum-vllm", f"ghcr.io/huggingface/optimum-neuron-vllm:{version}", cc, version, vllm=vllm)


def _sagemaker_vllm(version: str, cc: str) -> ServingImage:
    repo = f"{HF_DLC_ACCOUNT}.dkr.ecr.{{region}}.amazonaws.com/huggingface-vllm-inference-neuronx"
    tag = f"0.11.0-optimum{version}-neuronx-py310-sdk2.26.1-ubuntu22.04"
    return ServingImage("sagemaker-vllm", f"{repo}:{tag}", cc, version, vllm="0.11.0")


def _tgi(tgi: str) -> ServingImage:
    image = f"ghcr.io/huggingface/text-generation-inference:{tgi}-neuron"
    return ServingImage("tgi", image, "2.19.8089.0+8ab9f450", "0.3.0", tgi=tgi)


def nxdi_images() -> tuple[ServingImage, ...]:
    """The support matrix's vLLM images that serve NxD Inference bundles (vllm-neuron's NxDI path), newest
    release first; within a release in the matrix's order (the newer vLLM first)."""
    from neuronc.backends.support import Serves, releases

    rows = []
    for release in reversed(releases()):
        for image in release.images_serving(Serves.NXDI):
            cc, nxdi = image.packages["neuronx-cc"], image.packages["neuronx-distributed-inference"]
            made = ServingImage("vllm-neuron", image.reference, cc, nxdi=nxdi, vllm=image.vllm, plugin=image.plugin)
            rows.append(replace(made, sdk=release.version))
    return tuple(rows)


# Newest first within a family: the first match wins.
IMAGES: tuple[ServingImage, ...] = (
    _optimum_vllm("0.4.5", "2.21.33363.0", "0.11.0"),
    _optimum_vllm("0.4.4", "2.21.33363.0", "0.11.0"),
    _optimum_vllm("0.4.3", "2.21.33363.0", "0.11.0"),
    _optimum_vllm("0.4.2", "2.21.18209.0", "0.11.0"),
    _optimum_vllm("0.4.1", "2.21.18209.0", "0.10.2"),
    _optimum_vllm("0.4.0", "2.21.18209.0", "0.10.2"),
    _sagemaker_vllm("0.4.5", "2.21.33363.0"),
    _sagemaker_vllm("0.4.4", "2.21.33363.0"),
    _tgi("3.3.7"),
    _tgi("3.3.6"),
    _tgi("3.3.5"),
    *nxdi_images(),
)

FAMILY_WORDS = {
    "optimum-vllm": "optimum-neuron vLLM image (optimum-cli neuron serve)",
    "sagemaker-vllm": "Hugging Face vLLM neuronx SageMaker container",
    "tgi": "TGI neuron image",
    "vllm-neuron": "AWS Neuron vLLM container (vllm-neuron plugin)",
}


def _matches(image: ServingImage, toolchain: Mapping[str, str | None]) -> bool:
    wanted = {
        "neuronx-cc": image.neuronx_cc,
        "optimum-neuron": image.optimum_neuron,
        "neuronx-distributed-inference": image.nxdi,
    }
    for package, version in wanted.items():
        if version is not None and public(toolchain.get(package)) != public(version):
            return False
    return True


def versions_text(toolchain: Mapping[str, str | None], packages: tuple[str, ...]) -> str:
    return ", ".join(f"{p} {toolchain.get(p) or 'not recorded'}" for p in packages)


def known_text(family: str, packages: tuple[str, ...]) -> str:
    keys = {"neuronx-cc": "neuronx_cc", "optimum-neuron": "optimum_neuron", "neuronx-distributed-inference": "nxdi"}
    rows = []
    for image in IMAGES:
        if image.family == family:
            rows.append(" + ".join(f"{p} {getattr(image, keys[p])}" for p in packages))
    return "; ".join(dict.fromkeys(rows)) or "none"


def find_image(family: str, toolchain: Mapping[str, str | None]) -> ServingImage | None:
    """The newest image of ``family`` that ships exactly the bundle's recorded versions."""
    return next((i for i in IMAGES if i.family == family and _matches(i, toolchain)), None)


def choose_image(family: str, toolchain: Mapping[str, str | None], packages: tuple[str, ...]) -> ServingImage:
    """``find_image`` or InvalidInputError (exit 2) naming the bundle's versions and the known images'."""
    image = find_image(family, toolchain)
    if image is not None:
        return image
    msg = f"no {FAMILY_WORDS[family]} ships this bundle's {versions_text(toolchain, packages)}"
    hint = (
        f"known images ship {known_text(family, packages)}; recompile with one of those toolchains, "
        "or pass --image with an image built with exactly the bundle's versions"
    )
    raise InvalidInputError(msg, hint=hint)


__all__ = [
    "FAMILY_WORDS",
    "IMAGES",
    "SAGEMAKER_VLLM_REGIONS",
    "ServingImage",
    "choose_image",
    "find_image",
    "nxdi_images",
    "public",
]
