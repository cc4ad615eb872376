"""A cache repository on the Hub (or any ``HF_ENDPOINT``), with a revision-keyed on-disk cache.

One ``model_info`` call resolves the repository's revision; the registry folders are listed with
scoped tree calls (``<compiler folder>/0_REGISTRY``, recursive) and only the entries a query needs
are downloaded, concurrently. Listings are kept on disk per revision, entry files per git blob id,
and parsed entries in the persistent index keyed by path and blob id, so a repeat lookup costs one
request and parses nothing. ``HF_HUB_OFFLINE`` makes it use the last listing it kept, or fail with
exit 6 when there is none.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import HUB_REFUSED, NETWORK, CacheMissError, foreign_row
from neuronc.fsutil import atomic_write_bytes
from neuronc.hubcache.entries import MAX_ENTRY_BYTES
from neuronc.hubcache.index import IndexFile, read_limited
from neuronc.hubcache.paths import (
    COMPILER_PREFIX,
    REGISTRY_DIR,
    is_registry_candidate,
    parse_registry_path,
    path_problem,
    printable,
)
from neuronc.hubcache.registry import (
    IndexInfo,
    IndexState,
    Query,
    Registry,
    SourceInfo,
    SourceKind,
    select_paths,
)
from neuronc.hubcache.sources import hub_endpoint, local_model_config, resolve_cache_repo
from neuronc.hubcache.table import EntryTable, FileRecord, read_record
from neuronc.jsonfile import InvalidJsonError, read_json
from neuronc.locations import user_cache_dir
from neuronc.model.files import local_model_dir, read_model_config
from neuronc.model.hfcache import hub_offline
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from huggingface_hub import HfApi

_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DOWNLOAD_WORKERS = 8
_TIMEOUT_S = 30.0
_MAX_LISTING_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Listing:
    revision: str
    files: list[tuple[str, str, int]]  # (path, git blob id or LFS sha256, size)
    listed_at: float


class HubSource:
    """A cache repository on the Hub (or any HF_ENDPOINT), with a revision-keyed on-disk cache."""

    def __init__(
        self,
        repo_id: str,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        offline: bool | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        revision: str = "main",
        workers: int = _DOWNLOAD_WORKERS,
        repo_reason: str = "--repo",
    ) -> None:
        self.repo_id = repo_id
        self.repo_reason = repo_reason
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.token = token
        self.offline = hub_offline() if offline is None else offline
        self.revision = revision
        self.workers = max(1, workers)
        root = Path(cache_dir) if cache_dir is not None else user_cache_dir() / "hf-neuron-cache"
        self.cache_root = root
        self._repo_dir = root / _slug(self.endpoint) / repo_id.replace("/", "--")
        self._blob_dir = root / "blobs"
        self.requests = 0
        self._resolved: str | None = None
        self.from_local_copy = False
        self._network_note: str | None = None
        self._listing: Listing | None = None

    @classmethod
    def from_environment(cls, repo: str | None = None, **kwargs: Any) -> HubSource:
        """The repository optimum-neuron would use (``--repo``, CUSTOM_CACHE_REPO, stored file, default)."""
        repo_id, reason = resolve_cache_repo(repo)
        return cls(repo_id, repo_reason=reason, **kwargs)

    def info(self) -> SourceInfo:
        return SourceInfo(
            SourceKind.HUB,
            repo=self.repo_id,
            repo_from=self.repo_reason,
            endpoint=self.endpoint,
            revision=self._resolved,
            offline=self.offline,
            from_local_copy=self.from_local_copy,
        )

    # -- listing ------------------------------------------------------------------------------------
    def _api(self) -> HfApi:
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def resolve_revision(self) -> str:
        """The commit sha of ``revision`` (one request)."""
        self.requests += 1
        try:
            info = self._api().model_info(self.repo_id, revision=self.revision, expand=["sha"], timeout=_TIMEOUT_S)
        except Exception as exc:
            # Not found, gated, no such revision, 401/403: exit 2; the rest (unreachable) goes up to
            # current_listing, which falls back to the local copy.
            row = foreign_row(exc)
            if row is None or row not in HUB_REFUSED:
                raise
            msg = f"cache repository '{self.repo_id}' not found on {self.endpoint}, or not accessible"
            hint = "check --repo / CUSTOM_CACHE_REPO; a private repository needs HF_TOKEN (or `hf auth login`)"
            raise row.convert(exc, msg, hint=hint) from None
        sha = info.sha
        if not isinstance(sha, str) or not _OID.fullmatch(sha):
            raise CacheMissError(f"{self.endpoint} returned no commit sha for '{self.repo_id}'")
        return sha

    def list_registry(self, sha: str) -> Listing:
        """List the repository root, then each compiler folder's registry, recursively (scoped tree calls)."""
        from concurrent.futures import ThreadPoolExecutor

        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
        from huggingface_hub.hf_api import RepoFile

        api = self._api()
        self.requests += 1
        compilers = [
            item.path
            for item in api.list_repo_tree(self.repo_id, revision=sha, recursive=False)
            if not isinstance(item, RepoFile) and item.path.startswith(COMPILER_PREFIX)
        ]

        def list_one(compiler: str) -> list[tuple[str, str, int]]:
            try:
                tree = api.list_repo_tree(
                    self.repo_id, path_in_repo=f"{compiler}/{REGISTRY_DIR}", revision=sha, recursive=True
                )
                # An LFS file's content is named by its sha256, a plain git file's by its blob id.
                return [(f.path, f.lfs.sha256 if f.lfs else f.blob_id, f.size) for f in tree if isinstance(f, RepoFile)]
            except EntryNotFoundError:
                return []
            except HfHubHTTPError as exc:
                if exc.response is not None and exc.response.status_code == 404:
                    return []
                raise

        self.requests += len(compilers)
        files: list[tuple[str, str, int]] = []
        with ThreadPoolExecutor(max_workers=min(self.workers, max(1, len(compilers)))) as pool:
            for part in pool.map(list_one, compilers):
                files.extend(part)
        return Listing(sha, sorted(files), time.time())

    # -- on-disk cache ------------------------------------------------------------------------------
    def _listing_path(self, sha: str) -> Path:
        return self._repo_dir / "revisions" / f"{sha}.json"

    def _load_listing(self, sha: str) -> Listing | None:
        """A listing kept on disk; None (so it is listed again) when missing or not one neuronc wrote."""
        try:
            data = read_json(self._listing_path(sha), max_bytes=_MAX_LISTING_BYTES, what="registry listing")
        except (OSError, InvalidJsonError):
            return None
        if not isinstance(data, dict) or data.get("revision") != sha or not isinstance(data.get("files"), list):
            return None
        files = []
        for item in data["files"]:
            if not (
                isinstance(item, list)
                and len(item) == 3
                and isinstance(item[0], str)
                and isinstance(item[1], str)
                and isinstance(item[2], int)
            ):
                return None
            files.append((item[0], item[1], item[2]))
        listed_at = data.get("listed_at")
        return Listing(sha, files, float(listed_at) if isinstance(listed_at, int | float) else 0.0)

    def _save_listing(self, listing: Listing) -> None:
        import json

        body = {
            "repo": self.repo_id,
            "endpoint": self.endpoint,
            "revision": listing.revision,
            "listed_at": listing.listed_at,
            "files": listing.files,
        }
        atomic_write_bytes(self._listing_path(listing.revision), json.dumps(body).encode(), fsync=False)
        last = json.dumps({"revision": listing.revision}).encode()
        atomic_write_bytes(self._repo_dir / "last.json", last, fsync=False)

    def _last_listing(self) -> Listing | None:
        try:
            last = read_json(self._repo_dir / "last.json", max_bytes=4096)
        except (OSError, InvalidJsonError):
            return None
        revision = last.get("revision") if isinstance(last, dict) else None
        if not isinstance(revision, str) or not _OID.fullmatch(revision):
            return None
        return self._load_listing(revision)

    def blob_path(self, oid: str) -> Path:
        if not _OID.fullmatch(oid):
            msg = f"unexpected blob id {printable(oid)[:80]} in the listing of '{self.repo_id}'"
            raise CacheMissError(msg, hint=f"delete {self._repo_dir} and look up again")
        return self._blob_dir / oid[:2] / oid

    def read_blob(self, oid: str) -> bytes:
        """A downloaded registry file's bytes (at most MAX_ENTRY_BYTES; OSError or ValueError otherwise)."""
        return read_limited(str(self.blob_path(oid)), MAX_ENTRY_BYTES)

    # -- loading ------------------------------------------------------------------------------------
    def current_listing(self) -> Listing:
        """The listing of the current revision: one request when it is already on disk (once per instance)."""
        if self._listing is None:
            self._listing = self._current_listing()
        return self._listing

    def _current_listing(self) -> Listing:
        if self.offline:
            listing = self._last_listing()
            if listing is None:
                msg = f"HF_HUB_OFFLINE is set and there is no local copy of '{self.repo_id}'"
                hint = (
                    "run the same lookup once online, or pass --snapshot DIR "
                    "(made with `neuronc cache mirror DIR` on a connected machine)"
                )
                raise CacheMissError(msg, hint=hint)
            self.from_local_copy = True
            self._resolved = listing.revision
            return listing
        try:
            sha = self.resolve_revision()
            self._resolved = sha
            listing = self._load_listing(sha)
            if listing is None:
                listing = self.list_registry(sha)
                self._save_listing(listing)
            return listing
        except Exception as exc:  # only network failures are handled here; everything else propagates
            if not _unreachable(exc):
                raise
            listing = self._last_listing()
            reason = network_reason(exc)
            if listing is None:
                msg = f"cannot reach {self.endpoint} for '{self.repo_id}': {reason}"
                hint = "check the network or HF_ENDPOINT, or pass --snapshot DIR"
                raise CacheMissError(msg, hint=hint) from None
            self.from_local_copy = True
            self._resolved = listing.revision
            self._network_note = f"cannot reach {self.endpoint} ({reason}); using the local copy"
            return listing

    def load(self, query: Query, progress: ProgressSink = NULL_PROGRESS) -> Registry:
        listing = self.current_listing()
        oids = {path: oid for path, oid, _ in listing.files}
        not_entries: list[tuple[str, str]] = []
        locations = []
        for path, _, _ in listing.files:
            loc = parse_registry_path(path)
            if loc is not None:
                locations.append(loc)
            elif is_registry_candidate(path):
                not_entries.append((printable(path), path_problem(path)))
        selected = select_paths(locations, query)
        # Aliases have the same bytes (same blob id) as their primary file: fetch each blob once.
        missing: dict[str, str] = {}
        for loc in selected:
            oid = oids[loc.path]
            if oid not in missing and not self.blob_path(oid).is_file():
                missing[oid] = loc.path
        skipped: set[str] = set()
        if missing and self.from_local_copy:
            skipped = set(missing)
        elif missing:
            skipped = self.download(missing, progress)
        records, info = self._records(selected, oids, skipped)
        table, _ = EntryTable.build(records, not_entries)
        registry = Registry(self.info(), table, lambda p: self.read_blob(oids[p]), len(locations), [], info)
        if self.from_local_copy:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(listing.listed_at))
            why = self._network_note or "HF_HUB_OFFLINE is set"
            registry.notes.append(f"{why}: using the copy of '{self.repo_id}' at {listing.revision[:12]} from {when}")
            if skipped:
                registry.notes.append(
                    f"{len(skipped)} registry files were never downloaded and are not in the local copy"
                )
        elif skipped:
            registry.notes.append(f"{len(skipped)} registry files could not be downloaded; their entries are missing")
        return registry

    def _records(
        self, selected: list[Any], oids: Mapping[str, str], skipped: set[str]
    ) -> tuple[dict[str, FileRecord], IndexInfo]:
        """Records of the selected files from the index (keyed by path and blob id); parse the others."""
        index = IndexFile("hub", f"{self.endpoint} {self.repo_id}", self.cache_root / "index")
        known = index.load()
        if not isinstance(known, dict):
            known = {}
        records: dict[str, FileRecord] = {}
        parsed: dict[str, tuple[str, FileRecord]] = {}
        for loc in selected:
            oid = oids[loc.path]
            if oid in skipped:
                continue
            hit = known.get(loc.path)
            if isinstance(hit, tuple) and len(hit) == 2 and hit[0] == oid:
                records[loc.path] = hit[1]
                continue
            record: FileRecord
            try:
                record = read_record(loc, self.read_blob(oid))
            except OSError as exc:
                record = f"cannot read: {exc.strerror or exc}"
            except ValueError as exc:
                record = str(exc)
            records[loc.path] = record
            parsed[loc.path] = (oid, record)
        if not parsed:
            return records, IndexInfo(IndexState.WARM if known else IndexState.OFF)
        kept = {path: value for path, value in known.items() if path in oids}
        kept.update(parsed)
        saved = index.save(kept)
        state = IndexState.UPDATED if known else (IndexState.REBUILT if index.found_invalid else IndexState.BUILT)
        return records, IndexInfo(state, len(parsed), saved)

    def download(self, blobs: Mapping[str, str], progress: ProgressSink) -> set[str]:
        """Fetch blobs (oid -> repo path) concurrently into the blob cache; return the oids that failed."""
        from concurrent.futures import ThreadPoolExecutor

        from huggingface_hub import get_session, hf_hub_url

        # Documented in huggingface_hub's utilities reference; not re-exported for type checkers.
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status  # type: ignore[attr-defined]

        assert self._resolved is not None
        headers = build_hf_headers(token=self.token, library_name="neuronc")
        revision = self._resolved
        task = progress.task(f"downloading {len(blobs)} registry entries", total=len(blobs))

        def fetch(item: tuple[str, str]) -> tuple[str, bytes | None]:
            oid, path = item
            url = hf_hub_url(self.repo_id, path, revision=revision, endpoint=self.endpoint)
            try:
                response = get_session().get(url, headers=headers, timeout=_TIMEOUT_S)
                hf_raise_for_status(response)
            except Exception as exc:  # a failed download is reported by count; anything else is a bug
                if foreign_row(exc) is not None:
                    return oid, None
                raise
            data: bytes = response.content
            return oid, data if len(data) <= MAX_ENTRY_BYTES else None

        failed: set[str] = set()
        self.requests += len(blobs)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for oid, data in pool.map(fetch, blobs.items()):
                task.advance()
                if data is None or _content_id(data, oid) != oid:
                    failed.add(oid)
                    continue
                atomic_write_bytes(self.blob_path(oid), data, fsync=False)
        task.done(f"{len(blobs) - len(failed)} downloaded")
        return failed

    def model_config(self, model_id: str, revision: str | None) -> tuple[dict[str, Any] | None, str]:
        """The model's config.json: local directory or HF cache first, then the Hub (unless offline)."""
        config, where = local_model_config(model_id, revision)
        if config is not None or self.offline or local_model_dir(model_id) is not None or "/" not in model_id:
            return config, where
        # Resolve the cache repository first: it fails fast when the Hub is unreachable, where
        # hf_hub_download would retry for about 20 s before giving up.
        self.current_listing()
        if self.from_local_copy:
            return None, f"{where}; the Hub is not reachable"
        from huggingface_hub import hf_hub_download

        try:
            self.requests += 2
            path = hf_hub_download(model_id, "config.json", revision=revision, token=self.token, endpoint=self.endpoint)
        except Exception as exc:  # advisory: without it, entries are matched by model id only
            if foreign_row(exc) is None:
                raise
            return None, f"config.json of '{model_id}' could not be downloaded: {network_reason(exc)}"
        return read_model_config(Path(path).parent), "downloaded from the Hub"


def _unreachable(exc: BaseException) -> bool:
    """A network failure, or an answer that means the Hub is down (5xx, 429): fall back to the local copy."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled) or foreign_row(exc) is NETWORK:
        return True
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    return False


def network_reason(exc: BaseException) -> str:
    """Why a request failed, in words ("connection refused", "timed out"), never a library's repr.

    HTTP libraries wrap the socket error several times over (requests' ConnectionError around
    urllib3's MaxRetryError around NewConnectionError around ConnectionRefusedError; httpx around
    httpcore); the innermost standard-library error says what happened.
    """
    import socket

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return "host name not resolved"
        if isinstance(current, TimeoutError):
            return "timed out"
        if type(current).__module__ == "builtins" and isinstance(current, OSError) and current.errno:
            return os.strerror(current.errno).lower()
        related = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo.extend(e for e in related if isinstance(e, BaseException))
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code}"
    return f"connection failed ({type(exc).__name__})"


def _content_id(data: bytes, like: str) -> str:
    """The id the listing gives for ``data``: sha256 for LFS files (64 hex), else the git blob id."""
    if len(like) == 64:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _slug(endpoint: str) -> str:
    text = endpoint.split("://", 1)[-1]
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in text)
