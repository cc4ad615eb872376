"""What signs a bundle (``Signer``) and what a verifier trusts (``TrustRoot``), from options or the environment.

Keys and certificates are read and checked here, with cryptography, before the model-signing
library sees them, so that a wrong file is a clear exit 2 naming it: model-signing signs with EC
keys on the NIST curves P-256, P-384 and P-521 only (an Ed25519 or RSA key fails inside it with an
AttributeError). Nothing here imports model-signing.

The environment a CI job sets (docs/bundles.md):

* signing (``compile --sign``, ``store publish --sign``; defaults of ``neuronc sign``):
  ``NEURONC_SIGNING_KEY`` (EC private key, PEM), ``NEURONC_SIGNING_CERT`` and
  ``NEURONC_SIGNING_CHAIN`` (certificate mode; the chain is one or more PEM files separated by
  ``:``), ``NEURONC_SIGNING_SIGSTORE=1`` (keyless), ``NEURONC_SIGNING_KEY_PASSWORD`` (an encrypted
  key), ``SIGSTORE_IDENTITY_TOKEN`` (an OIDC token for keyless signing);
* verifying (``verify``, ``deploy``, ``store fetch``): ``NEURONC_REQUIRE_SIGNATURE=1`` and one trust
  root: ``NEURONC_SIGNATURE_KEY`` (EC public key, PEM), ``NEURONC_SIGNATURE_CERT`` (root CA
  certificates, PEM; ``NEURONC_SIGNATURE_IDENTITY`` then pins the signing certificate's name), or
  ``NEURONC_SIGNATURE_IDENTITY`` with ``NEURONC_SIGNATURE_ISSUER`` (Sigstore).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.bundle.signature import CERTIFICATE, KEY, SIGSTORE
from neuronc.errors import MISSING_LIBRARY, InvalidInputError, safe_text

SIGNING_KEY_ENV = "NEURONC_SIGNING_KEY"
SIGNING_CERT_ENV = "NEURONC_SIGNING_CERT"
SIGNING_CHAIN_ENV = "NEURONC_SIGNING_CHAIN"
SIGNING_SIGSTORE_ENV = "NEURONC_SIGNING_SIGSTORE"
SIGNING_PASSWORD_ENV = "NEURONC_SIGNING_KEY_PASSWORD"
IDENTITY_TOKEN_ENV = "SIGSTORE_IDENTITY_TOKEN"
REQUIRE_ENV = "NEURONC_REQUIRE_SIGNATURE"
TRUST_KEY_ENV = "NEURONC_SIGNATURE_KEY"
TRUST_CERT_ENV = "NEURONC_SIGNATURE_CERT"
TRUST_IDENTITY_ENV = "NEURONC_SIGNATURE_IDENTITY"
TRUST_ISSUER_ENV = "NEURONC_SIGNATURE_ISSUER"

CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
MAX_PEM_BYTES = 1024 * 1024
INSTALL_HINT = "pip install 'neuronc[sign]'  (model-signing and pyOpenSSL)"
KEY_HINT = "make one with `openssl ecparam -name prime256v1 -genkey -noout -out signing-key.pem` (P-256)"


@dataclass(frozen=True)
class Signer:
    """How to sign: ``key`` (EC private key), ``certificate`` (key + certificate + chain) or ``sigstore``."""

    method: str
    key: Path | None = None
    certificate: Path | None = None
    chain: tuple[Path, ...] = ()
    identity_token: str | None = None
    staging: bool = False

    @classmethod
    def choose(
        cls,
        *,
        key: Path | None = None,
        certificate: Path | None = None,
        chain: Sequence[Path] = (),
        sigstore: bool = False,
        identity_token: str | None = None,
        staging: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> Signer:
        """The signer the options name; without any, the one the NEURONC_SIGNING_* variables name (exit 2 if none)."""
        env = os.environ if environ is None else environ
        token = identity_token or env.get(IDENTITY_TOKEN_ENV) or None
        if not (key or certificate or chain or sigstore):
            key = _env_path(env, SIGNING_KEY_ENV)
            certificate = _env_path(env, SIGNING_CERT_ENV)
            chain = [Path(p) for p in env.get(SIGNING_CHAIN_ENV, "").split(os.pathsep) if p]
            sigstore = env.get(SIGNING_SIGSTORE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
            origin = f"{SIGNING_KEY_ENV}, {SIGNING_CERT_ENV}, {SIGNING_SIGSTORE_ENV}"
        else:
            origin = "--key, --certificate, --sigstore"
        if sigstore:
            if key or certificate or chain:
                raise InvalidInputError(f"keyless (Sigstore) signing takes no key or certificate ({origin})")
            return cls(SIGSTORE, identity_token=token, staging=staging)
        if identity_token or staging:
            raise InvalidInputError("--identity-token and --sigstore-staging go with --sigstore")
        if key is None:
            raise InvalidInputError(
                "nothing to sign with: give a private key, a certificate and its key, or Sigstore",
                hint=f"neuronc sign BUNDLE --key signing-key.pem (or set {SIGNING_KEY_ENV}); {KEY_HINT}",
            )
        if certificate is not None:
            if not chain:
                raise InvalidInputError(
                    "certificate signing needs the issuing CA certificates (--chain, or " + SIGNING_CHAIN_ENV + ")",
                    hint="pass the intermediate and root certificates that issued --certificate",
                )
            return cls(CERTIFICATE, key=key, certificate=certificate, chain=tuple(chain))
        if chain:
            raise InvalidInputError("--chain goes with --certificate")
        return cls(KEY, key=key)

    def describe(self) -> str:
        if self.method == SIGSTORE:
            return "Sigstore keyless" + (" (staging)" if self.staging else "")
        if self.method == CERTIFICATE:
            return f"certificate {self.certificate}"
        return f"key {self.key}"


@dataclass(frozen=True)
class TrustRoot:
    """What a signature must chain to: an EC public key, root CA certificates, or a Sigstore identity."""

    method: str
    key: Path | None = None
    certificates: tuple[Path, ...] = ()
    identity: str | None = None
    issuer: str | None = None
    staging: bool = False

    @classmethod
    def choose(
        cls,
        *,
        key: Path | None = None,
        certificates: Sequence[Path] = (),
        identity: str | None = None,
        issuer: str | None = None,
        staging: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> TrustRoot | None:
        """The trust root the options name or, when none is, the NEURONC_SIGNATURE_* variables; None if neither."""
        env = os.environ if environ is None else environ
        if not (key or certificates or identity or issuer):
            key = _env_path(env, TRUST_KEY_ENV)
            certificates = [Path(p) for p in env.get(TRUST_CERT_ENV, "").split(os.pathsep) if p]
            identity = env.get(TRUST_IDENTITY_ENV) or None
            issuer = env.get(TRUST_ISSUER_ENV) or None
        if key is not None:
            if certificates or identity or issuer:
                msg = "a public key is a trust root by itself: give --key, or --certificate, or --identity"
                raise InvalidInputError(msg)
            return cls(KEY, key=key)
        if certificates:
            if issuer:
                msg = "--issuer is for Sigstore; with --certificate, --identity pins the signer's name"
                raise InvalidInputError(msg)
            return cls(CERTIFICATE, certificates=tuple(certificates), identity=identity)
        if identity or issuer:
            if not (identity and issuer):
                raise InvalidInputError(
                    "Sigstore verification needs both --identity and --issuer",
                    hint="e.g. --identity https://github.com/acme/models/.github/workflows/build.yml@refs/heads/main "
                    "--issuer https://token.actions.githubusercontent.com",
                )
            return cls(SIGSTORE, identity=identity, issuer=issuer, staging=staging)
        return None

    def describe(self) -> str:
        if self.method == KEY:
            return f"public key {self.key}"
        if self.method == CERTIFICATE:
            names = ", ".join(str(c) for c in self.certificates)
            return f"root certificate {names}" + (f" (signer {self.identity})" if self.identity else "")
        return f"Sigstore identity {self.identity} (issuer {self.issuer})"

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "key": str(self.key) if self.key else None,
            "certificates": [str(c) for c in self.certificates],
            "identity": self.identity,
            "issuer": self.issuer,
        }


def no_trust_root() -> InvalidInputError:
    return InvalidInputError(
        "a signature check needs something to trust: --key, --certificate, or --identity with --issuer",
        hint=f"or set {TRUST_KEY_ENV}, {TRUST_CERT_ENV}, or {TRUST_IDENTITY_ENV} and {TRUST_ISSUER_ENV}",
    )


def _env_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "")
    return Path(value) if value else None


def signing_password(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The private key's password from NEURONC_SIGNING_KEY_PASSWORD (never a command-line argument)."""
    env = os.environ if environ is None else environ
    value = env.get(SIGNING_PASSWORD_ENV)
    return value.encode("utf-8") if value else None


