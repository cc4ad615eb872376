"""Serving configs from a bundle: vLLM, TGI (with data-parallel replicas behind nginx), TorchServe, SageMaker.

``render(bundle_dir, stack, options)`` returns the files to write (path, text, what it is); every
shape, size and name in them comes from the bundle's manifest. ``write(files, out_dir)`` writes
them. Nothing here imports torch or any serving stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from neuronc.deploy._values import COMPATIBLE, STACKS, ServingValues, check_compatible, serving_values


@dataclass(frozen=True)
class DeployOptions:
    """What the manifest cannot know: where things run and are reached."""

    bundle_path: str | None = None  # the bundle's path on the serving host (default: as given)
    instance_type: str | None = None  # default: the smallest instance with tp_degree NeuronCores
    replicas: int | None = None  # TGI: default = every disjoint device group the instance has
    port: int = 8080
    image: str | None = None
    s3_uri: str | None = None  # SageMaker: where the bundle directory was uploaded (an S3 prefix)
    role_arn: str | None = None  # SageMaker execution role
    handler: str = "inf2_handler.py"  # TorchServe handler file


@dataclass(frozen=True)
class EmittedFile:
    path: str  # relative to the output directory
    text: str
    what: str
    executable: bool = False


def render(bundle_dir: str | os.PathLike[str], stack: str, options: DeployOptions | None = None) -> list[EmittedFile]:
    """The files a serving stack needs for this bundle (raises InvalidInputError for an unsupported pairing)."""
    from neuronc.bundle import read_manifest
    from neuronc.errors import InvalidInputError

    if stack not in STACKS:
        raise InvalidInputError(f"unknown serving stack '{stack}'; choose one of {', '.join(STACKS)}")
    options = options or DeployOptions()
    manifest = read_manifest(bundle_dir)
    check_compatible(stack, manifest.backend)
    values = serving_values(manifest, Path(bundle_dir), options.bundle_path)
    if stack == "vllm":
        from neuronc.deploy.vllm import render_vllm

        return render_vllm(values, options)
    if stack == "tgi":
        from neuronc.deploy.tgi import render_tgi

        return render_tgi(values, options)
    if stack == "torchserve":
        from neuronc.deploy.torchserve import render_torchserve

        return render_torchserve(values, options)
    from neuronc.deploy.sagemaker import render_sagemaker

    return render_sagemaker(values, options)


def write(files: list[EmittedFile], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write emitted files under ``out_dir`` (replacing older copies), each atomically."""
    root = Path(out_dir)
    written = []
    for item in files:
        target = root / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(item.text, encoding="utf-8")
        if item.executable:
            tmp.chmod(0o755)
        os.replace(tmp, target)
        written.append(target)
    return written


__all__ = [
    "COMPATIBLE",
    "STACKS",
    "DeployOptions",
    "EmittedFile",
    "ServingValues",
    "render",
    "serving_values",
    "write",
]
