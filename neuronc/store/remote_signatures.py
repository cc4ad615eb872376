"""Bundle signatures in a remote store: one small file per signed manifest, named by the manifest's SHA-256.

Layout::

    <root>/<model-slug>/<toolchain-label>/<config-hash[:16]>/manifest.json
    <root>/<model-slug>/<toolchain-label>/<config-hash[:16]>/signatures/<sha256 of manifest.json>.sig

A signature covers one manifest's exact bytes, so it is stored under their digest: two publishers
of one key (their manifests differ, compiles are not bit-reproducible) never overwrite each other's
signature, and a manifest rewritten in the store (re-sealed) finds no signature under its new
digest. A publisher uploads the signature before the manifest, so a signed bundle never appears
unsigned. A reader that fetches a bundle fetches the signature named by the manifest it fetched
and puts it in the local copy as ``bundle.sig``, where ``neuronc verify --signature`` checks it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.bundle import Manifest
from neuronc.bundle.signature import read_signature, remove_signature, signature_limit, write_signature
from neuronc.errors import SignatureError
from neuronc.store.remote_io import FsOp

if TYPE_CHECKING:
    from neuronc.store.remote_io import RemoteIO

SIGNATURES_DIR = "signatures"


def signature_rel(rel: str, manifest_raw: bytes) -> str:
    """Where the signature of the manifest ``manifest_raw`` of bundle ``rel`` is stored."""
    return f"{rel}/{SIGNATURES_DIR}/{hashlib.sha256(manifest_raw).hexdigest()}.sig"


def read_stored_signature(io: RemoteIO, rel: str, manifest: Manifest, manifest_raw: bytes) -> bytes | None:
    """The stored signature of this manifest, or None. Reads no more than an honest signature of its
    files can have (``signature_limit``): a larger file reaches the local copy cut short, where it
    fails to parse, and the bundle counts as wrongly signed."""
    found = io.call(
        "reading the signature",
        FsOp.CAT_FILE,
        io.path(signature_rel(rel, manifest_raw)),
        start=0,
        end=signature_limit(manifest) + 1,
        missing_ok=True,
    )
    return found if isinstance(found, bytes) else None


def upload_signature(io: RemoteIO, rel: str, manifest_raw: bytes, data: bytes) -> str:
    """Store ``data`` as the signature of this manifest; return its URL."""
    path = signature_rel(rel, manifest_raw)
    io.call("writing the signature", FsOp.PIPE_FILE, io.path(path), data, size=len(data))
    return f"{io.url.url}/{path}"


def sync_signature(io: RemoteIO, rel: str, manifest: Manifest, manifest_raw: bytes, bundle: Path) -> None:
    """Make the local copy's ``bundle.sig`` the stored signature of its manifest (none: no file)."""
    stored = read_stored_signature(io, rel, manifest, manifest_raw)
    if stored is None:
        remove_signature(bundle)
        return
    try:
        current = read_signature(bundle)
    except (SignatureError, OSError):  # an oversized or unsafe local file: replaced like any stale copy
        current = None
    if current != stored:
        write_signature(bundle, stored)


__all__ = ["SIGNATURES_DIR", "read_stored_signature", "signature_rel", "sync_signature", "upload_signature"]
