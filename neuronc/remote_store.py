"""Remote bundle stores: ``s3://bucket/prefix`` (s3fs) and ``hf://org/repo`` (huggingface_hub), via fsspec.

A remote store holds the same bundles under the same keys as a local ``Store``; ``open_store``
returns one or the other from a ``--store`` value. Layout::

    <root>/<model-slug>/<toolchain-label>/<config-hash[:16]>/manifest.json   written last
    <root>/.objects/sha256/<ab>/<sha256>                                      file contents, by SHA-256

The bundle directory is the local store's, and its manifest is the bundle's own ``manifest.json``,
byte for byte. The files it lists live in a content-addressed pool, because object stores have no
rename: two publishers of one key writing ``weights/rank0.safetensors`` in place could interleave
and leave a manifest that names the other's bytes. Content-addressed objects cannot conflict (one
path, one content), so:

1. a publisher verifies its local bundle, then uploads the objects the store lacks;
2. then writes ``manifest.json`` **last**, conditionally (S3 ``If-None-Match: *``): the first complete
   publisher wins and readers see a stable bundle; a loser finds the winner's manifest, checks that
   its objects are there, and reuses it. Where the server does not support conditional writes the
   manifest is simply overwritten: every manifest that can win names objects already uploaded, so
   last-writer-wins is still a complete bundle. On ``hf://`` the objects and the manifest go in one
   commit, which the Hub applies atomically.

A bundle exists only once its manifest is there, parses, and every object it names is present at
its declared size. Readers download only the manifest to check, and only the objects of the bundle
they fetch (skipping objects already in the local object cache), verify each SHA-256 as it streams,
and materialise a normal bundle directory in a local cache (a local ``Store``), manifest last.
Publishers on one host serialise on a local per-key lock; publishers on different hosts may both
compile a key (wasted work, never a corrupt bundle). ``gc`` removes objects no manifest names once
they are older than a grace period, so a publisher's objects are not collected before its
manifest lands.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from neuronc.bundle import MANIFEST_NAME, MAX_MANIFEST_BYTES, BundleWriter, Manifest, parse_manifest, read_manifest
from neuronc.errors import (
    BundleFormatError,
    EnvironmentIncompatibleError,
    InvalidInputError,
    NeuroncError,
    VerificationError,
)
from neuronc.store import HASH_PREFIX, KeyLock, Store

OBJECTS_DIR = ".objects/sha256"
REMOTE_SCHEMES = ("s3", "hf")
# Objects younger than this are never collected: a publisher may still be about to write its manifest.
DEFAULT_GC_GRACE_SECONDS = 24 * 3600
_CHUNK = 1 << 20
_IO_THREADS = 8


class RemoteStoreError(NeuroncError):
    """A remote store could not be read or written (network, credentials, missing bucket)."""

    exit_code = 5
    kind = "remote_store_error"


@runtime_checkable
class BundleStore(Protocol):
    """What the pipeline needs from a store, local or remote."""

    def lookup(self, config_hash: str, toolchain_key: str) -> Path | None: ...

    def lock(
        self,
        config_hash: str,
        toolchain_key: str,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> contextlib.AbstractContextManager[Any]: ...

    def writer(
        self,
        config_hash: str,
        toolchain_key: str | None = None,
        *,
        toolchain: Mapping[str, str | None] | None = None,
        backend: str | None = None,
        model_id: str | None = None,
    ) -> BundleWriter: ...


# ------------------------------------------------------------------------------------------------
# URLs
# ------------------------------------------------------------------------------------------------


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
            kind = {"dataset": "datasets/", "space": "spaces/"}.get(self.repo_type, "")
            rev = f"@{self.revision}" if self.revision else ""
            return f"hf://{kind}{self.container}{rev}" + (f"/{self.prefix}" if self.prefix else "")
        return f"s3://{self.container}" + (f"/{self.prefix}" if self.prefix else "")

    @property
    def fs_root(self) -> str:
        """The root as the fsspec file system names it (no scheme)."""
        if self.scheme == "hf":
            kind = {"dataset": "datasets/", "space": "spaces/"}.get(self.repo_type, "")
            rev = f"@{self.revision}" if self.revision else ""
            base = f"{kind}{self.container}{rev}"
        else:
            base = self.container
        return f"{base}/{self.prefix}" if self.prefix else base

    def repo_path(self, rel: str) -> str:
        """A path inside the bucket or repo (what an HF commit operation names)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel


