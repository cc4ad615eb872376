"""``--out``: a copy of a published bundle where the user wants it, placed atomically."""

from __future__ import annotations

from pathlib import Path

from neuronc.errors import InvalidInputError
from neuronc.spec import BuildSpec


def bundle_dirname(spec: BuildSpec, config_hash: str) -> str:
    """``<model-name>[-<build>]-<hash12>``: a readable, unique directory name for ``--out`` runs."""
    model = spec.model.id.rstrip("/").split("/")[-1] or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    suffix = f"-{spec.build_index}" if spec.matrix_values else ""
    return f"{safe}{suffix}-{config_hash[:12]}"


def place_bundle(bundle: Path, dest: Path) -> Path:
    """Copy a published bundle to ``dest`` atomically; replace an older bundle there, never other data.

    The copy goes through ``neuronc.bundle.copy_bundle`` (staging beside ``dest``, every file hashed
    as it lands and checked against the manifest, fsync, rename). A full disk is a DiskFullError
    (exit 5) naming ``dest``; nothing is left half-copied and an older bundle at ``dest`` stays.
    """
    from neuronc.bundle import MANIFEST_NAME, copy_bundle

    dest = dest.absolute()
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise InvalidInputError(f"--out {dest}: exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MANIFEST_NAME).is_file():
        msg = f"--out {dest}: directory is not empty and is not a bundle; refusing to overwrite it"
        raise InvalidInputError(msg, hint="choose an empty or new directory")
    return copy_bundle(bundle, dest, overwrite=True)
