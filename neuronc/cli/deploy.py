"""`neuronc deploy`: serving files for vLLM, TGI, TorchServe or SageMaker, every value from the manifest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict, final

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt
from neuronc.cli._signing import IdentityOpt, IssuerOpt, RequireSignatureOpt, TrustCertOpt, TrustKeyOpt

if TYPE_CHECKING:
    from neuronc.deploy import Rendered
    from neuronc.verdict import VerdictJSON

_EPILOG = (
    "Examples: neuronc deploy ./bundle --for vllm · "
    "neuronc deploy ./bundle --for vllm --instance-type inf2.48xlarge --out deploy/vllm · "
    "neuronc deploy ./bundle --for sagemaker --s3-uri s3://bucket/models/llama/. See docs/deploy.md."
)


@final  # final: `"parts" in verdict` tells the verdict from this (mypy narrows on it)
class SkippedVerdict(TypedDict):
    """``verdict`` when --allow-compile went on without one: the image, and why there is none."""

    image: str
    skipped: str


@command(name="deploy", epilog=_EPILOG)
def deploy_command(
    bundle: Annotated[Path, cli.Argument(help="A bundle directory.", show_default=False)],
    stack: Annotated[
        str,
        cli.Option(
            "--for",
            metavar="STACK",
            help="The serving stack: vllm, tgi, torchserve, sagemaker or neuronc (CPU bundles).",
            show_default=False,
        ),
    ],
    out_dir: Annotated[
        Path | None, cli.Option("--out", "-o", help="Where to write the files. Default: ./deploy-<stack>.")
    ] = None,
    bundle_path: Annotated[
        str | None,
        cli.Option("--bundle-path", help="The bundle's path on the serving host. Default: BUNDLE, absolute."),
    ] = None,
    instance_type: Annotated[
        str | None,
        cli.Option("--instance-type", help="Instance type. Default: the smallest with tp_degree NeuronCores."),
    ] = None,
    replicas: Annotated[
        int | None,
        cli.Option("--replicas", min=1, help="Compose targets: data-parallel replicas. Default: all that fit."),
    ] = None,
    port: Annotated[int, cli.Option("--port", min=1, max=65535, help="Port clients connect to.")] = 8080,
    image: Annotated[
        str | None,
        cli.Option("--image", help="Container image instead of the one the bundle's versions pick."),
    ] = None,
    s3_uri: Annotated[
        str | None, cli.Option("--s3-uri", help="SageMaker: the S3 prefix the bundle directory is uploaded to.")
    ] = None,
    role_arn: Annotated[str | None, cli.Option("--role-arn", help="SageMaker: execution role ARN.")] = None,
    region: Annotated[str, cli.Option("--region", help="SageMaker: AWS region of the endpoint.")] = "us-east-1",
    require_signature: RequireSignatureOpt = False,
    key: TrustKeyOpt = None,
    certificate: TrustCertOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    allow_compile: Annotated[
        bool,
        cli.Option(
            "--allow-compile",
            help="Write the files even when the pre-boot verdict says the image would compile (a key part "
            "differs: no) or cannot tell (a part unchecked).",
        ),
    ] = False,
    allow_unverified: Annotated[
        bool,
        cli.Option(
            "--allow-unverified",
            help="Write the files when the pre-boot verdict cannot tell (parts unchecked, nothing differs); a "
            "no still needs --allow-compile.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write what a serving stack needs to run this bundle, every shape, size and version from its manifest."""
    from neuronc.cli._signing import check_signature, trust_for
    from neuronc.deploy import DeployOptions, check_options, check_out_dir, parse_stack, render, write

    out.configure(json_mode=json_out)
    chosen = parse_stack(stack)
    target = out_dir if out_dir is not None else Path(f"deploy-{chosen.value}")
    check_out_dir(bundle, target)
    # Before anything is read from the manifest into a serving file: a refused bundle leaves nothing behind.
    options = DeployOptions(
        bundle_path=bundle_path,
        instance_type=instance_type,
        replicas=replicas,
        port=port,
        image=image,
        s3_uri=s3_uri,
        role_arn=role_arn,
        region=region,
    )
    check_options(options)
    trust = trust_for(flag=require_signature, key=key, certificates=certificate, identity=identity, issuer=issuer)
    signed = check_signature(bundle, trust)
    rendered = render(bundle, chosen, options)
    verdict = _verdict(bundle, rendered.image, allow_compile=allow_compile, allow_unverified=allow_unverified)
    if verdict is not None:
        rendered = with_verdict(rendered, verdict, allow_compile=allow_compile, allow_unverified=allow_unverified)
    written = write(rendered, target)
    pairs = list(zip(written, rendered.files, strict=True))
    data = {
        "bundle": str(bundle),
        "stack": chosen.value,
        "out": str(target),
        "image": rendered.image,
        "files": [{"path": str(p), "what": f.what} for p, f in pairs],
        "notes": list(rendered.notes),
        "signature": signed.to_json() if signed else None,
        "verdict": verdict,
    }

    def render_text() -> None:
        from rich.markup import escape

        for path, item in pairs:
            out.print(f"{escape(str(path))}  [dim]{escape(item.what)}[/dim]")
        if rendered.image:
            out.print(f"image: {escape(rendered.image)}")
        for note in rendered.notes:
            out.print(f"[yellow]note:[/yellow] {escape(note)}")
        if signed is not None:
            out.print(f"signature: verified, signed by {escape(signed.signer)}")
        if verdict is not None and "parts" in verdict:
            from neuronc.cli.inspect import render_verdict

            render_verdict(verdict)

    out.result(data, render_text)
    out.success(f"wrote {len(written)} file(s) for {chosen.value} to {target}")


