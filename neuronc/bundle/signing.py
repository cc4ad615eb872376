"""Signing and verifying bundles with the OpenSSF model-signing library (the ``sign`` extra).

A signature is made over the files a bundle's manifest lists and the manifest itself, with an EC
private key, a certificate (key + certificate + its issuing chain), or Sigstore keyless signing
(an OIDC identity; needs the network). It is written to ``bundle.sig`` in the bundle and is
verifiable with model-signing's own command line::

    model_signing verify key BUNDLE --signature BUNDLE/bundle.sig --public_key key.pub

The library costs about 0.3 s to import: it is imported here, inside the functions that sign or
verify, never when a command starts. Every failure it raises (ValueError, InvalidSignature,
OpenSSL's X509StoreContextError, AttributeError, sigstore's errors ...) becomes one neuronc error:
``SignatureError`` (exit 4) for a signature that does not verify, ``SigstoreUnreachableError``
(exit 5) when Sigstore cannot be reached, ``InvalidInputError`` (exit 2) for a key or certificate
that cannot be used.
"""

from __future__ import annotations

import ast
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict, cast

from neuronc.bundle._manifest import MANIFEST_NAME, MAX_FILES, parse_manifest, safe_text
from neuronc.bundle._reader import read_manifest_bytes, verify_bundle
from neuronc.bundle.fs import walk_regular
from neuronc.bundle.signature import (
    CERTIFICATE,
    KEY,
    SIGNATURE_NAME,
    SIGSTORE,
    SignedContent,
    certificate_identities,
    coverage_problems,
    parse_signature,
    read_signature,
    write_signature,
)
from neuronc.bundle.signing_material import (
    IDENTITY_TOKEN_ENV,
    INSTALL_HINT,
    Signer,
    TrustRoot,
    check_signer,
    check_trust,
    signing_password,
)
from neuronc.errors import (
    MISSING_LIBRARY,
    SIGSTORE_UNREACHABLE,
    InvalidInputError,
    NeuroncError,
    SignatureError,
    SignatureMissingError,
    short_reason,
)
from neuronc.resources import default_jobs

DO_NOT_DEPLOY = "do not deploy this bundle: fetch it again from a store you trust, or rebuild and sign it"


class SignatureJSON(TypedDict):
    """``SignatureReport.to_json()``."""

    bundle: str
    method: str
    signer: str
    files: int
    seconds: float
    verified: bool
    trusted: str | None
    signature: str | None


class StoredSignatureJSON(SignatureJSON):
    """A signature made by `neuronc sign`: where the store keeps it (None without --store)."""

    stored: str | None


class BuiltSignatureJSON(StoredSignatureJSON):
    """A signature made by `compile --sign`: its store copy, and the bundle's --out copy it also signs."""

    out: str | None


@dataclass
class SignatureReport:
    """What signing or verifying a bundle found: method, signer, files covered, time taken."""

    bundle: str
    method: str
    signer: str
    files: int
    seconds: float
    verified: bool
    trusted: str | None = None  # what the signature was checked against (verify only)
    signature: str | None = None  # where it was written (sign only)

    @classmethod
    def of(
        cls,
        bundle_dir: str | os.PathLike[str],
        content: SignedContent,
        start: float,
        *,
        trusted: str | None = None,
        signature: str | None = None,
    ) -> SignatureReport:
        """The report of a signature just written (``signature``) or verified against ``trusted``."""
        return cls(
            bundle=str(bundle_dir),
            method=content.method,
            signer=content.signer,
            files=len(content.resources),
            seconds=time.perf_counter() - start,
            verified=trusted is not None,
            trusted=trusted,
            signature=signature,
        )

    def to_json(self) -> SignatureJSON:
        return {
            "bundle": self.bundle,
            "method": self.method,
            "signer": self.signer,
            "files": self.files,
            "seconds": round(self.seconds, 4),
            "verified": self.verified,
            "trusted": self.trusted,
            "signature": self.signature,
        }


def library() -> tuple[ModuleType, ModuleType, ModuleType]:
    """model_signing's (signing, verifying, hashing) modules; exit 5 with the install hint if absent."""
    try:
        from model_signing import hashing, signing, verifying
    except ImportError as exc:
        raise MISSING_LIBRARY.convert(
            exc, "signing bundles needs the model-signing library", hint=INSTALL_HINT
        ) from None
    return signing, verifying, hashing


_unreachable = SIGSTORE_UNREACHABLE.matches