def is_remote(location: str | os.PathLike[str] | None) -> bool:
    return isinstance(location, str) and location.split("://", 1)[0] in REMOTE_SCHEMES and "://" in location


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


# Client libraries raise their own exception types (botocore's NoCredentialsError is not an
# OSError); treat those as storage errors too, so they get a message and exit 5, not a traceback.
# huggingface_hub talks HTTP through requests (0.x) or httpx (1.x; 2.x uses its fork httpx2).
_STORAGE_ERROR_MODULES = frozenset(
    {"botocore", "aiobotocore", "s3fs", "fsspec", "aiohttp", "huggingface_hub", "requests", "httpx", "httpx2"}
)


def _is_storage_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError | ValueError | RuntimeError):
        return True
    return any(cls.__module__.split(".")[0] in _STORAGE_ERROR_MODULES for cls in type(exc).__mro__)


def open_store(location: Any = None, *, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """A local ``Store`` for a path (or None: the default store), a ``RemoteStore`` for s3:// and hf://."""
    if isinstance(location, Store | RemoteStore):
        return location
    if location is None or str(location) == "":
        return Store.default()
    text = os.fspath(location)
    if is_remote(text):
        return RemoteStore(text, cache_dir=cache_dir)
    if "://" in text and not text.startswith("file://"):
        msg = f"--store {text}: unsupported scheme"
        raise InvalidInputError(msg, hint="use a directory, s3://bucket/prefix or hf://org/repo")
    return Store.from_option(text)


def probe(store: Any, config_hash: str, toolchain_key: str) -> dict[str, Any]:
    """Store status for a key without downloading anything: hit | miss | other-toolchain."""
    if isinstance(store, RemoteStore):
        where = store.locate(config_hash, toolchain_key)
        others = [] if where else [e.toolchain_label for e in store.find(config_hash)]
    else:
        found = store.lookup(config_hash, toolchain_key)
        where = str(found) if found is not None else None
        others = [] if where else [e.path.parent.name for e in store.find(config_hash)]
    status = "hit" if where else ("other-toolchain" if others else "miss")
    return {"status": status, "store": _store_name(store), "location": where, "other_toolchains": sorted(set(others))}


def _store_name(store: Any) -> str:
    return store.url.url if isinstance(store, RemoteStore) else str(store.root)


# ------------------------------------------------------------------------------------------------
# The remote store
# ------------------------------------------------------------------------------------------------


@dataclass
class RemoteEntry:
    """One complete bundle in a remote store."""

    url: str
    rel: str
    manifest: Manifest
    size: int

    @property
    def key(self) -> str:
        return self.manifest.config_hash[:12]

    @property
    def toolchain_label(self) -> str:
        return self.rel.split("/")[-2]

    @property
    def path(self) -> str:
        """The bundle's URL (named like ``StoreEntry.path`` so callers can treat both alike)."""
        return self.url

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "key": self.key,
            "config_hash": m.config_hash,
            "toolchain_key": m.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "model": m.model_id,
            "backend": m.backend,
            "target": m.target,
            "size": self.size,
            "created_at": m.created_at,
            "path": self.url,
        }


@dataclass
class PublishResult:
    """What ``RemoteStore.publish`` did."""

    url: str
    status: str  # published | exists
    objects_uploaded: int = 0
    bytes_uploaded: int = 0
    objects_present: int = 0
    seconds: float = 0.0
    conditional: bool | None = None  # whether the manifest was written with If-None-Match

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": self.status,
            "objects_uploaded": self.objects_uploaded,
            "bytes_uploaded": self.bytes_uploaded,
            "objects_present": self.objects_present,
            "seconds": round(self.seconds, 3),
            "conditional": self.conditional,
        }


@dataclass
class RemoteGcReport:
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept_young: int = 0

    @property
    def bytes_freed(self) -> int:
        return sum(int(r.get("bytes") or 0) for r in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"bytes_freed": self.bytes_freed, "removed": list(self.removed), "kept_young": self.kept_young}