def _verdict(
    bundle: Path, image: str | None, *, allow_compile: bool, allow_unverified: bool
) -> VerdictJSON | SkippedVerdict | None:
    """The pre-boot verdict against the image the serving files name (neuronc.verdict): a no is exit 5
    naming every differing part unless --allow-compile; a cannot tell is exit 7 naming every unchecked
    part unless --allow-unverified or --allow-compile (then it is reported, and the files are written)."""
    from neuronc.bundle import read_manifest
    from neuronc.errors import NeuroncError
    from neuronc.verdict import NO, has_verdict, image_verdict

    if image is None or not has_verdict(read_manifest(bundle)):
        return None
    try:
        verdict = image_verdict(bundle, image)
    except NeuroncError as exc:
        if exc.exit_code == 2 or not allow_compile:  # a bundle or reference refused: never written past
            if exc.exit_code != 2:
                exc.hint = f"{exc.hint + '; ' if exc.hint else ''}--allow-compile writes the files without the verdict"
            raise
        return {"image": image, "skipped": exc.message}
    failure = verdict.failure(str(bundle))
    if failure is not None and not allow_compile and not (allow_unverified and verdict.answer != NO):
        flag = "--allow-compile" if verdict.answer == NO else "--allow-unverified (or --allow-compile)"
        failure.hint = f"{failure.hint}; {flag} writes the files anyway"
        raise failure
    return verdict.to_json()


def with_verdict(
    rendered: Rendered, verdict: VerdictJSON | SkippedVerdict, *, allow_compile: bool, allow_unverified: bool
) -> Rendered:
    """The files plus ``verdict.json``: the pre-boot verdict they were written under (and which risk the
    user took: --allow-compile, --allow-unverified)."""
    import dataclasses
    import json

    from neuronc.deploy import EmittedFile

    record = {
        "verdict": verdict,
        "allow_compile": allow_compile,
        "allow_unverified": allow_unverified,
        "written_by": "neuronc deploy",
    }
    text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    what = "the pre-boot verdict these files were written under"
    return dataclasses.replace(rendered, files=(*rendered.files, EmittedFile("verdict.json", text, what)))


__all__ = ["deploy_command"]
