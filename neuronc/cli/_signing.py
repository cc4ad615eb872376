"""The signature options `verify`, `deploy` and `store fetch` share, the signing steps of `sign` and
`store publish --sign`, and how `compile --sign` says what the pipeline's signing stage
(``neuronc.pipeline.sign``) did.

Signing and verifying go through the OpenSSF model-signing library (the `sign` extra), imported
only when a command signs or checks a signature: `neuronc --help` and the other commands never
load it (tests/test_startup.py). docs/bundles.md has the threat model and the CI recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli

if TYPE_CHECKING:
    from neuronc.bundle.signing import (
        BuiltSignatureJSON,
        SignatureJSON,
        SignatureReport,
        Signer,
        StoredSignatureJSON,
    )
    from neuronc.bundle.signing_material import TrustRoot
    from neuronc.errors import NeuroncError
    from neuronc.pipeline import BuildReport

# -- options shared by the commands that check a signature -------------------------------------

SignatureFlag = Annotated[
    bool,
    cli.Option(
        "--signature",
        help="Also check the bundle's signature (exit 4 if it is unsigned or does not verify). "
        "Implied by --key, --certificate, --identity and by NEURONC_REQUIRE_SIGNATURE=1.",
    ),
]
RequireSignatureOpt = Annotated[
    bool,
    cli.Option(
        "--require-signature",
        help="Refuse a bundle that is unsigned or whose signature does not verify (exit 4). "
        "Also NEURONC_REQUIRE_SIGNATURE=1; implied by --key, --certificate, --identity.",
    ),
]
TrustKeyOpt = Annotated[
    Path | None,
    cli.Option(
        "--key",
        help="Trust signatures made with this EC public key (PEM). Default: $NEURONC_SIGNATURE_KEY.",
        show_default=False,
    ),
]
TrustCertOpt = Annotated[
    list[Path] | None,
    cli.Option(
        "--certificate",
        help="Trust signing certificates issued under this root CA certificate (PEM); repeatable. "
        "Default: $NEURONC_SIGNATURE_CERT.",
        show_default=False,
    ),
]
IdentityOpt = Annotated[
    str | None,
    cli.Option(
        "--identity",
        help="Sigstore: the signer identity to trust (e-mail, or workflow URI); with --certificate: "
        "the name the signing certificate must carry. Default: $NEURONC_SIGNATURE_IDENTITY.",
        show_default=False,
    ),
]
IssuerOpt = Annotated[
    str | None,
    cli.Option(
        "--issuer",
        help="Sigstore: the OIDC issuer of --identity (e.g. https://token.actions.githubusercontent.com). "
        "Default: $NEURONC_SIGNATURE_ISSUER.",
        show_default=False,
    ),
]
StagingOpt = Annotated[
    bool, cli.Option("--sigstore-staging", help="Use Sigstore's staging instance (for testing keyless signing).")
]


def trust_for(
    *,
    flag: bool,
    key: Path | None,
    certificates: list[Path] | None,
    identity: str | None,
    issuer: str | None,
    staging: bool = False,
) -> TrustRoot | None:
    """What a signature must be checked against, when one is asked for (the flag, a trust option, or
    NEURONC_REQUIRE_SIGNATURE); None when none is. Its files are read now: a missing or unusable
    one, or nothing to trust at all, is exit 2 before any work.

    The trust root is the options given, else the NEURONC_SIGNATURE_* variables.
    """
    from neuronc.bundle.signing import signature_required
    from neuronc.bundle.signing_material import TrustRoot, check_trust, no_trust_root

    named = bool(key or certificates or identity or issuer)
    if not (signature_required(flag) or named):
        return None
    trust = TrustRoot.choose(
        key=key, certificates=certificates or (), identity=identity, issuer=issuer, staging=staging
    )
    if trust is None:
        raise no_trust_root()
    check_trust(trust)
    return trust


def check_signature(bundle: Path, trust: TrustRoot | None) -> SignatureReport | None:
    """``verify_signature`` when a trust root was asked for; None when not."""
    from neuronc.bundle.signing import verify_signature

    return None if trust is None else verify_signature(bundle, trust)


def sign_and_store(bundle: Path, signer: Signer, store: str | None, *, jobs: int | None = None) -> StoredSignatureJSON:
    """Sign ``bundle`` in place; with ``store``, store the signature with the stored bundle (exit 2 if absent)."""
    from neuronc.bundle.signing import sign_bundle
    from neuronc.errors import InvalidInputError

    report = sign_bundle(bundle, signer, jobs=jobs)
    data: StoredSignatureJSON = {**report.to_json(), "stored": None}
    if store is not None:
        from neuronc.store import open_store

        opened = open_store(store)
        data["stored"] = opened.publish_signature(bundle)
        if data["stored"] is None:
            msg = f"{opened.location} holds no bundle with this manifest; the signature stays in {bundle}"
            raise InvalidInputError(msg, hint=f"publish the bundle first: neuronc store publish {bundle} --store ...")
    return data


def render_signature(report: SignatureJSON, *, verb: str) -> None:
    from rich.markup import escape

    signature, trusted_as = report["signature"], report["trusted"]
    where = f" → {escape(signature)}" if signature else ""
    trusted = f", trusted as {escape(trusted_as)}" if trusted_as else ""
    out.print(
        f"signature  {verb} by {escape(report['signer'])}{trusted}: "
        f"{report['files']} files in {report['seconds']:.2f} s{where}"
    )


def signed_bundles(reports: list[BuildReport]) -> tuple[list[BuiltSignatureJSON], list[str]]:
    """`compile --sign`: what the pipeline's signing stage (``neuronc.pipeline.sign``) did to each
    bundle, said on stderr: the signatures, and one line for each store hit left unsigned (the
    caller ends the run with exit 4). A failure to sign is raised here, after the bundles signed
    before it are named."""
    from neuronc.pipeline.report import SignatureOutcome

    signed: list[BuiltSignatureJSON] = []
    refused: list[str] = []
    for report in reports:
        signature = report.signature
        if signature is None:
            continue
        if signature.error is not None:
            raise signature.error
        if signature.outcome == SignatureOutcome.REFUSED:
            refused.append(f"{report.label}: {signature.why}")
            out.warning(f"{report.label}: store hit {signature.bundle} not signed: {signature.why}")
            continue
        if signature.outcome == SignatureOutcome.KEPT:
            out.success(f"{report.label}: store hit keeps its signature by {signature.signer}")
        else:
            out.success(f"{report.label}: signed by {signature.signer}")
        assert signature.record is not None
        signed.append(signature.record)
    return signed, refused


def unsigned_hits_error(refused: list[str]) -> NeuroncError:
    """Exit 4 for store hits `compile --sign` left unsigned: it signs only what it proves it built."""
    from neuronc.errors import SignatureError

    return SignatureError(
        f"{len(refused)} store hit(s) not signed: neuronc signs only bundles it built or that carry the signer's "
        "own valid signature",
        details=refused[:50],
        hint="remove them (neuronc store rm HASH) and compile again to build and sign them, or check and sign "
        "them by hand (neuronc verify, neuronc sign)",
    )


def signer_from_environment() -> Signer:
    """The signer NEURONC_SIGNING_* names, checked (key readable, library installed) before any work starts."""
    from neuronc.bundle.signing import library
    from neuronc.bundle.signing_material import Signer, check_signer, signing_password

    signer = Signer.choose()
    check_signer(signer, signing_password())
    library()
    return signer


__all__ = [
    "IdentityOpt",
    "IssuerOpt",
    "RequireSignatureOpt",
    "SignatureFlag",
    "StagingOpt",
    "TrustCertOpt",
    "TrustKeyOpt",
    "check_signature",
    "render_signature",
    "sign_and_store",
    "signed_bundles",
    "signer_from_environment",
    "trust_for",
    "unsigned_hits_error",
]
