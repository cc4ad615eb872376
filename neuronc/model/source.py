"""Where a build's checkpoint comes from: a local directory, or a Hugging Face repo at a commit.

``resolve_revision`` pins a hub revision to its commit (online through huggingface_hub, offline from
the local Hugging Face cache's refs); ``resolve_checkpoint`` finds or downloads the files and
describes them for the manifest's weights source.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import (
    DISK_FULL,
    HUB_NO_REVISION,
    HUB_REFUSED,
    CheckpointError,
    InvalidInputError,
    foreign_row,
    from_foreign,
)
from neuronc.fsutil import disk_full_error
from neuronc.model.files import local_model_dir
from neuronc.model.hfcache import COMMIT_RE, cached_commit, hub_cache_dir, hub_offline, repo_cache_dir

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# What a hub download fetches: safetensors weights, configs and tokenizers (no .bin/.pt/.onnx copies).
_HUB_PATTERNS = ["*.safetensors", "*.safetensors.index.json", "*.json", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


def resolve_revision(model_id: str, revision: str | None) -> str:
    """The commit a hub model's revision points at ("main" when none is given).

    A 40-hex revision is a commit already; otherwise the hub is asked, or, offline, the local
    Hugging Face cache's refs. The commit goes into the config hash, so "main" today and "main"
    next month are different builds when the model changed.
    """
    revision = revision or "main"
    if COMMIT_RE.fullmatch(revision):
        return revision
    if not hub_offline():
        sha = _hub_commit(model_id, revision)
        if sha is not None:
            return sha
    cached = cached_commit(model_id, revision)
    if cached is not None:
        return cached
    msg = f"cannot resolve '{model_id}@{revision}': offline and not in the Hugging Face cache"
    raise CheckpointError(msg, hint="download it once with network access (`hf download`), or pin a commit sha")


def _hub_commit(model_id: str, revision: str) -> str | None:
    """Ask the Hub which commit ``revision`` is; None when the Hub cannot be reached."""
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(model_id, revision=revision)
    except Exception as exc:
        row = foreign_row(exc)
        if row is None:
            raise
        if row not in HUB_REFUSED:
            return None  # the hub is unreachable: fall back to what the local cache knows
        msg = f"model '{model_id}' is not a directory and not an accessible Hugging Face repo at '{revision}'"
        hint = None if row is HUB_NO_REVISION else _HUB_HINT  # the row's: pin a revision that exists
        raise row.convert(exc, msg, error=CheckpointError, hint=hint) from None
    sha = getattr(info, "sha", None)
    return sha if isinstance(sha, str) and COMMIT_RE.fullmatch(sha) else None


def known_commits(model_id: str, revision: str | None) -> list[str]:
    """Commits ``revision`` may have pointed at before: the newest first from the Hub's history of
    the ref (``HfApi.list_repo_commits``, when the Hub is reachable), then every snapshot the local
    Hugging Face cache holds (the commits this machine has downloaded). Never raises: an unreachable
    Hub, a gated repo or an empty cache leaves what was found."""
    found: list[str] = []
    if not hub_offline():
        try:
            from huggingface_hub import HfApi

            found.extend(c.commit_id for c in HfApi().list_repo_commits(model_id, revision=revision or "main"))
        except Exception as exc:  # the history is a diagnosis aid: without it, the local cache's commits
            if foreign_row(exc) is None:
                raise
    try:
        snapshots = sorted(p.name for p in (repo_cache_dir(model_id) / "snapshots").iterdir() if p.is_dir())
    except OSError:
        snapshots = []
    found.extend(name for name in snapshots if COMMIT_RE.fullmatch(name))
    return [c for c in dict.fromkeys(found) if isinstance(c, str) and COMMIT_RE.fullmatch(c)]


_HUB_HINT = (
    "check model.id; for a local directory use a path that exists (relative to the profile); "
    "for gated repos set HF_TOKEN"
)


def resolve_checkpoint(spec: BuildSpec, model_dir: Path | None, revision: str | None) -> tuple[Path, dict[str, Any]]:
    """The checkpoint directory to read and the manifest's weights-source record.

    ``model_dir`` is the model's local directory when it is one (used in place); otherwise the hub
    model is downloaded (or found in the Hugging Face cache) at the resolved commit. The record
    names every weight and config file with its size and SHA-256.
    """
    directory = model_dir if model_dir is not None else _download(spec.model.id, revision)
    if not (directory / "config.json").is_file():
        msg = f"{directory}: no config.json; not a Hugging Face checkpoint directory"
        raise CheckpointError(msg)
    source: dict[str, Any] = {
        "id": spec.model.id,
        "revision": revision,
        "mode": spec.weights,
        "files": source_files(directory),
    }
    return directory, source


# A Hugging Face repo id: "org/name"; letters, digits, "-", "_" and ".", neither part starting with ".".
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def checkpoint_dir(model: str, revision: str | None = None) -> Path:
    """The checkpoint directory for ``model``: a local directory as it is, or a Hugging Face repo id
    ("org/name") found in the Hugging Face cache or downloaded (safetensors, configs, tokenizer).

    Anything else comes back as a path, for the checkpoint reader to say what is wrong with it.

    Raises:
        InvalidInputError: ``revision`` given for a local directory.
        CheckpointError: a repo id that is neither cached nor downloadable.
    """
    directory = local_model_dir(model)
    if directory is not None:
        if revision is not None:
            raise InvalidInputError(f"{model}: --revision applies to a repo id, not to a local directory")
        return directory
    if not _REPO_ID_RE.match(model) or Path(model).exists():
        return Path(model)
    hint = "pass a checkpoint directory that exists, or a repo id; for gated repos set HF_TOKEN"
    return _download(model, revision, hint=hint)


def _download(repo_id: str, revision: str | None, *, hint: str = _HUB_HINT) -> Path:
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=_HUB_PATTERNS,
            cache_dir=str(hub_cache_dir()),
            local_files_only=hub_offline(),
        )
    except Exception as exc:
        if foreign_row(exc) is DISK_FULL:
            raise disk_full_error(hub_cache_dir(), None, exc) from None
        error = from_foreign(exc, f"cannot download '{repo_id}@{revision or 'main'}'", error=CheckpointError, hint=hint)
        if error is None:
            raise
        raise error from None
    return Path(path)


def fetch_config(repo_id: str, commit: str) -> dict[str, Any] | None:
    """config.json of a hub model at ``commit``, downloaded into the Hugging Face cache (that file only);
    None offline, or when the Hub cannot give it (the caller keys the model by its commit instead)."""
    if hub_offline():
        return None
    from huggingface_hub import hf_hub_download

    from neuronc.model.files import read_model_config

    try:
        path = hf_hub_download(repo_id, "config.json", revision=commit, cache_dir=str(hub_cache_dir()))
    except Exception as exc:
        if foreign_row(exc) is None:
            raise
        return None
    try:
        return read_model_config(Path(path).parent, required=False)
    except CheckpointError:
        return None


def source_files(directory: Path) -> list[dict[str, Any]]:
    """Name, size and SHA-256 of each weight and config file of a checkpoint directory.

    In the Hugging Face cache a large file is a symlink to a blob named by its SHA-256 (git LFS),
    so its hash is known without reading it; other files are hashed once per file version and the
    digest kept by file identity (``neuronc.model.digests``: the weights key already hashed them).
    """
    from neuronc.model.digests import file_digests

    paths = [
        path
        for path in sorted(directory.iterdir())
        if path.is_file() and path.suffix in {".safetensors", ".json", ".bin", ".model"}
    ]
    digests = file_digests(paths)
    return [
        {"path": path.name, "size": path.stat().st_size, "sha256": sha256}
        for path, sha256 in zip(paths, digests, strict=True)
    ]
