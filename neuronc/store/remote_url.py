"""Remote store locations: ``s3://bucket/prefix`` and ``hf://[datasets/|spaces/]org/repo[@revision][/prefix]``."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from neuronc.errors import InvalidInputError

OBJECTS_DIR = ".objects/sha256"
REMOTE_SCHEMES = ("s3", "hf")
_KIND_PREFIX = {"dataset": "datasets/", "space": "spaces/"}


@dataclass(frozen=True)
class StoreURL:
    """A parsed remote store location."""

    scheme: str  # s3 | hf
    container: str  # bucket, or org/repo
    prefix: str  # path inside the bucket or repo, no leading or trailing slash
    repo_type: str = "model"  # hf only: model | dataset | space
    revision: str | None = None  # hf only

    @property
    def url(self) -> str:
        if self.scheme == "hf":
            rev = f"@{self.revision}" if self.revision else ""
            base = f"hf://{_KIND_PREFIX.get(self.repo_type, '')}{self.container}{rev}"
        else:
            base = f"s3://{self.container}"
        return f"{base}/{self.prefix}" if self.prefix else base

    @property
    def container_root(self) -> str:
        """The bucket or repository as the fsspec file system names it (no scheme)."""
        if self.scheme == "hf":
            rev = f"@{self.revision}" if self.revision else ""
            return f"{_KIND_PREFIX.get(self.repo_type, '')}{self.container}{rev}"
        return self.container

    @property
    def fs_root(self) -> str:
        """The store root as the fsspec file system names it (no scheme)."""
        return f"{self.container_root}/{self.prefix}" if self.prefix else self.container_root

    @property
    def container_word(self) -> str:
        return "bucket" if self.scheme == "s3" else "repository"

    def repo_path(self, rel: str) -> str:
        """A path inside the bucket or repo (what an HF commit operation names)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def access_hint(self) -> str:
        if self.scheme == "s3":
            return (
                "check the bucket exists and credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; "
                "AWS_ENDPOINT_URL_S3 for S3-compatible servers)"
            )
        return "check the repository exists and HF_TOKEN can read (and write, to publish) it"


def is_remote(location: object) -> bool:
    """Whether ``location`` is an s3:// or hf:// URL."""
    return isinstance(location, str) and "://" in location and location.split("://", 1)[0] in REMOTE_SCHEMES


def parse_store_url(url: str) -> StoreURL:
    """Parse ``s3://bucket[/prefix]`` or ``hf://[datasets/|spaces/]org/repo[@revision][/prefix]``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in REMOTE_SCHEMES:
        msg = f"--store {url}: not a remote store URL (s3://bucket/prefix or hf://org/repo)"
        raise InvalidInputError(msg)
    parts = [p for p in rest.split("/") if p]
    if any(p in (".", "..") for p in parts):
        msg = f"--store {url}: '.' and '..' are not allowed in a store URL"
        raise InvalidInputError(msg)
    if scheme == "s3":
        if not parts:
            raise InvalidInputError(f"--store {url}: no bucket", hint="use s3://bucket/prefix")
        return StoreURL("s3", parts[0], "/".join(parts[1:]))
    repo_type = "model"
    if parts and parts[0] in ("datasets", "spaces", "models"):
        repo_type = {"datasets": "dataset", "spaces": "space", "models": "model"}[parts[0]]
        parts = parts[1:]
    if len(parts) < 2:
        msg = f"--store {url}: an hf:// store names a repository, org/repo"
        raise InvalidInputError(msg, hint="use hf://org/repo, hf://datasets/org/repo or hf://org/repo@branch/prefix")
    name, _, revision = parts[1].partition("@")
    if not name or (_ and not revision):
        raise InvalidInputError(f"--store {url}: empty repository name or revision")
    return StoreURL("hf", f"{parts[0]}/{name}", "/".join(parts[2:]), repo_type, revision or None)


def split_bundle_url(url: str) -> tuple[str, str]:
    """``(store URL, bundle rel)`` for a bundle's URL: the last three parts are slug/label/hash prefix."""
    parsed = parse_store_url(url.rstrip("/"))
    parts = parsed.prefix.split("/") if parsed.prefix else []
    if len(parts) < 3:
        msg = f"{url}: not a bundle URL (<store>/<model>/<toolchain>/<config-hash>, as `neuronc store list` prints)"
        raise InvalidInputError(msg)
    store = StoreURL(parsed.scheme, parsed.container, "/".join(parts[:-3]), parsed.repo_type, parsed.revision)
    return store.url, "/".join(parts[-3:])


def object_rel(sha256: str) -> str:
    """Where a file's content lives, relative to the store root."""
    return f"{OBJECTS_DIR}/{sha256[:2]}/{sha256}"


def default_cache_dir(url: str) -> Path:
    """$NEURONC_REMOTE_CACHE, else <user cache>/neuronc/remote, one directory per store URL."""
    env = os.environ.get("NEURONC_REMOTE_CACHE")
    if env:
        base = Path(env).expanduser()
    else:
        from neuronc.locations import user_cache_dir

        base = user_cache_dir() / "remote"
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return base / digest


__all__ = [
    "OBJECTS_DIR",
    "REMOTE_SCHEMES",
    "StoreURL",
    "default_cache_dir",
    "is_remote",
    "object_rel",
    "parse_store_url",
    "split_bundle_url",
]
