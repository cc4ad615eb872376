"""A bundle's signature file: where it lives, how it is read and written, what it says it covers.

The signature is an OpenSSF model-signing signature (a Sigstore bundle, JSON) stored as
``bundle.sig`` beside ``manifest.json``. It is the one file a bundle may hold that its manifest does
not list (it cannot list it: the signature covers the manifest). Signing and verifying with the
model-signing library are in ``neuronc.bundle.signing``; this module only reads the file's JSON and
imports nothing heavy, so that stores and ``verify`` can carry a signature without loading the
library.

What a signature covers (checked after the library has verified it): an in-toto statement whose
resources are every file with its SHA-256, manifest.json included. ``coverage_problems`` checks
that these are exactly the files the manifest lists, with the manifest's digests, plus the manifest
itself: a signature over some other set of files proves nothing about this bundle.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.bundle._manifest import MANIFEST_NAME, MAX_FILES, SIGNATURE_FILE, Manifest, safe_text
from neuronc.bundle.fs import MissingEntry, UnsafeEntry, open_in_bundle, open_root
from neuronc.errors import SignatureError
from neuronc.fsutil import read_fd_upto

SIGNATURE_NAME = SIGNATURE_FILE
# The statement lists every file (about 150 bytes of JSON each, base64-encoded in the envelope).
MAX_SIGNATURE_BYTES = 1024 * 1024 + MAX_FILES * 400
PREDICATE_TYPE = "https://model_signing/signature/v1.0"

# Signing methods, as the verification material says (and as `neuronc sign` names them).
KEY = "key"
CERTIFICATE = "certificate"
SIGSTORE = "sigstore"


def signature_limit(manifest: Manifest) -> int:
    """The most bytes an honest signature of this manifest's files can have: each file is one entry
    of its path, algorithm and digest (about 120 bytes of JSON besides the path), base64-encoded
    (4/3) in the envelope, plus the certificates. What a remote store may make a reader download."""
    entries = sum(len(f.path.encode("utf-8")) + 160 for f in manifest.files) + 200
    return min(MAX_SIGNATURE_BYTES, 64 * 1024 + 2 * entries)


def read_signature(bundle_dir: str | os.PathLike[str]) -> bytes | None:
    """The bytes of the bundle's signature file, or None when it has none.

    Never follows a symlink or opens a FIFO (SignatureError, exit 4: a signature that is not a
    regular file is not a signature); refuses more than MAX_SIGNATURE_BYTES.
    """
    root = Path(os.path.realpath(bundle_dir))
    root_fd = open_root(root)
    try:
        fd = open_in_bundle(root_fd, SIGNATURE_NAME, root)
    except MissingEntry:
        return None
    except UnsafeEntry as exc:
        raise SignatureError(f"{safe_text(bundle_dir)}/{SIGNATURE_NAME}: {exc}") from None
    finally:
        os.close(root_fd)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_SIGNATURE_BYTES:
            shown = f"{safe_text(bundle_dir)}/{SIGNATURE_NAME}"
            msg = f"{shown}: {size} bytes; no signature is larger than {MAX_SIGNATURE_BYTES}"
            raise SignatureError(msg)
        data = read_fd_upto(fd, MAX_SIGNATURE_BYTES)
    finally:
        os.close(fd)
    if len(data) > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"{safe_text(bundle_dir)}/{SIGNATURE_NAME}: grew past {MAX_SIGNATURE_BYTES} bytes")
    return data


def write_signature(bundle_dir: str | os.PathLike[str], data: bytes) -> Path:
    """Put ``data`` in the bundle as its signature file, atomically (a reader sees the old one or the new one).

    A bundle that cannot be written (read-only, no permission) is exit 2 naming it; a full disk exit 5.
    """
    from neuronc.fsutil import atomic_write_bytes, output_error

    target = Path(bundle_dir) / SIGNATURE_NAME
    try:
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):
            # What a store handed over may have planted a link here: replace it, never write through it.
            os.unlink(target)
        atomic_write_bytes(target, data)
    except OSError as exc:  # a full disk is already a DiskFullError (exit 5) from atomic_write_bytes
        raise output_error(target, exc, what="the signature") from None
    return target


def remove_signature(bundle_dir: str | os.PathLike[str]) -> None:
    """Remove the bundle's signature file, if it has one."""
    Path(bundle_dir, SIGNATURE_NAME).unlink(missing_ok=True)


@dataclass(frozen=True)
class SignedContent:
    """What a signature file says, read without checking it (``neuronc.bundle.signing`` checks it).

    ``resources`` maps each signed path to its SHA-256; ``signer`` describes who signed: a key's
    hint, a certificate's subject, or a Sigstore identity; ``certificates`` are DER, leaf first.
    """

    method: str
    resources: dict[str, str]
    serialization: dict[str, Any]
    signer: str
    certificates: list[bytes] = field(default_factory=list)


def _field(value: Any, key: str, kind: type, where: str) -> Any:
    found = value.get(key) if isinstance(value, dict) else None
    if not isinstance(found, kind):
        raise SignatureError(f"{where}: not a model-signing signature (no {key!r})")
    return found


