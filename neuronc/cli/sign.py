"""`neuronc sign BUNDLE`: an OpenSSF model-signing signature over the files a bundle's manifest lists."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt
from neuronc.cli._signing import StagingOpt, render_signature, sign_and_store


@command(
    name="sign",
    epilog="Examples: neuronc sign ./bundle --key signing-key.pem · "
    "neuronc sign ./bundle --certificate signer.pem --key signer-key.pem --chain ca.pem · "
    "neuronc sign ./bundle --sigstore (in CI with an OIDC identity). See docs/bundles.md.",
)
def sign_command(
    bundle: Annotated[Path, cli.Argument(help="Bundle directory.", show_default=False)],
    key: Annotated[
        Path | None,
        cli.Option(
            "--key",
            help="EC private key (PEM; P-256, P-384 or P-521). Encrypted: set NEURONC_SIGNING_KEY_PASSWORD. "
            "Default: $NEURONC_SIGNING_KEY.",
            show_default=False,
        ),
    ] = None,
    certificate: Annotated[
        Path | None,
        cli.Option(
            "--certificate",
            help="Sign as this certificate (PEM) whose private key is --key. Default: $NEURONC_SIGNING_CERT.",
            show_default=False,
        ),
    ] = None,
    chain: Annotated[
        list[Path] | None,
        cli.Option(
            "--chain",
            help="With --certificate: the CA certificates that issued it (PEM); repeatable. "
            "Default: $NEURONC_SIGNING_CHAIN.",
            show_default=False,
        ),
    ] = None,
    sigstore: Annotated[
        bool,
        cli.Option(
            "--sigstore",
            help="Sign keyless with Sigstore: an OIDC identity (ambient CI credentials, or --identity-token); "
            "needs the network. Default: NEURONC_SIGNING_SIGSTORE=1.",
        ),
    ] = False,
    identity_token: Annotated[
        str | None,
        cli.Option(
            "--identity-token",
            help="With --sigstore: the OIDC token to sign as. Default: $SIGSTORE_IDENTITY_TOKEN, else ambient.",
            show_default=False,
        ),
    ] = None,
    staging: StagingOpt = False,
    store: Annotated[
        str | None,
        cli.Option(
            "--store",
            metavar="DIR|URL",
            help="Also store the signature with this bundle in the store that holds it.",
            show_default=False,
        ),
    ] = None,
    jobs: Annotated[
        int | None, cli.Option("--jobs", "-j", min=1, max=256, help="Files hashed in parallel (default: CPU count).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Sign a bundle: an OpenSSF model-signing signature over every file its manifest lists, in BUNDLE/bundle.sig."""
    from neuronc.bundle.signing_material import Signer

    out.configure(json_mode=json_out)
    signer = Signer.choose(
        key=key,
        certificate=certificate,
        chain=chain or (),
        sigstore=sigstore,
        identity_token=identity_token,
        staging=staging,
    )
    data = sign_and_store(bundle, signer, store, jobs=jobs)

    def render() -> None:
        render_signature(data, verb="signed")
        if data["stored"]:
            out.print(f"stored     {data['stored']}")

    out.result(data, render)


__all__ = ["sign_command"]
