"""The signing stage of `compile --sign`: after every build of a run has ended (and its bundle is
published), sign each bundle the run built, store the signature with it, and sign its ``--out`` copy.

It runs in the process that drives the run (``compile_profiles``), never on a Ray node: the signing
key stays where the run was started. A store hit (found in the store, or published first by another
host) was not built here: anyone who can write the store may have changed it and sealed its manifest
again. It is never signed again; its own signature is kept when it verifies as the signer's (the
key's public key, the certificate under its chain's root, the Sigstore identity NEURONC_SIGNATURE_*
names), else it is left unsigned and the report says why (the CLI ends the run with exit 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.errors import NeuroncError
from neuronc.pipeline.report import BuildReport, BuildSignature, BuildStatus, SignatureOutcome

if TYPE_CHECKING:
    from neuronc.bundle.signing import BuiltSignatureJSON, SignatureReport
    from neuronc.bundle.signing_material import Signer, TrustRoot
    from neuronc.store import BundleStore


def sign_built(reports: Sequence[BuildReport], signer: Signer, store: BundleStore) -> None:
    """Sign each bundle ``reports`` built (``report.signature`` says what was done to each).

    A failure to sign (a NeuroncError: the signing library, Sigstore) is recorded on the report it
    happened to and ends the stage: the later bundles stay unsigned (``BuildReport.raise_for_status``
    raises it). A KeyboardInterrupt propagates.
    """
    import tempfile

    from neuronc.bundle.signing_material import signer_trust, signing_password

    with tempfile.TemporaryDirectory(prefix="neuronc-signer-") as tmp:
        own: TrustRoot | None = None
        if any(r.ok and r.status == BuildStatus.HIT for r in reports):
            try:
                own = signer_trust(signer, Path(tmp), signing_password())
            except NeuroncError as exc:
                first = next(r for r in reports if r.ok and r.status == BuildStatus.HIT)
                first.signature = BuildSignature(SignatureOutcome.FAILED, error=exc)
                return
        for report in reports:
            if not report.ok or not report.bundle:
                continue
            try:
                report.signature = _sign_one(report, signer, store, own)
            except NeuroncError as exc:
                report.signature = BuildSignature(SignatureOutcome.FAILED, error=exc)
                return


def _sign_one(report: BuildReport, signer: Signer, store: BundleStore, own: TrustRoot | None) -> BuildSignature:
    from neuronc.bundle.signature import SIGNATURE_NAME, write_signature
    from neuronc.bundle.signing import sign_bundle

    assert report.bundle is not None
    bundle = Path(report.bundle)
    # Built on a Ray node: the report names the store's URL; sign a local copy.
    if not bundle.is_dir() and report.config_hash and report.toolchain_key:
        bundle = store.lookup(report.config_hash, report.toolchain_key) or bundle
    if report.status == BuildStatus.HIT:
        kept, why = _own_signature(bundle, signer, own)
        if kept is None:
            return BuildSignature(SignatureOutcome.REFUSED, bundle=str(bundle), why=why)
        data: BuiltSignatureJSON = {**kept.to_json(), "stored": store.publish_signature(bundle), "out": report.out}
        outcome = BuildSignature(SignatureOutcome.KEPT, bundle=str(bundle), signer=kept.signer, record=data)
    else:
        result = sign_bundle(bundle, signer)
        data = {**result.to_json(), "stored": store.publish_signature(bundle), "out": report.out}
        outcome = BuildSignature(SignatureOutcome.SIGNED, bundle=str(bundle), signer=result.signer, record=data)
    if report.out:  # a byte-identical copy: the same signature holds
        write_signature(Path(report.out), (bundle / SIGNATURE_NAME).read_bytes())
    return outcome


def _own_signature(bundle: Path, signer: Signer, trust: TrustRoot | None) -> tuple[SignatureReport | None, str]:
    """The bundle's signature checked as ``signer``'s own (report, ""), or (None, why not)."""
    from neuronc.bundle.signature import CERTIFICATE, parse_signature, read_signature
    from neuronc.bundle.signing import verify_signature
    from neuronc.bundle.signing_material import certificate_der
    from neuronc.errors import SignatureError

    if trust is None:
        why = "keyless signing cannot check a reused bundle's signature without NEURONC_SIGNATURE_IDENTITY and _ISSUER"
        return None, why
    try:
        report = verify_signature(bundle, trust)
    except SignatureError as exc:
        return None, f"it is not signed by this signer ({exc.message})"
    if signer.method == CERTIFICATE:
        assert signer.certificate is not None
        content = parse_signature(read_signature(bundle) or b"")
        if not content.certificates or content.certificates[0] != certificate_der(signer.certificate):
            return None, f"it is signed by {content.signer}, not by {signer.certificate}"
    return report, ""


__all__ = ["sign_built"]