class RemoteStore:
    """Bundles in S3 or a Hugging Face repo, with the local ``Store``'s interface.

    Args:
        url: ``s3://bucket/prefix`` or ``hf://[datasets/]org/repo[@revision][/prefix]``.
        cache_dir: where fetched bundles and objects are kept (default: ``default_cache_dir(url)``).
        fs: an fsspec file system to use instead of the one the scheme implies.
        storage_options: passed to the file system (e.g. ``{"endpoint_url": ...}`` for s3fs; the
            usual ``AWS_*`` variables, including ``AWS_ENDPOINT_URL_S3``, work as they do for boto).
    """

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        fs: Any = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = parse_store_url(url)
        self.cache = Store(Path(cache_dir) if cache_dir is not None else default_cache_dir(self.url.url))
        self._storage_options = dict(storage_options or {})
        self._fs = fs

    def __repr__(self) -> str:
        return f"RemoteStore({self.url.url!r})"

    @property
    def root(self) -> str:
        return self.url.url

    # -- file system ------------------------------------------------------------------------
    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = self._make_fs()
        return self._fs

    def _make_fs(self) -> Any:
        if self.url.scheme == "s3":
            try:
                import s3fs
            except ImportError:
                msg = "s3:// stores need s3fs"
                raise EnvironmentIncompatibleError(msg, hint="pip install 'neuronc[remote]'") from None
            options = {"skip_instance_cache": True, "use_listings_cache": False, **self._storage_options}
            return s3fs.S3FileSystem(**options)
        from huggingface_hub import HfFileSystem

        return HfFileSystem(skip_instance_cache=True, **self._storage_options)

    def _path(self, rel: str) -> str:
        return f"{self.url.fs_root}/{rel}" if rel else self.url.fs_root

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Turn file-system errors into RemoteStoreError naming the store and the operation."""
        try:
            yield
        except NeuroncError:
            raise
        except Exception as exc:
            if not _is_storage_error(exc):
                raise
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            msg = f"{self.url.url}: {what} failed: {text}"
            raise RemoteStoreError(msg, hint=_access_hint(self.url)) from exc

    def invalidate(self) -> None:
        """Forget listings the file system cached (other publishers may have written since)."""
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache()

    # -- keys and paths ---------------------------------------------------------------------
    def bundle_rel(self, manifest: Manifest) -> str:
        """The bundle's directory relative to the store root: the local store's layout."""
        local = self.cache.path_for(manifest)
        return local.relative_to(self.cache.root).as_posix()

    def _labels(self) -> list[str]:
        """Every ``<slug>/<label>`` directory (two listings deep; objects are never listed)."""
        fs = self.fs
        root = self._path("")
        labels: list[str] = []
        with self._io("listing"):
            try:
                slugs = fs.ls(root, detail=True)
            except FileNotFoundError:
                return []
            for slug in slugs:
                name = _basename(slug["name"])
                if slug.get("type") != "directory" or name.startswith("."):
                    continue
                try:
                    inner = fs.ls(slug["name"], detail=True)
                except FileNotFoundError:
                    continue
                labels += [f"{name}/{_basename(e['name'])}" for e in inner if e.get("type") == "directory"]
        return sorted(labels)

    def _candidates(self, config_hash: str, toolchain_key: str | None) -> list[str]:
        config_hash = _hex(config_hash, "config hash")
        suffix = f"-{_hex(toolchain_key, 'toolchain key')[:8]}" if toolchain_key else ""
        return [
            f"{label}/{config_hash[:HASH_PREFIX]}" for label in self._labels() if not suffix or label.endswith(suffix)
        ]

    # -- reading ----------------------------------------------------------------------------
    def read_remote_manifest(self, rel: str) -> tuple[Manifest, bytes] | None:
        """The manifest of the bundle at ``rel``, checked as a local one is; None if absent or invalid."""
        path = self._path(f"{rel}/{MANIFEST_NAME}")
        with self._io("reading a manifest"):
            try:
                size = self.fs.info(path).get("size")
            except FileNotFoundError:
                return None
            if not isinstance(size, int) or size > MAX_MANIFEST_BYTES:
                return None
            try:
                raw = self.fs.cat_file(path)
            except FileNotFoundError:
                return None
        try:
            return parse_manifest(raw, where=f"{self.url.url}/{rel}/{MANIFEST_NAME}"), raw
        except BundleFormatError:
            return None

    def missing_objects(self, manifest: Manifest) -> list[str]:
        """Objects a manifest names that are absent or of the wrong size ("sha256 path (why)")."""
        wanted = {f.sha256: f for f in manifest.files}

        def check(sha: str) -> str | None:
            entry = wanted[sha]
            try:
                size = self.fs.info(self._path(object_rel(sha))).get("size")
            except FileNotFoundError:
                return f"{entry.path} (object {sha[:12]} missing)"
            if size != entry.size:
                return f"{entry.path} (object {sha[:12]} is {size} bytes, manifest says {entry.size})"
            return None

        with self._io("checking objects"), ThreadPoolExecutor(_IO_THREADS) as pool:
            return sorted(p for p in pool.map(check, sorted(wanted)) if p)

    def locate(self, config_hash: str, toolchain_key: str) -> str | None:
        """The URL of the complete bundle for these full keys, or None; downloads only manifests."""
        found = self._locate(config_hash, toolchain_key)
        return f"{self.url.url}/{found[0]}" if found else None

    def _locate(self, config_hash: str, toolchain_key: str) -> tuple[str, Manifest, bytes] | None:
        self.invalidate()
        for rel in self._candidates(config_hash, toolchain_key):
            read = self.read_remote_manifest(rel)
            if read is None:
                continue
            manifest, raw = read
            if manifest.config_hash != config_hash.lower() or manifest.toolchain_key != toolchain_key.lower():
                continue
            if not self.missing_objects(manifest):
                return rel, manifest, raw
        return None

    def lookup(self, config_hash: str, toolchain_key: str) -> Path | None:
        """The bundle for these keys as a local directory (fetched into the cache), or None.

        A bundle already in the local cache is used only if the remote still has it: the remote
        store is the source of truth. A bundle built here whose upload was interrupted is
        published now and then returned.
        """
        found = self._locate(config_hash, toolchain_key)
        if found is None:
            return self._resume_pending(config_hash, toolchain_key)
        rel, manifest, raw = found
        return self._materialize(rel, manifest, raw)

    def fetch(self, config_hash: str, toolchain_key: str) -> Path:
        """Like ``lookup`` but raise ``CacheMissError`` (exit 6) on a miss."""
        from neuronc.errors import CacheMissError

        path = self.lookup(config_hash, toolchain_key)
        if path is None:
            msg = f"{self.url.url}: no bundle for config {config_hash[:12]} with toolchain {toolchain_key[:12]}"
            raise CacheMissError(msg)
        return path

    # -- the local cache --------------------------------------------------------------------
    def _object_cache(self, sha256: str) -> Path:
        return self.cache.root / OBJECTS_DIR / sha256[:2] / sha256

    def _materialize(self, rel: str, manifest: Manifest, raw: bytes) -> Path:
        """Fetch a bundle's objects (verifying each) and build it in the cache, manifest last."""
        dest = self.cache.root / rel
        try:
            if read_manifest(dest).to_json_text() == manifest.to_json_text():
                return dest
        except BundleFormatError:
            pass
        with self.cache.lock(manifest.config_hash, manifest.toolchain_key):
            with contextlib.suppress(BundleFormatError):
                if read_manifest(dest).to_json_text() == manifest.to_json_text():
                    return dest
            todo = sorted({f.sha256: f.size for f in manifest.files}.items())
            with ThreadPoolExecutor(_IO_THREADS) as pool:
                list(pool.map(lambda item: self._fetch_object(item[0], item[1]), todo))
            staging = self.cache.staging_dir / f"fetch-{dest.name}-{os.getpid()}-{secrets.token_hex(4)}"
            staging.mkdir(parents=True)
            try:
                for entry in manifest.files:
                    target = staging / entry.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _link_or_copy(self._object_cache(entry.sha256), target)
                (staging / MANIFEST_NAME).write_bytes(raw)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    _discard(dest, self.cache.staging_dir)
                os.rename(staging, dest)
            except BaseException:
                _discard(staging, self.cache.staging_dir)
                raise
        return dest

    def _fetch_object(self, sha256: str, size: int) -> Path:
        """Download one object into the object cache unless it is there; verify size and SHA-256."""
        target = self._object_cache(sha256)
        if target.is_file() and target.stat().st_size == size:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{sha256}.{os.getpid()}.{secrets.token_hex(4)}.part")
        digest = hashlib.sha256()
        read = 0
        try:
            with (
                self._io(f"downloading object {sha256[:12]}"),
                self.fs.open(self._path(object_rel(sha256)), "rb") as src,
                tmp.open("wb") as dst,
            ):
                while read <= size:
                    chunk = src.read(min(_CHUNK, size + 1 - read))
                    if not chunk:
                        break
                    digest.update(chunk)
                    dst.write(chunk)
                    read += len(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            if read != size or digest.hexdigest() != sha256:
                msg = f"{self.url.url}: object {sha256[:12]} failed verification ({read} bytes, expected {size})"
                raise VerificationError(msg, hint="the remote store is damaged; run `neuronc store gc` there")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    # -- locking and writing ----------------------------------------------------------------
    @contextlib.contextmanager
    def lock(
        self,
        config_hash: str,
        toolchain_key: str,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[KeyLock]:
        """A per-key lock on this host (the local cache's). Across hosts the publish protocol keeps
        bundles whole without a lock; two hosts may both compile a key."""
        with self.cache.lock(config_hash, toolchain_key, timeout=timeout, on_wait=on_wait) as held:
            yield held

    def writer(
        self,
        config_hash: str,
        toolchain_key: str | None = None,
        *,
        toolchain: Mapping[str, str | None] | None = None,
        backend: str | None = None,
        model_id: str | None = None,
    ) -> BundleWriter:
        """A BundleWriter that builds into the local cache; ``finish`` then publishes to the remote store."""
        writer = self.cache.writer(config_hash, toolchain_key, toolchain=toolchain, backend=backend, model_id=model_id)
        finish_local = writer.finish

        def finish(manifest_fields: Mapping[str, Any]) -> Path:
            path = finish_local(manifest_fields)
            marker = self._pending_marker(read_manifest(path))
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(str(path), encoding="utf-8")
            self.publish(path)
            marker.unlink(missing_ok=True)
            return path

        # The pipeline calls writer.finish; publishing is what makes the bundle exist remotely.
        setattr(writer, "finish", finish)  # noqa: B010 - replacing a bound method on one instance
        return writer

    def _pending_marker(self, manifest: Manifest) -> Path:
        name = f"{manifest.config_hash[:HASH_PREFIX]}-{manifest.toolchain_key[:HASH_PREFIX]}"
        return self.cache.root / ".pending" / name

    def _resume_pending(self, config_hash: str, toolchain_key: str) -> Path | None:
        name = f"{config_hash[:HASH_PREFIX]}-{toolchain_key[:HASH_PREFIX]}"
        marker = self.cache.root / ".pending" / name
        if not marker.is_file():
            return None
        local = self.cache.lookup(config_hash, toolchain_key)
        if local is None:
            marker.unlink(missing_ok=True)
            return None
        self.publish(local)
        marker.unlink(missing_ok=True)
        return local

    def publish(self, bundle_dir: str | os.PathLike[str]) -> PublishResult:
        """Upload a complete local bundle: verify it, upload missing objects, then the manifest last."""
        from neuronc.bundle import verify_bundle

        start = time.perf_counter()
        bundle = Path(bundle_dir)
        manifest = read_manifest(bundle)
        verify_bundle(bundle, manifest=manifest).raise_for_problems()
        raw = (bundle / MANIFEST_NAME).read_bytes()
        if parse_manifest(raw).to_json_text() != manifest.to_json_text():
            msg = f"{bundle}: manifest changed while publishing"
            raise VerificationError(msg)
        rel = self.bundle_rel(manifest)
        url = f"{self.url.url}/{rel}"
        self.invalidate()
        existing = self.read_remote_manifest(rel)
        if (
            existing is not None
            and existing[0].config_hash == manifest.config_hash
            and existing[0].toolchain_key == manifest.toolchain_key
            and not self.missing_objects(existing[0])
        ):
            return PublishResult(url, "exists", seconds=time.perf_counter() - start)
        objects = {f.sha256: f for f in manifest.files}
        present = {sha for sha in objects if self._object_size(sha) == objects[sha].size}
        upload = [objects[sha] for sha in sorted(objects) if sha not in present]
        result = PublishResult(url, "published", objects_present=len(present))
        if self.url.scheme == "hf":
            self._hf_commit(bundle, rel, upload, raw, manifest)
            result.conditional = None
        else:
            with self._io("uploading objects"), ThreadPoolExecutor(_IO_THREADS) as pool:
                list(
                    pool.map(lambda f: self.fs.put_file(str(bundle / f.path), self._path(object_rel(f.sha256))), upload)
                )
            result.conditional, won = self._write_manifest(rel, raw)
            if not won:
                result.status = "exists"
        result.objects_uploaded = len(upload)
        result.bytes_uploaded = sum(f.size for f in upload)
        result.seconds = time.perf_counter() - start
        return result

    def _object_size(self, sha256: str) -> int | None:
        with self._io("checking an object"):
            try:
                size = self.fs.info(self._path(object_rel(sha256))).get("size")
            except FileNotFoundError:
                return None
        return size if isinstance(size, int) else None

    def _write_manifest(self, rel: str, raw: bytes) -> tuple[bool, bool]:
        """Write the manifest if absent (If-None-Match); return (conditional, won)."""
        path = self._path(f"{rel}/{MANIFEST_NAME}")
        try:
            self.fs.pipe_file(path, raw, mode="create")
            return True, True
        except (OSError, ValueError, TypeError, NotImplementedError) as exc:
            if _precondition_failed(exc):
                current = self.read_remote_manifest(rel)
                if current is not None and not self.missing_objects(current[0]):
                    return True, False  # another publisher won with a complete bundle: reuse it
            elif not _unsupported(exc):
                with self._io("writing the manifest"):
                    raise
        # No conditional writes here (or the winner's bundle is broken): last writer wins.
        with self._io("writing the manifest"):
            self.fs.pipe_file(path, raw)
        return False, True

    def _hf_commit(self, bundle: Path, rel: str, upload: Sequence[Any], raw: bytes, manifest: Manifest) -> None:
        """One Hub commit with the missing objects and the manifest: the Hub applies it atomically."""
        from huggingface_hub import CommitOperationAdd, HfApi

        operations = [
            CommitOperationAdd(
                path_in_repo=self.url.repo_path(object_rel(f.sha256)), path_or_fileobj=str(bundle / f.path)
            )
            for f in upload
        ]
        operations.append(
            CommitOperationAdd(path_in_repo=self.url.repo_path(f"{rel}/{MANIFEST_NAME}"), path_or_fileobj=raw)
        )
        api = getattr(self.fs, "_api", None) or HfApi()
        with self._io("committing to the Hub"):
            api.create_commit(
                repo_id=self.url.container,
                repo_type=self.url.repo_type,
                revision=self.url.revision,
                operations=operations,
                commit_message=f"neuronc: publish {manifest.config_hash[:12]} ({manifest.backend}, {manifest.target})",
            )

    # -- listing and maintenance ------------------------------------------------------------
    def list(self) -> list[RemoteEntry]:
        """Every bundle whose manifest parses, newest first (objects are not checked: see verify_remote)."""
        self.invalidate()
        entries = []
        with self._io("listing"):
            for label in self._labels():
                try:
                    names = self.fs.ls(self._path(label), detail=True)
                except FileNotFoundError:
                    continue
                for item in names:
                    if item.get("type") != "directory":
                        continue
                    rel = f"{label}/{_basename(item['name'])}"
                    read = self.read_remote_manifest(rel)
                    if read is not None:
                        manifest = read[0]
                        entries.append(RemoteEntry(f"{self.url.url}/{rel}", rel, manifest, manifest.total_bytes))
        entries.sort(key=lambda e: e.manifest.created_at, reverse=True)
        return entries

    def find(self, key: str) -> builtins.list[RemoteEntry]:
        """Bundles whose config hash starts with ``key`` (``HASH@TOOLCHAIN`` prefixes work too)."""
        config, _, toolchain = key.strip().lower().partition("@")
        _hex(config, "key")
        return [
            e
            for e in self.list()
            if e.manifest.config_hash.startswith(config) and e.manifest.toolchain_key.startswith(toolchain)
        ]

    def remove(self, key: str) -> builtins.list[RemoteEntry]:
        """Remove the manifests a key names (their objects go at the next gc)."""
        matches = self.find(key)
        if not matches:
            raise InvalidInputError(f"no bundle in {self.url.url} matches '{key}'")
        with self._io("removing"):
            for entry in matches:
                self.fs.rm_file(self._path(f"{entry.rel}/{MANIFEST_NAME}"))
        return matches

    def gc(self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, now: float | None = None) -> RemoteGcReport:
        """Remove objects no manifest names, once they are older than ``grace_seconds``."""
        referenced = {f.sha256 for entry in self.list() for f in entry.manifest.files}
        report = RemoteGcReport()
        now = time.time() if now is None else now
        with self._io("collecting objects"):
            try:
                found = self.fs.find(self._path(OBJECTS_DIR), detail=True)
            except FileNotFoundError:
                found = {}
            for path, info in sorted(found.items()):
                sha = _basename(path)
                if sha in referenced:
                    continue
                modified = _mtime(info)
                if modified is not None and now - modified < grace_seconds:
                    report.kept_young += 1
                    continue
                self.fs.rm_file(path)
                report.removed.append({"path": path, "bytes": info.get("size"), "reason": "unreferenced object"})
        return report


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _hex(value: str, what: str) -> str:
    value = value.lower()
    if len(value) < 4 or any(c not in "0123456789abcdef" for c in value):
        msg = f"{what} must be 4 or more hexadecimal digits, got {value!r}"
        raise InvalidInputError(msg)
    return value


def _mtime(info: Mapping[str, Any]) -> float | None:
    for key in ("LastModified", "last_modified", "mtime"):
        value = info.get(key)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, int | float):
            return float(value)
    return None


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link a verified object into a bundle (copy across file systems)."""
    import shutil

    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _discard(path: Path, trash_dir: Path) -> None:
    import shutil

    trash_dir.mkdir(parents=True, exist_ok=True)
    trash = trash_dir / f"trash-{path.name}-{os.getpid()}-{secrets.token_hex(4)}"
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _error_codes(exc: BaseException) -> set[str]:
    codes: set[str] = set()
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, Mapping):
            error = response.get("Error") or {}
            codes.add(str(error.get("Code", "")))
            meta = response.get("ResponseMetadata") or {}
            codes.add(str(meta.get("HTTPStatusCode", "")))
        codes.add(str(seen))
        seen = seen.__cause__ or seen.__context__
    return codes


def _precondition_failed(exc: BaseException) -> bool:
    text = " ".join(_error_codes(exc))
    return any(word in text for word in ("PreconditionFailed", "412", "pre-condition", "ConditionalRequestConflict"))


def _unsupported(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError | TypeError):
        return True
    text = " ".join(_error_codes(exc))
    return any(word in text for word in ("NotImplemented", "501", "not implemented"))


def _access_hint(url: StoreURL) -> str:
    if url.scheme == "s3":
        return (
            "check the bucket exists and credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; "
            "AWS_ENDPOINT_URL_S3 for S3-compatible servers)"
        )
    return "check the repository exists and HF_TOKEN can read (and write, to publish) it"


__all__ = [
    "DEFAULT_GC_GRACE_SECONDS",
    "OBJECTS_DIR",
    "BundleStore",
    "PublishResult",
    "RemoteEntry",
    "RemoteGcReport",
    "RemoteStore",
    "RemoteStoreError",
    "StoreURL",
    "default_cache_dir",
    "is_remote",
    "object_rel",
    "open_store",
    "parse_store_url",
    "probe",
]