def _read_pem(path: Path, what: str) -> bytes:
    from neuronc.fsutil import NotRegularFileError, read_bytes_limited

    try:
        return read_bytes_limited(path, MAX_PEM_BYTES, what=what)
    except FileNotFoundError:
        raise InvalidInputError(f"{safe_text(path)}: no such {what}") from None
    except (PermissionError, IsADirectoryError, NotRegularFileError) as exc:
        reason = exc.message if isinstance(exc, NotRegularFileError) else exc.strerror
        raise InvalidInputError(f"{safe_text(path)}: cannot read the {what}: {reason}") from None


def _check_curve(key: Any, path: Path, what: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and key.curve.name in CURVES:
        return
    name = type(key).__name__.lstrip("_").removesuffix("PrivateKey").removesuffix("PublicKey")
    kind = f"EC {key.curve.name}" if hasattr(key, "curve") else name
    raise InvalidInputError(
        f"{safe_text(path)}: the {what} is {safe_text(kind)}; model-signing signs with EC keys on P-256, "
        "P-384 or P-521 only",
        hint=KEY_HINT,
    )


def load_private_key(path: Path, password: bytes | None) -> Any:
    """The EC private key at ``path`` (exit 2 naming the file when it is missing, unreadable or another kind)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _read_pem(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError:  # encrypted without a password given, or a password for a key that has none
        state = "encrypted" if password is None else "not encrypted"
        raise InvalidInputError(
            f"{safe_text(path)}: the private key is {state}",
            hint=f"set {SIGNING_PASSWORD_ENV} to its password" if password is None else f"unset {SIGNING_PASSWORD_ENV}",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidInputError(
            f"{safe_text(path)}: not a PEM private key, or the password ({SIGNING_PASSWORD_ENV}) is wrong",
            hint=KEY_HINT,
        ) from None
    _check_curve(key, path, "private key")
    return key


def _load_certificates(path: Path, what: str) -> list[Any]:
    from cryptography import x509

    data = _read_pem(path, what)
    try:
        found = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise InvalidInputError(f"{safe_text(path)}: not a PEM certificate ({what})") from None
    return list(found)


def require_sign_extra() -> None:
    """Exit 5 with the install hint unless the ``sign`` extra is here: model-signing and the
    ``cryptography`` package it brings (read keys and certificates with), as a missing backend is."""
    import importlib

    for module in ("cryptography.x509", "model_signing"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MISSING_LIBRARY.convert(
                exc, "signing and checking signatures needs the sign extra", hint=INSTALL_HINT
            ) from None


def signer_trust(signer: Signer, directory: Path, password: bytes | None) -> TrustRoot | None:
    """What checks a signature ``signer`` made, so that a bundle it did not just build is trusted only
    when it carries the signer's own valid signature: a key's public key (written to ``directory``),
    a certificate's chain (its self-signed root must be in ``--chain``/NEURONC_SIGNING_CHAIN; the
    caller also compares the signing certificate). Keyless: the Sigstore identity and issuer
    NEURONC_SIGNATURE_IDENTITY/_ISSUER name; None when they name none."""
    if signer.method == KEY:
        from cryptography.hazmat.primitives import serialization

        assert signer.key is not None
        public = load_private_key(signer.key, password).public_key()
        path = directory / "signer.pub"
        spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        path.write_bytes(public.public_bytes(*spki))
        return TrustRoot(KEY, key=path)
    if signer.method == CERTIFICATE:
        return TrustRoot(CERTIFICATE, certificates=signer.chain)
    trust = TrustRoot.choose(staging=signer.staging)
    return trust if trust is not None and trust.method == SIGSTORE else None


def certificate_der(path: Path) -> bytes:
    """The first certificate of the PEM file at ``path``, DER-encoded (to compare with a signature's)."""
    from cryptography.hazmat.primitives import serialization

    der: bytes = _load_certificates(path, "signing certificate")[0].public_bytes(serialization.Encoding.DER)
    return der


def check_signer(signer: Signer, password: bytes | None) -> None:
    """Read and check the signer's key, certificate and chain (exit 2 naming a file that cannot be used;
    exit 5 without the sign extra)."""
    require_sign_extra()
    if signer.method == SIGSTORE:
        return
    assert signer.key is not None
    key = load_private_key(signer.key, password)
    if signer.method != CERTIFICATE:
        return
    from cryptography.hazmat.primitives import serialization

    assert signer.certificate is not None
    leaf = _load_certificates(signer.certificate, "signing certificate")[0]
    spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise InvalidInputError(f"{safe_text(signer.certificate)}: the certificate is not for the key {signer.key}")
    for path in signer.chain:
        _load_certificates(path, "CA certificate")


def check_trust(trust: TrustRoot) -> None:
    """Read and check the trust root's files (exit 2 naming one that cannot be used; exit 5 without
    the sign extra)."""
    require_sign_extra()
    if trust.method == KEY:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        assert trust.key is not None
        data = _read_pem(trust.key, "public key")
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            hint = "the public key of the signing key: openssl ec -in signing-key.pem -pubout -out signing-key.pub"
            raise InvalidInputError(f"{safe_text(trust.key)}: not a PEM public key", hint=hint) from None
        _check_curve(key, trust.key, "public key")
    elif trust.method == CERTIFICATE:
        for path in trust.certificates:
            _load_certificates(path, "root certificate")


__all__ = [
    "IDENTITY_TOKEN_ENV",
    "INSTALL_HINT",
    "REQUIRE_ENV",
    "SIGNING_CERT_ENV",
    "SIGNING_CHAIN_ENV",
    "SIGNING_KEY_ENV",
    "SIGNING_PASSWORD_ENV",
    "SIGNING_SIGSTORE_ENV",
    "TRUST_CERT_ENV",
    "TRUST_IDENTITY_ENV",
    "TRUST_ISSUER_ENV",
    "TRUST_KEY_ENV",
    "Signer",
    "TrustRoot",
    "certificate_der",
    "check_signer",
    "check_trust",
    "load_private_key",
    "no_trust_root",
    "require_sign_extra",
    "signer_trust",
    "signing_password",
]
