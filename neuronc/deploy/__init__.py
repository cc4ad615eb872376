"""Serving files from a bundle: vLLM (NxDI through vllm-neuron's NxDI path; vllm-neuron's torch.compile
cache; optimum-neuron through its own server),
TGI, TorchServe and SageMaker, plus a GuideLLM ``benchmark.sh`` for each.

``render(bundle_dir, stack, options)`` returns what to write; every shape, size, name and version in
it comes from the bundle's manifest; ``write(rendered, out_dir)`` writes it. Nothing here imports
torch or any serving stack. The stack modules import only ``_types``/``_values``/helpers, never this
package, so there is no import cycle.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues, serving_values
from neuronc.errors import InvalidInputError

if TYPE_CHECKING:
    from neuronc.bundle import Manifest

# An image reference, by the grammar of github.com/distribution/reference (reference.go, the grammar
# Docker and every registry client parse with): [domain[:port]/]path-component(/path-component)*
# [:tag][@digest]. Hand-written: no Python library ships that grammar, and docker-py's
# parse_repository_tag only splits a string, it does not validate one. IPv6 registry hosts are not
# accepted (neuronc's images never use one).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
# An AWS region name: us-east-1, eu-central-2, us-gov-west-1, cn-northwest-1, us-isob-east-1.
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+){1,2}-[0-9]{1,2}")


def check_image(image: str, flag: str) -> None:
    """Exit 2 for a value of ``flag`` that is not an image reference: it is written into compose files,
    scripts and hint lines, and given to docker/podman (never one that reads as an option)."""
    from neuronc.errors import safe_text

    name = image.split("@")[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    if not _IMAGE.fullmatch(image) or len(name) > 255:  # reference.go: NameTotalLengthMax
        raise InvalidInputError(
            f"{flag} {safe_text(image, 120)!s}: not a container image reference",
            hint="e.g. public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:TAG or REPOSITORY@sha256:DIGEST",
        )


def check_options(options: DeployOptions) -> None:
    """Exit 2 for a ``--image`` that is not an image reference, or a ``--region`` that is not a region
    name: both are written into compose files, scripts and hint lines, so nothing else may pass."""
    from neuronc.errors import safe_text

    if options.image is not None:
        check_image(options.image, "--image")
    if not _REGION.fullmatch(options.region):
        raise InvalidInputError(
            f"--region {safe_text(options.region, 60)!s}: not an AWS region name", hint="e.g. us-east-1, eu-west-2"
        )


def check_out_dir(bundle_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> None:
    """Exit 2 when ``out_dir`` is the bundle or inside it: files written there would change the bundle,
    which then fails ``verify`` and every signature check."""
    bundle = Path(os.path.realpath(bundle_dir))
    target = Path(os.path.realpath(out_dir))
    if target == bundle or bundle in target.parents:
        raise InvalidInputError(
            f"--out {out_dir}: inside the bundle {bundle_dir}; the serving files would change the bundle",
            hint="write them outside it, e.g. --out deploy/ next to the bundle",
        )


def parse_stack(word: str) -> Stack:
    """A ``--for`` value as a Stack, or an error in plain words."""
    try:
        return Stack(word)
    except ValueError:
        choices = ", ".join(s.value for s in Stack)
        raise InvalidInputError(f"--for {word}: not a serving stack neuronc knows; choose one of {choices}") from None


def check_compatible(stack: Stack, manifest: Manifest) -> None:
    """Raise InvalidInputError (exit 2) with the way forward when a stack cannot serve this bundle.

    Which stacks load a bundle is the backend's to say (``Backend.serving_stacks``). The bundle was
    read from disk: its manifest's backend name is resolved here, once (``backend_for_manifest``).
    """
    from neuronc.backends import backend_for_manifest, is_registered

    backend, target = manifest.backend, manifest.target
    resolved = backend_for_manifest(manifest) if is_registered(backend) else None
    stacks = resolved.serving_stacks if resolved is not None and target in resolved.targets else ()
    if stack.value in stacks:
        return
    if stack is Stack.neuronc:  # `neuronc serve`: the backends that list it, for their own targets
        others = [s.value for s in (resolved.serving_stacks if resolved is not None else ()) if s is not Stack.neuronc]
        msg = f"--for neuronc serves CPU (inductor) bundles; this one is a {backend} bundle for {target}"
        fors = " or ".join(others or ["vllm", "tgi", "torchserve"])
        raise InvalidInputError(msg, hint=f"deploy it with --for {fors}")
    if target == "cpu" or not stacks:
        msg = (
            f"--for {stack.value}: this bundle ({backend} backend, target {target}) "
            "is not served by a Neuron serving stack"
        )
        served = f"serve it with `--for {' or '.join(stacks)}`, or run it" if stacks else "run it"
        hint = (
            f"{served} with `neuronc run BUNDLE --prompt ...`; to serve on Inferentia/Trainium, compile a Neuron "
            "profile (backend nxdi for vLLM, optimum-neuron, or transformers-neuronx for TorchServe)"
        )
        raise InvalidInputError(msg, hint=hint)
    msg = f"--for {stack.value} cannot serve a bundle built with {backend}"
    raise InvalidInputError(msg, hint=f"a bundle built with {backend} deploys with --for {' or '.join(stacks)}")


def render(bundle_dir: str | os.PathLike[str], stack: Stack | str, options: DeployOptions | None = None) -> Rendered:
    """The files a serving stack needs for this bundle (InvalidInputError, exit 2, for a pairing it cannot serve)."""
    from neuronc.bundle import read_manifest

    chosen = stack if isinstance(stack, Stack) else parse_stack(stack)
    options = options or DeployOptions()
    check_options(options)
    manifest = read_manifest(bundle_dir)
    if chosen is Stack.sagemaker:
        from neuronc.deploy.sagemaker import vllm_dlc_refusal

        vllm_dlc_refusal(manifest.backend, manifest.toolchain, manifest.extra)
    check_compatible(chosen, manifest)
    if chosen is Stack.neuronc:
        from neuronc.deploy.neuronc_serve import render_neuronc

        return render_neuronc(serving_values(manifest, Path(bundle_dir), options.bundle_path), options)
    values = serving_values(manifest, Path(bundle_dir), options.bundle_path)
    if chosen is Stack.vllm and values.backend == "nxdi":
        from neuronc.deploy.vllm import render_vllm

        return render_vllm(values, options)
    if chosen is Stack.vllm and values.backend == "vllm-neuron":
        from neuronc.deploy.vllm_neuron import render_vllm_neuron

        return render_vllm_neuron(values, options)
    if chosen is Stack.vllm:
        from neuronc.deploy.optimum import render_optimum_vllm

        return render_optimum_vllm(values, options)
    if chosen is Stack.tgi:
        from neuronc.deploy.tgi import render_tgi

        return render_tgi(values, options)
    if chosen is Stack.torchserve:
        from neuronc.deploy.torchserve import render_torchserve

        return render_torchserve(values, options)
    from neuronc.deploy.sagemaker import render_sagemaker

    return render_sagemaker(values, options)


def write(rendered: Rendered, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write the files under ``out_dir`` (replacing older copies), each atomically."""
    from neuronc.fsutil import write_output

    root = Path(out_dir)
    written = []
    for item in rendered.files:
        target = root / item.path
        mode = 0o755 if item.executable else 0o644
        write_output(target, item.text.encode("utf-8"), what="a serving file", mode=mode)
        written.append(target)
    return written


__all__ = [
    "DeployOptions",
    "EmittedFile",
    "Rendered",
    "ServingValues",
    "Stack",
    "check_compatible",
    "check_image",
    "check_options",
    "check_out_dir",
    "parse_stack",
    "render",
    "serving_values",
    "write",
]
