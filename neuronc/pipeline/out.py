"""``--out``: a copy of a published bundle where the user wants it, placed atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from neuronc.errors import InvalidInputError, is_disk_full
from neuronc.pipeline.report import BuildReport


def bundle_dirname(report: BuildReport) -> str:
    """``<model-name>-b<batch>-<hash12>``: a readable, unique directory name for ``--out`` runs."""
    model = report.model.rstrip("/").split("/")[-1] or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    suffix = f"-{report.build_index}" if report.matrix else ""
    return f"{safe}{suffix}-{(report.config_hash or 'unknown')[:12]}"


def copy_bundle(bundle: Path, dest: Path) -> None:
    """Copy a published bundle to ``dest`` atomically; replace an older bundle, never other data.

    A full disk is a DiskFullError (exit 5) naming ``dest`` and the bundle's size; nothing is left
    half-copied and an older bundle at ``dest`` stays as it was.
    """
    from neuronc.fsutil import check_free_space, disk_full_error

    dest = dest.absolute()
    if dest.exists():
        if not dest.is_dir():
            raise InvalidInputError(f"--out {dest}: exists and is not a directory")
        if any(dest.iterdir()) and not (dest / "manifest.json").is_file():
            msg = f"--out {dest}: directory is not empty and is not a bundle; refusing to overwrite it"
            raise InvalidInputError(msg, hint="choose an empty or new directory")
    needed = _tree_bytes(bundle)
    dest.parent.mkdir(parents=True, exist_ok=True)
    check_free_space(dest.parent, needed, what=f"a copy of bundle {bundle.name}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    old: Path | None = None
    try:
        shutil.copytree(bundle, tmp, dirs_exist_ok=True, symlinks=True)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
        os.replace(tmp, dest)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not dest.exists():
            os.replace(old, dest)
            old = None
        if is_disk_full(exc):
            raise disk_full_error(dest, needed, exc) from None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