def _sigstore_error(exc: BaseException, doing: str) -> NeuroncError:
    reason = safe_text(short_reason(exc))
    return SIGSTORE_UNREACHABLE.error(f"{doing}: cannot reach Sigstore ({reason})", hint=SIGSTORE_UNREACHABLE.hint)


# -- signing --------------------------------------------------------------------------------------


def sign_bundle(bundle_dir: str | os.PathLike[str], signer: Signer, *, jobs: int | None = None) -> SignatureReport:
    """Sign the files ``bundle_dir``'s manifest lists, and the manifest, into ``<bundle>/bundle.sig``.

    The bundle is verified first (a damaged bundle is not signed: exit 4). A previous signature is
    replaced. Raises InvalidInputError (exit 2) for a key or certificate that cannot be used,
    SigstoreUnreachableError (exit 5) when keyless signing cannot reach Sigstore.
    """
    start = time.perf_counter()
    shown = safe_text(bundle_dir)
    raw = read_manifest_bytes(bundle_dir)
    manifest = parse_manifest(raw, where=f"{shown}/{MANIFEST_NAME}")
    jobs = max(1, jobs or default_jobs(cap=16))
    integrity = verify_bundle(bundle_dir, manifest=manifest, jobs=jobs)
    if not integrity.ok:
        problems = integrity.problems()
        raise SignatureError(
            f"{shown}: not signed: the bundle failed verification",
            details=problems[:50],
            hint="a signature vouches for a bundle: rebuild or re-download it, then sign it",
        )
    password = signing_password()
    check_signer(signer, password)
    signing, _verifying, hashing = library()
    root = Path(os.path.realpath(bundle_dir))
    # Only the signature file is left out: verify_bundle just found nothing else that the manifest
    # does not list. The ignore list is recorded in the signature and applied again at verify time.
    hashes = hashing.Config().use_file_serialization(hashing_algorithm="sha256", max_workers=jobs)
    hashes.set_ignored_paths(paths=[SIGNATURE_NAME], ignore_git_paths=False)
    config = signing.Config().set_hashing_config(hashes)
    try:
        if signer.method == KEY:
            # model-signing annotates the password as str but hands it to cryptography, which wants bytes.
            config.use_elliptic_key_signer(private_key=signer.key, password=cast("Any", password))
        elif signer.method == CERTIFICATE:
            config.use_certificate_signer(
                private_key=signer.key, signing_certificate=signer.certificate, certificate_chain=list(signer.chain)
            )
        else:
            token = _sigstore_identity(signer, shown)
            config.use_sigstore_signer(identity_token=token, use_ambient_credentials=False, use_staging=signer.staging)
        with tempfile.TemporaryDirectory(prefix="neuronc-sign-") as tmp:
            made = Path(tmp) / SIGNATURE_NAME
            config.sign(root, made)
            data = made.read_bytes()
    except NeuroncError:
        raise
    except Exception as exc:  # the library's own exceptions, of many types (module docstring)
        raise _signing_failure(exc, shown, signer) from exc
    content = parse_signature(data, where=f"{shown}/{SIGNATURE_NAME}")
    problems = coverage_problems(content, manifest, raw)
    if problems:
        raise SignatureError(f"{shown}: the bundle changed while it was signed; nothing written", details=problems)
    path = write_signature(root, data)
    return SignatureReport.of(bundle_dir, content, start, signature=str(path))


def _sigstore_identity(signer: Signer, shown: str) -> str | None:
    """The OIDC token to sign as: given, or the CI's ambient credential (GitHub Actions, GitLab, GCP ...).

    None only at a terminal, where model-signing then runs Sigstore's browser sign-in; anywhere else
    that sign-in would wait for ever, so no identity at all is exit 2.
    """
    import sys

    if signer.identity_token:
        return signer.identity_token
    from sigstore.oidc import detect_credential

    token = detect_credential()
    if token is None and not sys.stdin.isatty():
        raise InvalidInputError(
            f"{shown}: keyless signing needs an OIDC identity, and there is none here",
            hint=f"in CI, allow the job an identity token (GitHub Actions: `permissions: id-token: write`); "
            f"or pass --identity-token / {IDENTITY_TOKEN_ENV}; or sign with a key",
        )
    return token


