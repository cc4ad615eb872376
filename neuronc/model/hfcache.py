"""The local Hugging Face cache, read the way huggingface_hub lays it out, without importing it.

Importing huggingface_hub costs about 0.2 s; reading a revision's commit or a snapshot folder from
the cache needs none of it: ``models--org--name/refs/<revision>`` holds the commit and
``models--org--name/snapshots/<commit>/`` the files (huggingface_hub ``file_download.py``,
``try_to_load_from_cache``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_TRUE = frozenset({"1", "true", "yes", "on"})


def hf_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    env = os.environ if environ is None else environ
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface"
    return Path.home() / ".cache" / "huggingface"


def hub_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where models are cached: ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else ``hf_home()/hub``."""
    env = os.environ if environ is None else environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    return Path(cache).expanduser() if cache else hf_home(env) / "hub"


def hub_offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to 1/ON/YES/TRUE."""
    env = os.environ if environ is None else environ
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in _TRUE


def repo_cache_dir(repo_id: str, environ: Mapping[str, str] | None = None) -> Path:
    return hub_cache_dir(environ) / f"models--{repo_id.replace('/', '--')}"


def cached_commit(repo_id: str, revision: str | None = None) -> str | None:
    """The commit the cache's ``refs/<revision>`` names (a 40-hex revision is its own commit)."""
    rev = revision or "main"
    if COMMIT_RE.fullmatch(rev):
        return rev
    try:
        with open(repo_cache_dir(repo_id) / "refs" / rev, "rb") as f:
            commit = f.read(64).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return None
    return commit if COMMIT_RE.fullmatch(commit) else None


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of a repo's revision in the local cache, if it has a config.json."""
    commit = cached_commit(repo_id, revision)
    if commit is None:
        return None
    folder = repo_cache_dir(repo_id) / "snapshots" / commit
    return folder if (folder / "config.json").exists() else None


__all__ = ["COMMIT_RE", "cached_commit", "cached_snapshot", "hf_home", "hub_cache_dir", "hub_offline", "repo_cache_dir"]
