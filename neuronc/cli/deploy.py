"""`neuronc deploy`: serving configs for vLLM, TGI, TorchServe or SageMaker, every value from the manifest."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from neuronc._output import out
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt


class Stack(StrEnum):
    vllm = "vllm"
    tgi = "tgi"
    torchserve = "torchserve"
    sagemaker = "sagemaker"


_EPILOG = (
    "Examples: neuronc deploy ./bundle --for vllm · "
    "neuronc deploy ./bundle --for tgi --instance-type inf2.48xlarge --out deploy/tgi · "
    "neuronc deploy ./bundle --for sagemaker --s3-uri s3://bucket/models/llama/. See docs/deploy.md."
)


@command(name="deploy", epilog=_EPILOG)
def deploy_command(
    bundle: Annotated[Path, typer.Argument(help="A bundle directory.", show_default=False)],
    stack: Annotated[Stack, typer.Option("--for", help="The serving stack.", show_default=False)],
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Where to write the files. Default: ./deploy-<stack>.")
    ] = None,
    bundle_path: Annotated[
        str | None,
        typer.Option("--bundle-path", help="The bundle's path on the serving host. Default: BUNDLE, absolute."),
    ] = None,
    instance_type: Annotated[
        str | None,
        typer.Option(
            "--instance-type", help="TGI/SageMaker: instance type. Default: the smallest with tp_degree NeuronCores."
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option("--replicas", min=1, help="TGI: data-parallel replicas. Default: as many as the instance fits."),
    ] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port clients connect to.")] = 8080,
    image: Annotated[str | None, typer.Option("--image", help="TGI/SageMaker: container image.")] = None,
    s3_uri: Annotated[
        str | None, typer.Option("--s3-uri", help="SageMaker: the S3 prefix the bundle directory is uploaded to.")
    ] = None,
    role_arn: Annotated[str | None, typer.Option("--role-arn", help="SageMaker: execution role ARN.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write what a serving stack needs to run this bundle, every shape and size from its manifest."""
    from neuronc.deploy import DeployOptions, render, write

    out.configure(json_mode=json_out)
    options = DeployOptions(
        bundle_path=bundle_path,
        instance_type=instance_type,
        replicas=replicas,
        port=port,
        image=image,
        s3_uri=s3_uri,
        role_arn=role_arn,
    )
    files = render(bundle, stack.value, options)
    target = out_dir if out_dir is not None else Path(f"deploy-{stack.value}")
    written = write(files, target)
    data = {
        "bundle": str(bundle),
        "stack": stack.value,
        "out": str(target),
        "files": [{"path": str(p), "what": f.what} for p, f in zip(written, files, strict=True)],
    }

    def render_text() -> None:
        from rich.markup import escape

        for path, item in zip(written, files, strict=True):
            out.print(f"{escape(str(path))}  [dim]{escape(item.what)}[/dim]")

    out.result(data, render_text)
    out.success(f"wrote {len(written)} file(s) for {stack.value} to {target}")


__all__ = ["deploy_command"]