def _signing_failure(exc: Exception, shown: str, signer: Signer) -> NeuroncError:
    if signer.method == SIGSTORE and _unreachable(exc):
        return _sigstore_error(exc, f"{shown}: signing")
    if type(exc).__module__.startswith("sigstore.oidc") or type(exc).__name__ in {"IdentityError", "ExpiredIdentity"}:
        return InvalidInputError(
            f"{shown}: Sigstore refused the identity token: {safe_text(short_reason(exc))}",
            hint=f"pass a fresh OIDC token (--identity-token or {IDENTITY_TOKEN_ENV}), or run where ambient "
            "credentials exist (GitHub Actions with `id-token: write`)",
        )
    return NeuroncError(f"{shown}: signing failed: {safe_text(short_reason(exc))}", hint="run with NEURONC_DEBUG=1")


# -- verifying ------------------------------------------------------------------------------------


def verify_signature(bundle_dir: str | os.PathLike[str], trust: TrustRoot) -> SignatureReport:
    """Check ``bundle_dir``'s signature against ``trust``; return what was verified.

    Every file on disk is hashed by model-signing and compared with the signed digests, and the
    signed files must be exactly the manifest's files plus the manifest: a verified signature is
    also a full integrity check. Raises SignatureMissingError (exit 4) for an unsigned bundle,
    SignatureError (exit 4) for one that does not verify, InvalidInputError (exit 2) for a trust
    root that cannot be read, SigstoreUnreachableError (exit 5) when Sigstore cannot be reached.
    """
    start = time.perf_counter()
    shown = safe_text(bundle_dir)
    raw = read_manifest_bytes(bundle_dir)
    manifest = parse_manifest(raw, where=f"{shown}/{MANIFEST_NAME}")
    data = read_signature(bundle_dir)
    if data is None:
        raise SignatureMissingError(
            f"{shown}: the bundle is not signed (no {SIGNATURE_NAME})",
            hint="sign bundles where they are built (`neuronc sign`, or `compile --sign`); see docs/bundles.md",
        )
    where = f"{shown}/{SIGNATURE_NAME}"
    content = parse_signature(data, where=where)
    check_trust(trust)
    if content.method != trust.method:
        raise SignatureError(
            f"{where}: signed with {_article(content.method)}, but {trust.describe()} was given to check it",
            hint=f"verify with {_option_for(content.method)}, or {DO_NOT_DEPLOY}",
        )
    root = Path(os.path.realpath(bundle_dir))
    listed = {f.path for f in manifest.files} | {MANIFEST_NAME, SIGNATURE_NAME}
    unsafe: list[str] = []
    for rel, why in walk_regular(root, MAX_FILES + 1000):
        if why is not None:  # model-signing would refuse them too, less clearly (or block on a FIFO)
            unsafe.append(f"{safe_text(rel)}: {why}")
        elif rel not in listed:
            # Every file, .git/, .github/, .gitattributes and .gitignore included: model-signing's
            # default hashing config ignores those at verify time (hashing.Config, ignore_git_paths).
            unsafe.append(f"{safe_text(rel)}: not signed")
    if unsafe:
        raise SignatureError(
            f"{shown}: holds files its manifest does not list, or that are not regular files",
            details=unsafe[:50],
            hint=DO_NOT_DEPLOY,
        )
    _signing, verifying, hashing = library()
    with tempfile.TemporaryDirectory(prefix="neuronc-verify-") as tmp:
        # The bytes checked above, not whatever stands at bundle.sig by the time the library reads it.
        copy = Path(tmp) / SIGNATURE_NAME
        copy.write_bytes(data)
        try:
            # The hashing config neuronc signs with, git paths included (the library's guess from the
            # signature would skip .git/, .gitignore ...); the signature's own ignore list is added to it.
            hashes = hashing.Config().use_file_serialization(hashing_algorithm="sha256", allow_symlinks=False)
            hashes.set_ignored_paths(paths=[SIGNATURE_NAME], ignore_git_paths=False)
            config = verifying.Config().set_hashing_config(hashes)
            if trust.method == KEY:
                config.use_elliptic_key_verifier(public_key=trust.key)
            elif trust.method == CERTIFICATE:
                config.use_certificate_verifier(certificate_chain=list(trust.certificates))
            else:
                config.use_sigstore_verifier(
                    identity=trust.identity, oidc_issuer=trust.issuer, use_staging=trust.staging
                )
            config.verify(root, copy)
        except NeuroncError:
            raise
        except Exception as exc:  # the library's own exceptions, of many types (module docstring)
            raise _verify_failure(exc, where, trust) from exc
    problems = coverage_problems(content, manifest, raw)
    if problems:
        raise SignatureError(
            f"{where}: the signature does not cover exactly the files the manifest lists",
            details=problems[:50],
            hint=DO_NOT_DEPLOY,
        )
    if trust.method == CERTIFICATE and trust.identity is not None:
        _check_identity(content, trust, where)
    return SignatureReport.of(bundle_dir, content, start, trusted=trust.describe())


