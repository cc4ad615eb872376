"""The remote bundle store (s3:// through fsspec/s3fs, hf:// through huggingface_hub).

``store`` (``RemoteStore``: lookup, publish, gc, verify), ``url`` (parsing store URLs, object
names; imported by every store opening, so it stays light), ``io`` (the fsspec file system and
its settings), ``transfer`` (uploads and downloads with integrity checks), ``fetch`` (bringing a
bundle into the local cache).

``RemoteStore`` and its companions load on first use: a local store hit never imports them.
"""

from typing import TYPE_CHECKING

from neuronc._lazy import lazy_attributes

if TYPE_CHECKING:
    from neuronc.store.remote.store import DEFAULT_GC_GRACE_SECONDS, RemoteStore, UploadResult

_STORE = "neuronc.store.remote.store"
__getattr__ = lazy_attributes(
    __name__, {"RemoteStore": _STORE, "UploadResult": _STORE, "DEFAULT_GC_GRACE_SECONDS": _STORE}
)

__all__ = ["DEFAULT_GC_GRACE_SECONDS", "RemoteStore", "UploadResult"]
