"""Remote bundle stores: ``s3://bucket/prefix`` (s3fs) and ``hf://org/repo`` (huggingface_hub), via fsspec.

A remote store holds the same bundles under the same keys as a local store. Layout::

    <root>/<model-slug>/<toolchain-label>/<config-hash[:16]>/manifest.json   written last
    <root>/.objects/sha256/<ab>/<sha256>                                      file contents, by SHA-256

The manifest is the bundle's own ``manifest.json``, byte for byte. The files it lists live in a
content-addressed pool, because object stores have no rename: two publishers of one key writing
``weights/rank0.safetensors`` in place could interleave. Content-addressed objects cannot conflict
(one path, one content), so:

1. a publisher verifies its local bundle, then uploads the objects the store lacks;
2. then writes ``manifest.json`` **last**, conditionally (S3 ``If-None-Match: *``): the first complete
   publisher wins; a loser finds the winner's manifest, checks that its objects are there, and uses
   the winner's bundle (``PublishStatus.EXISTS``). Where the server has no conditional writes the
   manifest is overwritten: every manifest that can win names objects already uploaded. On
   ``hf://`` the objects and the manifest go in one commit, which the Hub applies atomically.

A bundle exists only once its manifest is there, parses, and every object it names is present at
its declared size. Readers download the objects of the bundle they fetch (skipping objects already
in the local object cache), verify each SHA-256 as it streams, and materialise a normal bundle in a
local cache (a ``LocalStore``), manifest last. ``lookup`` and ``probe`` never write to the store.

A compile that built a bundle here marks it pending (``<cache>/.pending/<key>``, holding the SHA-256
of its manifest) until its upload completes. A later compile of that key on this host, under the
key lock, finishes the upload, but only of that same bundle and only while the store still lacks
the key: a bundle fetched from the store, or a key found published, clears the mark, so nothing
removed from the store comes back through it.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neuronc.bundle import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    BundleWriter,
    Manifest,
    parse_manifest,
    read_manifest,
    read_manifest_bytes,
)
from neuronc.bundle.publish import Published, PublishStatus
from neuronc.bundle.signature import read_signature, write_signature
from neuronc.errors import BundleFormatError, NeuroncError, RemoteStoreError, VerificationError
from neuronc.store._api import HASH_PREFIX, BundleStore, check_hex, key_name, marker_rel
from neuronc.store._records import GcReport, Removed, Repair, StoreEntry, Verified
from neuronc.store.local import LocalStore
from neuronc.store.remote_io import FsOp, RemoteIO, RemoteSettings
from neuronc.store.remote_model_card import model_card
from neuronc.store.remote_signatures import signature_rel, upload_signature
from neuronc.store.remote_transfer import (
    UploadResult,
    hf_commit,
    overwrite_manifest,
    upload_files,
    write_manifest,
)
from neuronc.store.remote_url import OBJECTS_DIR, default_cache_dir, object_rel, parse_store_url

# Objects younger than this are never collected: a publisher may still be about to write its manifest.
DEFAULT_GC_GRACE_SECONDS = 24 * 3600
PENDING_DIR = ".pending"


class RemoteStore(BundleStore):
    """Bundles in S3 or a Hugging Face repo, behind the ``BundleStore`` interface.

    Args:
        url: ``s3://bucket/prefix`` or ``hf://[datasets/]org/repo[@revision][/prefix]``.
        cache_dir: where fetched bundles and objects are kept (default: ``default_cache_dir(url)``).
        fs: an fsspec file system to use instead of the one the scheme implies.
        storage_options: passed to the file system (e.g. ``{"endpoint_url": ...}`` for s3fs; the
            usual ``AWS_*`` variables, including ``AWS_ENDPOINT_URL_S3``, work as they do for boto).
        settings: time limits (default: from the ``NEURONC_REMOTE_*`` variables).
    """

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        fs: Any = None,
        storage_options: Mapping[str, Any] | None = None,
        settings: RemoteSettings | None = None,
    ) -> None:
        self.url = parse_store_url(url)
        self.cache = LocalStore(Path(cache_dir) if cache_dir is not None else default_cache_dir(self.url.url))
        self.io = RemoteIO(self.url, fs=fs, storage_options=storage_options, settings=settings)

    @property
    def location(self) -> str:
        return self.url.url

    @property
    def fs(self) -> Any:
        return self.io.fs

    # -- layout -------------------------------------------------------------------------------
    def bundle_rel(self, manifest: Manifest) -> str:
        """The bundle's directory relative to the store root: the local store's layout."""
        return self.cache.path_for(manifest).relative_to(self.cache.root).as_posix()

    def _require_container(self) -> None:
        """RemoteStoreError (exit 5) if the bucket or repository does not exist: it is not an empty store."""
        if self.io.call("checking the store", FsOp.INFO, self.url.container_root, missing_ok=True) is None:
            msg = f"{self.url.url}: {self.url.container_word} '{self.url.container}' does not exist"
            raise RemoteStoreError(msg, hint=self.url.access_hint())

    def _ls(self, path: str) -> builtins.list[dict[str, Any]] | None:
        found = self.io.call("listing", FsOp.LS, path, detail=True, missing_ok=True)
        return None if found is None else builtins.list(found)

    def _labels(self) -> builtins.list[str]:
        """Every ``<slug>/<label>`` directory (two listings deep; objects are never listed)."""
        self.io.invalidate()
        slugs = self._ls(self.io.path(""))
        if not slugs:
            self._require_container()
            return []
        labels: builtins.list[str] = []
        for slug in slugs:
            name = _basename(slug["name"])
            if slug.get("type") != "directory" or name.startswith("."):
                continue
            inner = self._ls(slug["name"]) or []
            labels += [f"{name}/{_basename(e['name'])}" for e in inner if e.get("type") == "directory"]
        return sorted(labels)

    def _candidates(self, config_hash: str, toolchain_key: str | None) -> builtins.list[str]:
        config_hash = check_hex(config_hash, "config hash")
        suffix = f"-{check_hex(toolchain_key, 'toolchain key')[:8]}" if toolchain_key else ""
        return [
            f"{label}/{config_hash[:HASH_PREFIX]}" for label in self._labels() if not suffix or label.endswith(suffix)
        ]

    # -- reading ------------------------------------------------------------------------------
    def read_remote_manifest(self, rel: str) -> tuple[Manifest, bytes] | None:
        """The manifest of the bundle at ``rel``, checked as a local one is; None if absent or invalid."""
        return self.read_remote_manifests([rel])[0]

    def read_remote_manifests(self, rels: builtins.list[str]) -> builtins.list[tuple[Manifest, bytes] | None]:
        """``read_remote_manifest`` for many bundles at once (one bounded ranged read each, in parallel)."""

        def read(rel: str) -> Callable[[], Any]:
            path = self.io.path(f"{rel}/{MANIFEST_NAME}")
            return lambda: self.io.op(FsOp.CAT_FILE, path, start=0, end=MAX_MANIFEST_BYTES + 1, missing_ok=True)

        raws = self.io.run_all("reading manifests", [(0, read(rel)) for rel in rels])
        return [self._parse(rel, raw) for rel, raw in zip(rels, raws, strict=True)]

    def _parse(self, rel: str, raw: object) -> tuple[Manifest, bytes] | None:
        if not isinstance(raw, bytes) or len(raw) > MAX_MANIFEST_BYTES:
            return None  # absent, or larger than any manifest may be
        try:
            return parse_manifest(raw, where=f"{self.url.url}/{rel}/{MANIFEST_NAME}"), raw
        except BundleFormatError:
            return None

    def object_sizes(self, shas: builtins.list[str]) -> dict[str, int | None]:
        """The stored size of each object (None where it is absent)."""

        def size_of(sha: str) -> Callable[[], Any]:
            return lambda: self.io.op(FsOp.INFO, self.io.path(object_rel(sha)), missing_ok=True)

        infos = self.io.run_all("checking objects", [(0, size_of(sha)) for sha in shas])
        return {
            sha: (info.get("size") if isinstance(info, dict) else None) for sha, info in zip(shas, infos, strict=True)
        }

    def missing_objects(self, manifest: Manifest) -> builtins.list[str]:
        """Objects a manifest names that are absent or of the wrong size ("path (object sha why)")."""
        wanted = {f.sha256: f for f in manifest.files}
        sizes = self.object_sizes(sorted(wanted))
        problems = []
        for sha, entry in wanted.items():
            if sizes[sha] is None:
                problems.append(f"{entry.path} (object {sha[:12]} missing)")
            elif sizes[sha] != entry.size:
                problems.append(f"{entry.path} (object {sha[:12]} is {sizes[sha]} bytes, manifest says {entry.size})")
        return sorted(problems)

    def _locate(self, config_hash: str, toolchain_key: str) -> tuple[str, Manifest, bytes] | None:
        rels = self._candidates(config_hash, toolchain_key)
        for rel, read in zip(rels, self.read_remote_manifests(rels), strict=True):
            if read is None:
                continue
            manifest, raw = read
            if manifest.config_hash != config_hash.lower() or manifest.toolchain_key != toolchain_key.lower():
                continue
            if not self.missing_objects(manifest):
                return rel, manifest, raw
        return None

    def locate(self, config_hash: str, toolchain_key: str) -> str | None:
        """The URL of the complete bundle for these full keys, or None; downloads only manifests."""
        found = self._locate(config_hash, toolchain_key)
        return f"{self.url.url}/{found[0]}" if found else None

    def lookup(self, config_hash: str, toolchain_key: str) -> Path | None:
        """The bundle for these keys as a local directory (downloaded into the cache), or None.

        The remote store is the source of truth: a bundle in the local cache counts only while the
        store has it. Nothing is ever written to the store here.
        """
        found = self._locate(config_hash, toolchain_key)
        if found is None:
            return None
        return self.materialize(*found)

    def materialize(self, rel: str, manifest: Manifest, raw: bytes) -> Path:
        """The stored bundle as a directory in the local cache (objects downloaded and verified)."""
        from neuronc.store.remote_fetch import materialize

        path = materialize(self, rel, manifest, raw)
        self._clear_pending(manifest.config_hash, manifest.toolchain_key)
        return path

    # -- writing ------------------------------------------------------------------------------
    def lock_path(self, config_hash: str, toolchain_key: str) -> Path:
        """The lock of this host's cache."""
        return self.cache.lock_path(config_hash, toolchain_key)

    def _after_lock(self, config_hash: str, toolchain_key: str) -> None:
        """Under the key lock, an interrupted upload of this key is finished.

        Across hosts the publish protocol keeps bundles whole without a lock: two hosts may both
        compile a key, and the second to publish uses the first one's bundle.
        """
        self._resume_pending(config_hash, toolchain_key)

    def writer(self, config_hash: str, toolchain_key: str, *, expected_bytes: int | None = None) -> BundleWriter:
        """A BundleWriter that builds into the local cache; ``finish`` then uploads to the remote store."""
        return self.cache.writer(
            config_hash, toolchain_key, expected_bytes=expected_bytes, on_publish=self._publish_built
        )

    def _publish_built(self, bundle: Path) -> Published:
        """The writer's hook: upload a bundle built here; if another host won, use its bundle instead."""
        raw = (bundle / MANIFEST_NAME).read_bytes()
        manifest = parse_manifest(raw)
        marker = self._pending_path(manifest.config_hash, manifest.toolchain_key)
        from neuronc.fsutil import atomic_write_text

        atomic_write_text(marker, hashlib.sha256(raw).hexdigest())
        result = self.upload(bundle)  # a failure (or Ctrl-C) leaves the marker: the next compile resumes
        marker.unlink(missing_ok=True)
        return self._outcome(bundle, raw, result)

    def _outcome(self, bundle: Path, raw: bytes, result: UploadResult) -> Published:
        if result.status == PublishStatus.PUBLISHED or result.winner is None or result.winner[1] == raw:
            return Published(bundle, PublishStatus.PUBLISHED, result.url)
        winner, winner_raw = result.winner
        path = self.materialize(self.bundle_rel(winner), winner, winner_raw)
        host = winner.host.hostname or "another host"
        message = (
            f"another publisher ({host}, {winner.created_at}) published {winner.config_hash[:12]} first; "
            "using its bundle"
        )
        return Published(path, PublishStatus.EXISTS, result.url, message)

    def _pending_path(self, config_hash: str, toolchain_key: str) -> Path:
        return self.cache.root / PENDING_DIR / key_name(config_hash, toolchain_key)

    def _clear_pending(self, config_hash: str, toolchain_key: str) -> None:
        self._pending_path(config_hash, toolchain_key).unlink(missing_ok=True)

    def _resume_pending(self, config_hash: str, toolchain_key: str) -> None:
        """Finish an upload a killed compile left, if it is still this host's bundle and the store lacks the key."""
        marker = self._pending_path(config_hash, toolchain_key)
        try:
            expected = marker.read_text(encoding="utf-8").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return
        local = self.cache.lookup(config_hash, toolchain_key)
        ours = local is not None and hashlib.sha256((local / MANIFEST_NAME).read_bytes()).hexdigest() == expected
        if local is not None and ours and self._locate(config_hash, toolchain_key) is None:
            self.upload(local)
        marker.unlink(missing_ok=True)

    def ensure_writable(self) -> None:
        """Check the store is reachable and writable: write and delete a small object (exit 5 if not)."""
        self._require_container()
        probe = self.io.path(f".neuronc/writable-{secrets.token_hex(8)}")
        try:
            self.io.call("writing a test object", FsOp.PIPE_FILE, probe, b"neuronc: checking write access\n")
        except RemoteStoreError as exc:
            msg = f"{self.url.url}: the store is not writable ({exc.message.rsplit(': ', 1)[-1]})"
            raise RemoteStoreError(msg, hint=self.url.access_hint()) from exc
        self.io.call("removing a test object", FsOp.RM_FILE, probe)

    def write_marker(self, name: str, data: bytes) -> None:
        self._require_container()
        self.io.call("writing a marker", FsOp.PIPE_FILE, self.io.path(marker_rel(name)), data)

    def read_marker(self, name: str) -> bytes | None:
        with contextlib.suppress(NeuroncError):  # unreachable or missing: not seen from here
            data = self.io.call("reading a marker", FsOp.CAT_FILE, self.io.path(marker_rel(name)), missing_ok=True)
            return bytes(data) if data is not None else None
        return None

    def remove_marker(self, name: str) -> None:
        self.io.call("removing a marker", FsOp.RM_FILE, self.io.path(marker_rel(name)), missing_ok=True)

    def publish(self, bundle_dir: str | os.PathLike[str], *, jobs: int | None = None) -> Published:
        """Upload a complete local bundle (see ``upload``); ``status`` is ``exists`` if the key was stored."""
        bundle = Path(bundle_dir)
        result = self.upload(bundle, jobs=jobs)
        return Published(bundle, result.status, result.url)

    def upload(self, bundle_dir: str | os.PathLike[str], *, jobs: int | None = None) -> UploadResult:
        """Verify a local bundle, upload the objects the store lacks, then the manifest last."""
        from neuronc.bundle import verify_bundle

        start = time.perf_counter()
        bundle = Path(bundle_dir)
        manifest = read_manifest(bundle)
        verify_bundle(bundle, manifest=manifest, jobs=jobs).raise_for_problems()
        raw = (bundle / MANIFEST_NAME).read_bytes()
        if parse_manifest(raw).to_json_text() != manifest.to_json_text():
            msg = f"{bundle}: manifest changed while publishing"
            raise VerificationError(msg)
        rel = self.bundle_rel(manifest)
        result = UploadResult(f"{self.url.url}/{rel}", PublishStatus.PUBLISHED)
        signature = read_signature(bundle)
        self.io.invalidate()
        existing = self._complete(rel, manifest)
        if existing is not None:
            result.status, result.winner = PublishStatus.EXISTS, existing
            if signature is not None and existing[1] == raw:  # the same bundle, signed since it was stored
                upload_signature(self.io, rel, raw, signature)
            result.seconds = time.perf_counter() - start
            return result
        objects = {f.sha256: f for f in manifest.files}
        sizes = self.object_sizes(sorted(objects))
        upload = [
            (bundle / objects[sha].path, objects[sha]) for sha in sorted(objects) if sizes[sha] != objects[sha].size
        ]
        result.objects_present = len(objects) - len(upload)
        if self.url.scheme == "hf":
            title = f"neuronc: publish {manifest.config_hash[:12]} ({manifest.backend}, {manifest.target})"
            extra = {signature_rel(rel, raw): signature} if signature is not None else {}
            card = model_card(manifest, store_url=self.url.url, bundle_url=result.url, signed=signature is not None)
            hf_commit(self.io, rel, upload, raw, title, extra=extra, readme=card.encode("utf-8"))
        else:
            upload_files(self.io, upload)
            if signature is not None:  # before the manifest: a signed bundle never appears unsigned
                upload_signature(self.io, rel, raw, signature)
            written = write_manifest(self.io, rel, raw)
            result.conditional = written != "unsupported"
            winner = self._complete(rel, manifest) if written == "exists" else None
            if winner is not None:
                result.status, result.winner = PublishStatus.EXISTS, winner
            elif written != "written":
                # No conditional writes here (or the winner's bundle is broken): last writer wins.
                overwrite_manifest(self.io, rel, raw)
        result.objects_uploaded = len(upload)
        result.bytes_uploaded = sum(entry.size for _, entry in upload)
        result.seconds = time.perf_counter() - start
        return result

    def publish_signature(self, bundle_dir: str | os.PathLike[str]) -> str | None:
        """Upload the signature of a local copy of a stored bundle (same manifest bytes); its URL, or None."""
        bundle = Path(bundle_dir)
        raw = read_manifest_bytes(bundle)
        signature = read_signature(bundle)
        manifest = parse_manifest(raw, where=f"{bundle}/{MANIFEST_NAME}")
        rel = self.bundle_rel(manifest)
        stored = self.read_remote_manifest(rel)
        if signature is None or stored is None or stored[1] != raw:
            return None
        url = upload_signature(self.io, rel, raw, signature)
        cached = self.cache.root / rel
        if cached != bundle.absolute() and _same_bytes(cached, raw):
            write_signature(cached, signature)
        return url

    def fetch(self, key: str) -> Path:
        """The bundle ``key`` names, downloaded and verified into the local cache (with its signature)."""
        [entry] = self.select(key)
        found = self.read_remote_manifest(entry.rel)
        if found is None:  # removed or replaced by an unreadable one since it was listed
            msg = f"{entry.location}: the bundle is no longer in the store"
            raise RemoteStoreError(msg, hint="see `neuronc store list`")
        return self.materialize(entry.rel, *found)

    def _complete(self, rel: str, manifest: Manifest) -> tuple[Manifest, bytes] | None:
        """The stored manifest at ``rel`` if it has ``manifest``'s keys and all its objects."""
        existing = self.read_remote_manifest(rel)
        if existing is None:
            return None
        stored = existing[0]
        same = (stored.config_hash, stored.toolchain_key) == (manifest.config_hash, manifest.toolchain_key)
        return existing if same and not self.missing_objects(stored) else None

    # -- listing and maintenance --------------------------------------------------------------
    def list(self) -> builtins.list[StoreEntry]:
        """Every bundle whose manifest parses, newest first (objects are checked by ``verify``)."""
        labels = self._labels()

        def listing(label: str) -> Callable[[], Any]:
            return lambda: self.io.op(FsOp.LS, self.io.path(label), detail=True, missing_ok=True)

        listings = self.io.run_all("listing", [(0, listing(label)) for label in labels])
        rels = [
            f"{label}/{_basename(item['name'])}"
            for label, items in zip(labels, listings, strict=True)
            for item in items or []
            if item.get("type") == "directory"
        ]
        entries = [
            StoreEntry(f"{self.url.url}/{rel}", rel, read[0], read[0].total_bytes)
            for rel, read in zip(rels, self.read_remote_manifests(rels), strict=True)
            if read is not None
        ]
        entries.sort(key=lambda e: e.manifest.created_at, reverse=True)
        return entries

    def discard(self, entry: StoreEntry) -> None:
        """Delete the manifest: the bundle is gone at once (its objects go at the next gc)."""
        self.io.call("removing a manifest", FsOp.RM_FILE, self.io.path(f"{entry.rel}/{MANIFEST_NAME}"))
        self._clear_pending(entry.manifest.config_hash, entry.manifest.toolchain_key)

    def verify(self, key: str, *, jobs: int | None = None) -> builtins.list[Verified]:
        """Download and hash every object of the bundles ``key`` names (nothing is kept)."""
        from neuronc.store.remote_fetch import verify_entry

        return [verify_entry(self, entry) for entry in self.select(key, all_matches=True)]

    def repair(self, key: str, *, source: str | os.PathLike[str] | None = None) -> builtins.list[Repair]:
        """Verify; upload damaged objects again from verified local copies, or drop what cannot be mended."""
        from neuronc.store.remote_fetch import repair_entry

        return [repair_entry(self, checked, source) for checked in self.verify(key)]

    def gc(self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, now: float | None = None) -> GcReport:
        """Remove objects no manifest names, once they are older than ``grace_seconds``."""
        referenced = {f.sha256 for entry in self.list() for f in entry.manifest.files}
        report = GcReport()
        now = time.time() if now is None else now
        found = self.io.call("collecting objects", FsOp.FIND, self.io.path(OBJECTS_DIR), detail=True, missing_ok=True)
        doomed: builtins.list[tuple[str, int]] = []
        for path, info in sorted((found or {}).items()):
            if _basename(path) in referenced:
                continue
            modified = _mtime(info)
            if modified is not None and now - modified < grace_seconds:
                report.kept_young += 1
                continue
            doomed.append((path, int(info.get("size") or 0)))

        def rm(path: str) -> Callable[[], Any]:
            return lambda: self.io.op(FsOp.RM_FILE, path)

        self.io.run_all("removing objects", [(0, rm(path)) for path, _ in doomed])
        report.removed += [Removed(path, size, "unreferenced object") for path, size in doomed]
        return report


def _same_bytes(bundle: Path, raw: bytes) -> bool:
    try:
        return read_manifest_bytes(bundle) == raw
    except BundleFormatError:
        return False


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _mtime(info: Mapping[str, Any]) -> float | None:
    for key in ("LastModified", "last_modified", "mtime"):
        value = info.get(key)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, int | float):
            return float(value)
    return None


__all__ = ["DEFAULT_GC_GRACE_SECONDS", "RemoteStore", "UploadResult"]