def _article(method: str) -> str:
    return {KEY: "a key", CERTIFICATE: "a certificate", SIGSTORE: "Sigstore (keyless)"}.get(method, method)


def _option_for(method: str) -> str:
    return {KEY: "--key PUBLIC.pem", CERTIFICATE: "--certificate ROOT-CA.pem", SIGSTORE: "--identity and --issuer"}[
        method
    ]


def _check_identity(content: SignedContent, trust: TrustRoot, where: str) -> None:
    identities = certificate_identities(content.certificates[0]) if content.certificates else []
    if trust.identity not in identities:
        raise SignatureError(
            f"{where}: signed by {content.signer}, not by {safe_text(trust.identity)}",
            details=[f"the signing certificate names: {', '.join(safe_text(i) for i in identities) or 'nothing'}"],
            hint=DO_NOT_DEPLOY,
        )


def _mismatches(message: str) -> list[str]:
    """model-signing's "Signature mismatch: [...]" list, reworded (it quotes raw digest reprs)."""
    try:
        items = ast.literal_eval(message.split(":", 1)[1].strip())
    except (ValueError, SyntaxError, IndexError):
        return [safe_text(message)]
    if not isinstance(items, list):
        return [safe_text(message)]
    lines: list[str] = []
    for item in items:
        text = str(item)
        if text.startswith("Hash mismatch for '"):
            lines.append(f"{safe_text(text.split(chr(39))[1])}: content differs from what was signed")
        elif text.startswith("Extra files found in model"):
            lines += [f"{safe_text(p.strip())}: not signed" for p in text.split(": ", 1)[-1].split(",")]
        elif text.startswith("Missing files in model"):
            lines += [f"{safe_text(p.strip())}: signed, but missing" for p in text.split(": ", 1)[-1].split(",")]
        else:
            lines.append(safe_text(text))
    return lines


def _verify_failure(exc: Exception, where: str, trust: TrustRoot) -> NeuroncError:
    """One neuronc error for whatever the library raised."""
    if trust.method == SIGSTORE and _unreachable(exc):
        return _sigstore_error(exc, f"{where}: verifying")
    name = type(exc).__name__
    text = str(exc)
    details: list[str] = []
    if isinstance(exc, ValueError) and text.startswith("Signature mismatch"):
        reason, details = "the bundle's files differ from what was signed", _mismatches(text)
    elif isinstance(exc, ValueError) and text.startswith("Key mismatch"):
        reason = f"signed with another key than {trust.describe()}"
    elif name == "InvalidSignature":
        reason = "the signature does not match what it says it signs (forged or damaged)"
    elif name == "X509StoreContextError":
        reason = f"the signing certificate does not chain to {trust.describe()} ({safe_text(short_reason(exc))})"
    elif type(exc).__module__.startswith("sigstore"):
        reason = f"Sigstore verification failed: {safe_text(short_reason(exc))}"
    else:
        reason = f"{safe_text(short_reason(exc))} ({name})"
    return SignatureError(f"{where}: signature does not verify: {reason}", details=details[:50], hint=DO_NOT_DEPLOY)


def signature_required(flag: bool, environ: Mapping[str, str] | None = None) -> bool:
    """``--require-signature`` or ``NEURONC_REQUIRE_SIGNATURE`` (1/true/yes; 0/false/no/empty: off)."""
    from neuronc.bundle.signing_material import REQUIRE_ENV

    if flag:
        return True
    env = os.environ if environ is None else environ
    value = env.get(REQUIRE_ENV, "").strip().lower()
    if value in {"", "0", "false", "no", "off"}:
        return False
    if value in {"1", "true", "yes", "on"}:
        return True
    raise InvalidInputError(f"{REQUIRE_ENV}={safe_text(value, 40)}: expected 1 or 0 (true/false, yes/no)")


__all__ = [
    "INSTALL_HINT",
    "BuiltSignatureJSON",
    "SignatureJSON",
    "SignatureReport",
    "Signer",
    "StoredSignatureJSON",
    "TrustRoot",
    "library",
    "sign_bundle",
    "signature_required",
    "verify_signature",
]