def _b64(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise SignatureError(f"{where}: not a model-signing signature (base64 field is not text)")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{where}: not a model-signing signature (invalid base64)") from None


def parse_signature(raw: bytes, *, where: str = SIGNATURE_NAME) -> SignedContent:
    """Read a signature file's JSON: its method, signer and the files it lists (SignatureError if malformed)."""
    from neuronc.jsonfile import InvalidJsonError, parse_json

    try:
        document = parse_json(raw, where=where, max_bytes=MAX_SIGNATURE_BYTES, max_depth=32)
        material = _field(document, "verificationMaterial", dict, where)
        envelope = _field(document, "dsseEnvelope", dict, where)
        statement = parse_json(
            _b64(envelope.get("payload"), where), where=f"{where} (payload)", max_bytes=MAX_SIGNATURE_BYTES
        )
    except InvalidJsonError as exc:
        raise SignatureError(exc.message) from None
    predicate = _field(statement, "predicate", dict, where)
    if statement.get("predicateType") != PREDICATE_TYPE:
        kind = safe_text(statement.get("predicateType"))
        raise SignatureError(f"{where}: not a model-signing signature (predicate type {kind})")
    serialization = _field(predicate, "serialization", dict, where)
    resources: dict[str, str] = {}
    for item in _field(predicate, "resources", list, where):
        fields = item if isinstance(item, dict) else {}
        name, algorithm, digest = (fields.get(k) for k in ("name", "algorithm", "digest"))
        if not isinstance(name, str) or not isinstance(digest, str) or not isinstance(algorithm, str):
            raise SignatureError(f"{where}: a signed resource without a name, algorithm or digest")
        if name in resources:
            raise SignatureError(f"{where}: {safe_text(name)} is signed twice")
        resources[name] = f"{algorithm}:{digest}"
    certificates: list[bytes] = []
    if isinstance(material.get("publicKey"), dict):
        # The hint is the SHA-256 of the public key (PEM): its first 16 digits name the key for people.
        method, signer = KEY, f"key sha256:{safe_text(material['publicKey'].get('hint'), 80)[:16]}"
    elif isinstance(material.get("x509CertificateChain"), dict):
        chain = _field(material["x509CertificateChain"], "certificates", list, where)
        certificates = [_b64(c.get("rawBytes") if isinstance(c, dict) else None, where) for c in chain]
        method, signer = CERTIFICATE, describe_certificate(certificates[0]) if certificates else "certificate"
    elif isinstance(material.get("certificate"), dict):
        certificates = [_b64(material["certificate"].get("rawBytes"), where)]
        method, signer = SIGSTORE, describe_certificate(certificates[0])
    else:
        raise SignatureError(f"{where}: not a model-signing signature (no key or certificate in it)")
    return SignedContent(method, resources, dict(serialization), signer, certificates)


def certificate_identities(der: bytes) -> list[str]:
    """A certificate's identities: its subject alternative names (e-mail, URI, DNS) and subject CN."""
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID
    except ImportError:  # comes with the sign extra; without it a signer is shown by fingerprint only
        return []
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return []
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        for kind in (x509.RFC822Name, x509.UniformResourceIdentifier, x509.DNSName):
            names += [str(v) for v in san.get_values_for_type(kind)]
    except x509.ExtensionNotFound:
        pass
    names += [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return names


def describe_certificate(der: bytes) -> str:
    """``certificate <identity> (sha256 <fingerprint[:16]>)`` for people."""
    identities = certificate_identities(der)
    who = safe_text(identities[0], 120) if identities else "without a name"
    return f"certificate {who} (sha256 {hashlib.sha256(der).hexdigest()[:16]})"


def coverage_problems(content: SignedContent, manifest: Manifest, manifest_raw: bytes) -> list[str]:
    """Why the signed files are not exactly the manifest's files and the manifest itself (empty: they are)."""
    problems: list[str] = []
    if content.serialization.get("method") != "files" or content.serialization.get("hash_type") != "sha256":
        how = f"{content.serialization.get('method')}/{content.serialization.get('hash_type')}"
        problems.append(f"signed as {safe_text(how)}; neuronc signs files with SHA-256 (the manifest's digests)")
        return problems
    expected = {f.path: f"sha256:{f.sha256}" for f in manifest.files}
    expected[MANIFEST_NAME] = f"sha256:{hashlib.sha256(manifest_raw).hexdigest()}"
    for path in sorted(set(expected) - set(content.resources)):
        problems.append(f"{safe_text(path)}: listed in the manifest but not signed")
    for path in sorted(set(content.resources) - set(expected)):
        problems.append(f"{safe_text(path)}: signed but not listed in the manifest")
    for path in sorted(set(expected) & set(content.resources)):
        if expected[path] != content.resources[path]:
            problems.append(f"{safe_text(path)}: the signed SHA-256 differs from the manifest's")
    return problems


__all__ = [
    "CERTIFICATE",
    "KEY",
    "MAX_SIGNATURE_BYTES",
    "SIGNATURE_NAME",
    "SIGSTORE",
    "SignedContent",
    "certificate_identities",
    "coverage_problems",
    "describe_certificate",
    "parse_signature",
    "read_signature",
    "remove_signature",
    "signature_limit",
    "write_signature",
]
