"""Keys and a small PKI for the signing tests, generated with cryptography (nothing checked in).

``ec_key(dir, curve)`` writes an EC private key and its public key as PEM files;
``ca_chain(dir)`` writes a root CA (P-384), an intermediate CA (P-256, pathlen 0) and a leaf
signing certificate (P-256, KeyUsage digitalSignature, an e-mail SAN), as a CI's private PKI would.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1, "secp256k1": ec.SECP256K1}
SIGNER_EMAIL = "ci-signer@example.com"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


def _write_private(path: Path, key: object, password: bytes | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
    )
    return path


def _write_public(path: Path, key: object) -> Path:
    public = key.public_key()  # type: ignore[attr-defined]
    path.write_bytes(public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


def ec_key(directory: Path, curve: str = "P-256", *, name: str = "signing", password: bytes | None = None) -> KeyPair:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(CURVES[curve]())
    return KeyPair(
        _write_private(directory / f"{name}-key.pem", key, password), _write_public(directory / f"{name}.pub", key)
    )


def other_key(directory: Path, kind: str) -> KeyPair:
    """An Ed25519 or RSA key pair: keys model-signing cannot sign with."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else rsa.generate_private_key(65537, 2048)
    return KeyPair(_write_private(directory / f"{kind}-key.pem", key), _write_public(directory / f"{kind}.pub", key))


@dataclass(frozen=True)
class Pki:
    root: Path
    intermediate: Path
    leaf: Path
    leaf_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str, key: object, issuer: str, issuer_key: object, *, ca: bool, path_length: int | None = None
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()  # type: ignore[attr-defined]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),  # type: ignore[attr-defined]
            critical=False,
        )
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)  # cert + CRL sign
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)  # digitalSignature
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(SIGNER_EMAIL)]), critical=False)
    builder = builder.add_extension(usage, critical=True)
    return builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]


def ca_chain(directory: Path, *, name: str = "acme") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    root_key = ec.generate_private_key(ec.SECP384R1())
    int_key = ec.generate_private_key(ec.SECP256R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    root = _certificate(f"{name} root CA", root_key, f"{name} root CA", root_key, ca=True, path_length=1)
    intermediate = _certificate(f"{name} signing CA", int_key, f"{name} root CA", root_key, ca=True, path_length=0)
    leaf = _certificate(f"{name} CI signer", leaf_key, f"{name} signing CA", int_key, ca=False)
    paths = []
    for file, cert in (("root.pem", root), ("intermediate.pem", intermediate), ("leaf.pem", leaf)):
        (directory / file).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths.append(directory / file)
    return Pki(paths[0], paths[1], paths[2], _write_private(directory / "leaf-key.pem", leaf_key))


def model_signing_cli() -> list[str]:
    """model-signing's own command line (its console script beside this interpreter, else on PATH)."""
    beside = Path(sys.executable).parent / "model_signing"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("model_signing")
    return [found] if found else [sys.executable, "-m", "model_signing"]


def model_signing_verify(bundle: Path, *method: str) -> subprocess.CompletedProcess[str]:
    """``model_signing verify METHOD BUNDLE --signature BUNDLE/bundle.sig ...``: exit 0 when it verifies."""
    kind, *options = method
    return subprocess.run(
        [*model_signing_cli(), "verify", kind, str(bundle), "--signature", str(bundle / "bundle.sig"), *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
