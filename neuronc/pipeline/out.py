"""``--out``: a copy of a published bundle where the user wants it, placed atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.errors import InvalidInputError
from neuronc.spec import BuildSpec

if TYPE_CHECKING:
    from neuronc.bundle.signing_material import TrustRoot


def bundle_dirname(spec: BuildSpec, config_hash: str) -> str:
    """``<model-name>[-<build>]-<hash12>``: a readable, unique directory name for ``--out`` runs."""
    model = spec.model.id.rstrip("/").split("/")[-1] or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    suffix = f"-{spec.build_index}" if spec.matrix_values else ""
    return f"{safe}{suffix}-{config_hash[:12]}"


def place_bundle(bundle: Path, dest: Path, *, signature_checked: bool = False) -> Path:
    """Copy a published bundle to ``dest`` atomically; replace an older bundle there, never other data.

    The copy goes through ``neuronc.bundle.copy_bundle`` (staging beside ``dest``, every file hashed
    as it lands and checked against the manifest, fsync, rename). A full disk is a DiskFullError
    (exit 5) naming ``dest``; nothing is left half-copied and an older bundle at ``dest`` stays.

    A bundle handed out of a store is checked first when a signature is required
    (NEURONC_REQUIRE_SIGNATURE=1, against the NEURONC_SIGNATURE_* trust root): a refused bundle
    (exit 4) never reaches ``dest``. ``signature_checked``: the caller checked it already (`store
    fetch`) or built it in this run (not out of a store).
    """
    from neuronc.bundle import MANIFEST_NAME, copy_bundle

    dest = dest.absolute()
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise InvalidInputError(f"--out {dest}: exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MANIFEST_NAME).is_file():
        msg = f"--out {dest}: directory is not empty and is not a bundle; refusing to overwrite it"
        raise InvalidInputError(msg, hint="choose an empty or new directory")
    if not signature_checked:
        check_required_signature(bundle)
    return copy_bundle(bundle, dest, overwrite=True)


def check_required_signature(bundle: Path) -> None:
    """When NEURONC_REQUIRE_SIGNATURE is on: the bundle's signature, checked against the trust root the
    NEURONC_SIGNATURE_* variables name (exit 2 when they name none; exit 4 when it does not verify)."""
    from neuronc.bundle.signing import signature_required

    if not signature_required(False):
        return
    from neuronc.bundle.signing import verify_signature

    verify_signature(bundle, required_trust())


def required_trust() -> TrustRoot:
    """The trust root a required signature is checked against (NEURONC_SIGNATURE_*), read and checked."""
    from neuronc.bundle.signing_material import TrustRoot, check_trust, no_trust_root

    trust = TrustRoot.choose()
    if trust is None:
        raise no_trust_root()
    check_trust(trust)
    return trust
