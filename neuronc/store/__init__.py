"""Bundle stores: complete bundles by (config hash, toolchain key), local or remote, behind one interface.

``open_store(location)`` returns a ``BundleStore``: a ``LocalStore`` for a directory (or None: the
default store), a ``RemoteStore`` for ``s3://`` and ``hf://``. Code above this package uses only the
``BundleStore`` interface (docs/remote-store.md, docs/architecture.md). Importing this package
imports neither fsspec nor a cloud client: a remote store loads them on its first call.

The remote store is ``remote_store`` (``RemoteStore``: lookup, publish, gc, verify), with
``remote_url`` (store URLs, object names; imported by every store opening, so it stays light),
``remote_io`` (the fsspec file system and its settings), ``remote_transfer`` (uploads and
downloads with integrity checks), ``remote_fetch`` (a bundle into the local cache) and
``remote_signatures``. They sit in this package, beside the interface (``_api``) and the local
store (its cache) they build on: a ``remote/`` sub-package would import this package's modules
while this package opens it, an import cycle between the two.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from neuronc._lazy import lazy_attributes
from neuronc.bundle.publish import Published, PublishHook, PublishStatus
from neuronc.errors import InvalidInputError
from neuronc.store._api import HASH_PREFIX, BundleStore, Nearest
from neuronc.store._lock import KeyLock
from neuronc.store._records import (
    GcReport,
    LocalEntry,
    Probe,
    ProbeStatus,
    Removed,
    Repair,
    RepairAction,
    StoreEntry,
    Verified,
)
from neuronc.store.local import STORE_ENV, LocalStore, default_store_path, model_slug
from neuronc.store.remote_url import (
    OBJECTS_DIR,
    StoreURL,
    default_cache_dir,
    is_remote,
    object_rel,
    parse_store_url,
    split_bundle_url,
)

if TYPE_CHECKING:
    from neuronc.store.remote_io import RemoteSettings
    from neuronc.store.remote_store import DEFAULT_GC_GRACE_SECONDS, RemoteStore, UploadResult

# The remote store's modules (asyncio, thread pools, fsspec on first use) load only when a remote
# name is asked for: a local store hit never imports them.
_REMOTE_NAMES = {
    "RemoteStore": "neuronc.store.remote_store",
    "UploadResult": "neuronc.store.remote_store",
    "DEFAULT_GC_GRACE_SECONDS": "neuronc.store.remote_store",
    "RemoteSettings": "neuronc.store.remote_io",
}


__getattr__ = lazy_attributes(__name__, _REMOTE_NAMES)


def open_store(
    location: BundleStore | str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str] | None = None
) -> BundleStore:
    """The store at ``location`` (``--store``), else at $NEURONC_STORE, else the user cache's bundles/.

    Either names a directory, ``file://``, ``s3://`` or ``hf://`` store, and both go through the
    same checks: an unknown scheme is an InvalidInputError (exit 2). A ``BundleStore`` is returned
    as it is. ``cache_dir`` is a remote store's local cache.
    """
    if isinstance(location, BundleStore):
        return location
    origin = "--store"
    text = "" if location is None else os.fspath(location)
    if not text:
        origin, text = STORE_ENV, os.environ.get(STORE_ENV, "")
    if is_remote(text):
        from neuronc.store.remote_store import RemoteStore

        return RemoteStore(text, cache_dir=cache_dir)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif "://" in text:
        msg = f"{origin} {text}: unsupported scheme '{text.split('://', 1)[0]}'"
        raise InvalidInputError(msg, hint="use a directory, s3://bucket/prefix or hf://org/repo")
    return LocalStore(text) if text else LocalStore(default_store_path())


def verify_url(url: str, *, jobs: int | None = None, cache_dir: str | os.PathLike[str] | None = None) -> Verified:
    """Verify one stored bundle named by its URL (``<store>/<model>/<toolchain>/<hash>``, as `store list` prints)."""
    from neuronc.store.remote_store import RemoteStore

    store_url, rel = split_bundle_url(url)
    store = RemoteStore(store_url, cache_dir=cache_dir)
    [checked] = store.verify(rel, jobs=jobs)
    return checked


__all__ = [
    "DEFAULT_GC_GRACE_SECONDS",
    "HASH_PREFIX",
    "OBJECTS_DIR",
    "STORE_ENV",
    "BundleStore",
    "GcReport",
    "KeyLock",
    "LocalEntry",
    "LocalStore",
    "Nearest",
    "Probe",
    "ProbeStatus",
    "PublishHook",
    "PublishStatus",
    "Published",
    "RemoteSettings",
    "RemoteStore",
    "Removed",
    "Repair",
    "RepairAction",
    "StoreEntry",
    "StoreURL",
    "UploadResult",
    "Verified",
    "default_cache_dir",
    "default_store_path",
    "is_remote",
    "model_slug",
    "object_rel",
    "open_store",
    "parse_store_url",
    "split_bundle_url",
    "verify_url",
]
