"""Where registry entries come from, and what the environment says about it (optimum-neuron's rules).

Two sources implement ``RegistrySource``: ``SnapshotSource`` (``snapshot.py``, a local copy) and
``HubSource`` (``hub.py``, a repository on the Hub). This module holds what both need: which
repository (``--repo``, ``CUSTOM_CACHE_REPO``, the stored name, the default), which endpoint,
offline or not, and the model's config.json from this machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from neuronc.hubcache.registry import Query, Registry, SourceInfo
from neuronc.model.files import local_model_dir, read_model_config
from neuronc.model.hfcache import cached_snapshot, hf_home
from neuronc.progress import NULL_PROGRESS, ProgressSink

DEFAULT_CACHE_REPO = "aws-neuron/optimum-neuron-cache"
DEFAULT_ENDPOINT = "https://huggingface.co"
CUSTOM_CACHE_FILE = "optimum_neuron_custom_cache"


class RegistrySource(Protocol):
    """Something that can provide registry entries for a query."""

    def info(self) -> SourceInfo: ...

    def load(self, query: Query, progress: ProgressSink = NULL_PROGRESS) -> Registry: ...

    def model_config(self, model_id: str, revision: str | None) -> tuple[dict[str, Any] | None, str]: ...


def resolve_cache_repo(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The cache repository and why: ``--repo``, ``CUSTOM_CACHE_REPO``, the stored file, the default.

    optimum/neuron/utils/cache_utils.py (0.4.5): get_hf_hub_cache_repos.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return check_repo_id(explicit, "--repo"), "--repo"
    if env.get("CUSTOM_CACHE_REPO"):
        return check_repo_id(env["CUSTOM_CACHE_REPO"], "CUSTOM_CACHE_REPO"), "CUSTOM_CACHE_REPO"
    stored = hf_home(env) / CUSTOM_CACHE_FILE
    try:
        with open(stored, "rb") as f:  # a one-line file; more than 1 KiB is not a repository name
            name = f.read(1024).decode("utf-8", "replace").strip()
    except OSError:
        name = ""
    if name and name.isprintable():
        return check_repo_id(name, str(stored)), str(stored)
    return DEFAULT_CACHE_REPO, "default"


def check_repo_id(repo_id: str, origin: str) -> str:
    """``repo_id`` when it is a Hugging Face repository id (huggingface_hub's own rule); else exit 2
    naming the value and where it came from (it also names a directory of the local cache)."""
    from huggingface_hub.errors import HFValidationError

    # Documented public utility (huggingface_hub docs, "Utilities": utils.validate_repo_id); the
    # package re-exports it without `as`, which mypy's strict mode does not count as an export.
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

    from neuronc.errors import HUB_INVALID_ID, safe_text

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        reason = safe_text(str(exc).split(". Use ")[0], 200)
        msg = f"{origin} '{safe_text(repo_id, 120)}': not a Hugging Face repository id ({reason})"
        raise HUB_INVALID_ID.error(msg, hint="e.g. aws-neuron/optimum-neuron-cache (namespace/name)") from None
    return repo_id


def hub_endpoint(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def local_model_config(
    model_id: str, revision: str | None, base_dir: Path | None = None
) -> tuple[dict[str, Any] | None, str]:
    """A model's config.json from a local directory or the local Hugging Face cache; no network.

    Read with ``neuronc.model.files.read_model_config`` (bounded, type-checked): a config.json that
    is there but unusable is a CheckpointError (exit 2) naming it, not a silent fallback.
    """
    directory = local_model_dir(model_id, base_dir)
    if directory is not None:
        config = read_model_config(directory, required=False)
        where = f"{directory}/config.json"
        return config, where if config is not None else f"no config.json in {directory}"
    if "/" in model_id and not model_id.startswith((".", "/", "~")) and ".." not in model_id:
        cached = cached_snapshot(model_id, revision)
        if cached is not None:
            return read_model_config(cached), "local Hugging Face cache"
    return None, "no config.json in a local directory or the local Hugging Face cache"
