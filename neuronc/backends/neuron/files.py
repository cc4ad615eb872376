"""Files the Neuron backends put into a bundle, and what they read from the checkpoint and the manifest.

Checkpoint files go into ``artifacts/`` as hard links where possible (the Hugging Face cache stores
symlinks to blobs: the link goes to the resolved file, so bundles hold regular files only).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.backends.base import CompiledGraph, CompileJob, GraphSpec
from neuronc.bundle import BUNDLE_PLACEHOLDER
from neuronc.errors import InvalidInputError
from neuronc.model.files import MODEL_FILES, local_model_dir, read_model_config

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec


def link_or_copy(src: Path, dst: Path) -> None:
    """Put ``src``'s bytes at ``dst`` as a regular file: a hard link when possible, else a copy."""
    real = src.resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(real, dst)
    except OSError:
        shutil.copy2(real, dst)


def checkpoint_weight_files(checkpoint_dir: Path) -> list[Path]:
    """The safetensors files of a Hugging Face checkpoint (and their index), sorted."""
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        msg = f"{checkpoint_dir}: no *.safetensors weights found"
        raise InvalidInputError(msg, hint="Neuron backends read safetensors checkpoints")
    files += sorted(checkpoint_dir.glob("*.safetensors.index.json"))
    return files


def copy_checkpoint(checkpoint_dir: Path, dest: Path, *, with_config: bool = True) -> list[str]:
    """Place a checkpoint's safetensors (and config/tokenizer files) in ``dest``; returns the names."""
    names: list[str] = []
    for path in checkpoint_weight_files(checkpoint_dir):
        link_or_copy(path, dest / path.name)
        names.append(path.name)
    if with_config:
        names += copy_tokenizer_files(checkpoint_dir, dest)
    return names


def copy_tokenizer_files(checkpoint_dir: Path, dest: Path) -> list[str]:
    """Copy config, generation config and tokenizer files that exist in the checkpoint into ``dest``."""
    names = []
    for name in MODEL_FILES:
        src = checkpoint_dir / name
        if src.is_file() and not (dest / name).exists():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src.resolve(), dest / name)
            names.append(name)
    return names


def model_type_of(checkpoint_dir: Path) -> str:
    config = read_model_config(checkpoint_dir) or {}
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        msg = f"{checkpoint_dir / 'config.json'}: no model_type"
        raise InvalidInputError(msg)
    return model_type


def model_type_for_checks(spec: BuildSpec) -> str | None:
    """The model's ``model_type`` when its config.json is on this machine (validate time), else None."""
    from neuronc.model.files import find_model_config

    base = Path(spec.profile_path).parent if spec.profile_path else None
    config = find_model_config(spec.model.id, spec.model.revision, base)
    model_type = (config or {}).get("model_type")
    return model_type if isinstance(model_type, str) else None


def hub_revision_of(checkpoint_dir: Path, spec: BuildSpec) -> str | None:
    """The commit a hub snapshot directory was downloaded at (``.../snapshots/<sha>``), else the profile's."""
    if checkpoint_dir.parent.name == "snapshots" and len(checkpoint_dir.name) == 40:
        return checkpoint_dir.name
    return spec.model.revision


def is_hub_id(spec: BuildSpec) -> bool:
    """Whether the profile names a Hub repository rather than a local directory."""
    base = Path(spec.profile_path).parent if spec.profile_path else None
    return local_model_dir(spec.model.id, base) is None


def even_split(graphs: Sequence[GraphSpec], artifact: str, seconds: float) -> list[CompiledGraph]:
    """Per-graph records when one SDK call compiled every graph into one artifact."""
    each = seconds / max(1, len(graphs))
    return [CompiledGraph(graph=g, artifact=artifact, compile_seconds=each) for g in graphs]


def bundle_rel(job: CompileJob, path: Path) -> str:
    """A path inside the bundle, relative to the bundle root (the artifacts directory's parent)."""
    return path.relative_to(job.artifacts_dir.parent).as_posix()


def collect_compiler_logs(work_dir: Path, logs_dir: Path) -> list[Path]:
    """Copy neuronx-cc's per-graph logs out of the work directory into the bundle's logs."""
    copied = []
    for log in sorted(work_dir.rglob("log-neuron-cc.txt")):
        dest = logs_dir / "neuronx-cc" / log.relative_to(work_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, dest)
        copied.append(dest)
    return copied


def bundle_line(bundle_dir: str) -> str:
    """The first line of every load snippet: the bundle directory, the one thing a user edits."""
    comment = "  # this bundle's directory" if bundle_dir == BUNDLE_PLACEHOLDER else ""
    return f"bundle = {json.dumps(str(bundle_dir))}{comment}"


def backend_extra(bundle_dir: str | Path, key: str) -> dict[str, Any]:
    """``manifest.extra[key]`` of a bundle (read and checked by ``neuronc.bundle``), or {}."""
    from neuronc.bundle import read_manifest

    value = read_manifest(bundle_dir).extra.get(key)
    return value if isinstance(value, dict) else {}
