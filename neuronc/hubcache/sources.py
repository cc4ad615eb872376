"""Where registry entries come from: a local snapshot directory, or a Hub repository.

``SnapshotSource(dir)`` reads a copy with the repository's layout (made by ``neuronc cache mirror``,
a git sparse checkout, or a local compile cache such as ``/var/tmp/neuron-compile-cache``).

``HubSource(repo_id)`` talks to the Hub through huggingface_hub: one ``model_info`` call resolves the
repository's revision; the registry folders are listed with scoped tree calls
(``<compiler folder>/0_REGISTRY``, recursive) and only the entries a query needs are downloaded,
concurrently. Listings are kept on disk per revision and entry files per git blob id, so a repeat
lookup costs one request. ``HF_HUB_OFFLINE`` makes it use the last listing it kept, or fail with
exit 6 when there is none.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from neuronc.errors import CacheMissError, InvalidInputError
from neuronc.hubcache.registry import (
    COMPILER_PREFIX,
    REGISTRY_DIR,
    Query,
    Registry,
    RegistryPath,
    build_registry,
    parse_registry_path,
    select_paths,
)
from neuronc.locations import user_cache_dir
from neuronc.model.files import local_model_dir
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from huggingface_hub import HfApi

DEFAULT_CACHE_REPO = "aws-neuron/optimum-neuron-cache"
DEFAULT_ENDPOINT = "https://huggingface.co"
CUSTOM_CACHE_FILE = "optimum_neuron_custom_cache"
MIRROR_METADATA = ".neuronc-mirror.json"
_TRUE = {"1", "on", "yes", "true"}
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DOWNLOAD_WORKERS = 8
_TIMEOUT_S = 30.0


class RegistrySource(Protocol):
    """Something that can provide registry entries for a query."""

    def describe(self) -> dict[str, Any]: ...

    def load(self, query: Query, progress: ProgressSink = NULL_PROGRESS) -> Registry: ...

    def model_config(self, model_id: str, revision: str | None) -> tuple[dict[str, Any] | None, str]: ...


# --------------------------------------------------------------------------------------------------
# Environment: which repository, which endpoint, offline or not (optimum-neuron's order)
# --------------------------------------------------------------------------------------------------


def hf_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    env = os.environ if environ is None else environ
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface"
    return Path.home() / ".cache" / "huggingface"


def resolve_cache_repo(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The cache repository and why: ``--repo``, ``CUSTOM_CACHE_REPO``, the stored file, the default."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit, "--repo"
    if env.get("CUSTOM_CACHE_REPO"):
        return env["CUSTOM_CACHE_REPO"], "CUSTOM_CACHE_REPO"
    stored = hf_home(env) / CUSTOM_CACHE_FILE
    try:
        name = stored.read_text(encoding="utf-8").strip()
    except OSError:
        name = ""
    if name:
        return name, str(stored)
    return DEFAULT_CACHE_REPO, "default"


def hub_offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to 1/ON/YES/TRUE."""
    env = os.environ if environ is None else environ
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in _TRUE


def hub_endpoint(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_cached_file(repo_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A file of a model repo in the local Hugging Face cache, without importing huggingface_hub.

    Same lookup as ``huggingface_hub.try_to_load_from_cache``: ``refs/<revision>`` names the commit,
    ``snapshots/<commit>/<filename>`` is the file. A 40-hex revision is a commit already.
    """
    env = os.environ
    hub_cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    root = Path(hub_cache).expanduser() if hub_cache else hf_home() / "hub"
    repo_dir = root / f"models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        commit = rev
    else:
        try:
            commit = (repo_dir / "refs" / rev).read_text(encoding="utf-8").strip()
        except OSError:
            return None
    path = repo_dir / "snapshots" / commit / filename
    return path if path.is_file() else None


def local_model_config(
    model_id: str, revision: str | None, base_dir: Path | None = None
) -> tuple[dict[str, Any] | None, str]:
    """A model's config.json from a local directory or the local Hugging Face cache; no network."""
    directory = local_model_dir(model_id, base_dir)
    if directory is not None:
        config = _read_json(directory / "config.json")
        return config, f"{directory}/config.json" if config is not None else f"no readable config.json in {directory}"
    if "/" in model_id and not model_id.startswith((".", "/", "~")):
        cached = hf_cached_file(model_id, "config.json", revision)
        if cached is not None:
            config = _read_json(cached)
            if config is not None:
                return config, "local Hugging Face cache"
    return None, "no config.json in a local directory or the local Hugging Face cache"


# --------------------------------------------------------------------------------------------------
# Snapshot directories
# --------------------------------------------------------------------------------------------------


class SnapshotSource:
    """A local copy of a cache repository (or a local compile cache) with the repository's layout."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        if not self.root.exists():
            msg = f"{root}: no such snapshot directory"
            raise InvalidInputError(msg, hint="make one with `neuronc cache mirror DIR`")
        if not self.root.is_dir():
            msg = f"{root}: not a directory"
            raise InvalidInputError(msg, hint="--snapshot takes the directory `neuronc cache mirror DIR` wrote")
        self._metadata = _read_json(self.root / MIRROR_METADATA)

    def describe(self) -> dict[str, Any]:
        meta = self._metadata or {}
        return {
            "kind": "snapshot",
            "path": str(self.root),
            "repo": meta.get("repo"),
            "revision": meta.get("revision"),
            "mirrored_at": meta.get("created_at"),
        }

    def locations(self) -> list[RegistryPath]:
        """Every registry file in the snapshot (symlinked aliases of a local compile cache included)."""
        found: list[RegistryPath] = []
        try:
            tops = sorted(e.name for e in os.scandir(self.root) if e.name.startswith(COMPILER_PREFIX))
        except OSError as exc:
            msg = f"{self.root}: cannot list snapshot: {exc.strerror}"
            raise InvalidInputError(msg) from None
        for top in tops:
            base = self.root / top / REGISTRY_DIR
            if not base.is_dir():
                continue
            prefix = f"{top}/{REGISTRY_DIR}"
            for rel in _walk_files(str(base)):
                loc = parse_registry_path(f"{prefix}/{rel}")
                if loc is not None:
                    found.append(loc)
        return found

    def load(self, query: Query, progress: ProgressSink = NULL_PROGRESS) -> Registry:
        locations = self.locations()
        root = str(self.root)

        def read(loc: RegistryPath) -> bytes:
            with open(os.path.join(root, loc.path), "rb") as f:  # no pathlib: this runs per entry
                return f.read()

        registry = build_registry(self.describe(), locations, query, read)
        if not locations:
            registry.notes.append(f"no {COMPILER_PREFIX}*/{REGISTRY_DIR} folder under {self.root}")
        return registry

    def model_config(self, model_id: str, revision: str | None) -> tuple[dict[str, Any] | None, str]:
        config, where = local_model_config(model_id, revision)
        if config is None:
            where = (
                "no config.json in a local directory or the local Hugging Face cache, and --snapshot never goes online"
            )
        return config, where


def _walk_files(base: str) -> Iterator[str]:
    stack = [("", base)]
    while stack:
        rel, directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name.endswith(".json"):
                yield name
            elif entry.is_dir():
                stack.append((name, entry.path))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------------
# The Hub
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Listing:
    revision: str
    files: list[tuple[str, str, int]]  # (path, git blob id, size)
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
        self._from_cache = False
        self._network_note: str | None = None
        self._listing: _Listing | None = None

    @classmethod
    def from_environment(cls, repo: str | None = None, **kwargs: Any) -> HubSource:
        """The repository optimum-neuron would use (``--repo``, CUSTOM_CACHE_REPO, stored file, default)."""
        repo_id, reason = resolve_cache_repo(repo)
        return cls(repo_id, repo_reason=reason, **kwargs)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "hub",
            "repo": self.repo_id,
            "repo_from": self.repo_reason,
            "endpoint": self.endpoint,
            "revision": self._resolved,
            "offline": self.offline,
            "from_local_copy": self._from_cache,
        }

    # -- listing ------------------------------------------------------------------------------------
    def _api(self) -> HfApi:
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def resolve_revision(self) -> str:
        """The commit sha of ``revision`` (one request)."""
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        self.requests += 1
        msg = f"cache repository '{self.repo_id}' not found on {self.endpoint}, or not accessible"
        hint = "check --repo / CUSTOM_CACHE_REPO; a private repository needs HF_TOKEN (or `hf auth login`)"
        try:
            info = self._api().model_info(self.repo_id, revision=self.revision, expand=["sha"], timeout=_TIMEOUT_S)
        except (RepositoryNotFoundError, GatedRepoError):
            raise InvalidInputError(msg, hint=hint) from None
        except HfHubHTTPError as exc:
            if exc.response is not None and exc.response.status_code in (401, 403):
                raise InvalidInputError(msg, hint=hint) from None
            raise
        except RevisionNotFoundError:
            msg = f"revision '{self.revision}' not found in '{self.repo_id}'"
            raise InvalidInputError(msg) from None
        sha = info.sha
        if not isinstance(sha, str) or not sha:
            msg = f"{self.endpoint} returned no commit sha for '{self.repo_id}'"
            raise CacheMissError(msg)
        return sha

    def list_registry(self, sha: str) -> _Listing:
        """List the repository root, then each compiler folder's registry, recursively (scoped tree calls)."""
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
        from huggingface_hub.hf_api import RepoFile

        api = self._api()
        self.requests += 1
        compilers = [
            item.path
            for item in api.list_repo_tree(self.repo_id, revision=sha, recursive=False)
            if not isinstance(item, RepoFile) and item.path.startswith(COMPILER_PREFIX)
        ]

        from concurrent.futures import ThreadPoolExecutor

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
        return _Listing(sha, sorted(files), time.time())

    # -- on-disk cache ------------------------------------------------------------------------------
    def _listing_path(self, sha: str) -> Path:
        return self._repo_dir / "revisions" / f"{sha}.json"

    def _load_listing(self, sha: str) -> _Listing | None:
        data = _read_json(self._listing_path(sha))
        if data is None or data.get("revision") != sha or not isinstance(data.get("files"), list):
            return None
        files = [(str(p), str(o), int(s)) for p, o, s in data["files"]]
        return _Listing(sha, files, float(data.get("listed_at", 0)))

    def _save_listing(self, listing: _Listing) -> None:
        body = {
            "repo": self.repo_id,
            "endpoint": self.endpoint,
            "revision": listing.revision,
            "listed_at": listing.listed_at,
            "files": listing.files,
        }
        _write_atomic(self._listing_path(listing.revision), json.dumps(body).encode())
        _write_atomic(self._repo_dir / "last.json", json.dumps({"revision": listing.revision}).encode())

    def _last_listing(self) -> _Listing | None:
        last = _read_json(self._repo_dir / "last.json")
        if last is None or not isinstance(last.get("revision"), str):
            return None
        return self._load_listing(last["revision"])

    def _blob_path(self, oid: str) -> Path:
        if not _OID.fullmatch(oid):
            msg = f"unexpected blob id {oid!r} in the listing of '{self.repo_id}'"
            raise CacheMissError(msg)
        return self._blob_dir / oid[:2] / oid

    # -- loading ------------------------------------------------------------------------------------
    def current_listing(self) -> _Listing:
        """The listing of the current revision: one request when it is already on disk (once per instance)."""
        if self._listing is None:
            self._listing = self._current_listing()
        return self._listing

    def _current_listing(self) -> _Listing:
        if self.offline:
            listing = self._last_listing()
            if listing is None:
                msg = f"HF_HUB_OFFLINE is set and there is no local copy of '{self.repo_id}'"
                hint = (
                    "run the same lookup once online, or pass --snapshot DIR "
                    "(made with `neuronc cache mirror DIR` on a connected machine)"
                )
                raise CacheMissError(msg, hint=hint)
            self._from_cache = True
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
        except (InvalidInputError, CacheMissError):
            raise
        except Exception as exc:
            if not _is_network_error(exc):
                raise
            listing = self._last_listing()
            if listing is None:
                msg = f"cannot reach {self.endpoint} for '{self.repo_id}': {_short(exc)}"
                hint = "check the network or HF_ENDPOINT, or pass --snapshot DIR"
                raise CacheMissError(msg, hint=hint) from None
            self._from_cache = True
            self._resolved = listing.revision
            self._network_note = f"cannot reach {self.endpoint} ({_short(exc)}); using the local copy"
            return listing

    def load(self, query: Query, progress: ProgressSink = NULL_PROGRESS) -> Registry:
        listing = self.current_listing()
        oids = {path: oid for path, oid, _ in listing.files}
        locations = [loc for loc in (parse_registry_path(p) for p, _, _ in listing.files) if loc is not None]
        selected = select_paths(locations, query)
        # Aliases have the same bytes (same blob id) as their primary file: fetch each blob once.
        missing: dict[str, str] = {}
        for loc in selected:
            oid = oids[loc.path]
            if oid not in missing and not self._blob_path(oid).is_file():
                missing[oid] = loc.path
        skipped: set[str] = set()
        if missing and self._from_cache:
            skipped = set(missing)
        elif missing:
            skipped = self._download(missing, progress)

        def read(loc: RegistryPath) -> bytes | None:
            oid = oids[loc.path]
            if oid in skipped:
                return None
            return self._blob_path(oid).read_bytes()

        registry = build_registry(self.describe(), locations, query, read, selected=selected)
        if self._from_cache:
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

    def _download(self, blobs: Mapping[str, str], progress: ProgressSink) -> set[str]:
        """Fetch blobs (oid -> repo path) concurrently into the blob cache; return the oids that failed."""
        from huggingface_hub import get_session, hf_hub_url

        # Documented in huggingface_hub's utilities reference; not re-exported for type checkers.
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status  # type: ignore[attr-defined]

        assert self._resolved is not None
        headers = build_hf_headers(token=self.token, library_name="neuronc")
        revision = self._resolved
        task = progress.task(f"downloading {len(blobs)} registry entries", total=len(blobs))
        failed: set[str] = set()

        def fetch(item: tuple[str, str]) -> tuple[str, bytes | None]:
            oid, path = item
            url = hf_hub_url(self.repo_id, path, revision=revision, endpoint=self.endpoint)
            response = get_session().get(url, headers=headers, timeout=_TIMEOUT_S)
            hf_raise_for_status(response)
            return oid, response.content

        from concurrent.futures import ThreadPoolExecutor

        self.requests += len(blobs)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for oid, data in pool.map(_catching(fetch), blobs.items()):
                task.advance()
                if data is None or _content_id(data, oid) != oid:
                    failed.add(oid)
                    continue
                _write_atomic(self._blob_path(oid), data)
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
        if self._from_cache:
            return None, f"{where}; the Hub is not reachable"
        from huggingface_hub import hf_hub_download

        try:
            self.requests += 2
            path = hf_hub_download(model_id, "config.json", revision=revision, token=self.token, endpoint=self.endpoint)
        except Exception as exc:
            return None, f"config.json of '{model_id}' could not be downloaded: {_short(exc)}"
        data = _read_json(Path(path))
        if data is None:
            return None, f"config.json of '{model_id}' is not a JSON object"
        return data, "downloaded from the Hub"

    def mirror(
        self,
        directory: str | os.PathLike[str],
        *,
        compiler_version: str | None = None,
        optimum_version: str | None = None,
        progress: ProgressSink = NULL_PROGRESS,
    ) -> dict[str, Any]:
        """Copy the registry files (optionally of one compiler / optimum-neuron version) to a directory.

        The copy keeps the repository's paths, so ``SnapshotSource(directory)`` reads it. Only
        ``neuronxcc-*/0_REGISTRY/**.json`` files are fetched (a few kB each), never compiled artifacts.
        ``.neuronc-mirror.json`` (repo, revision, time) is written last; re-running updates the copy.
        """
        from neuronc.hubcache.registry import version_matches

        root = Path(directory).expanduser()
        meta_path = root / MIRROR_METADATA
        if root.exists() and not root.is_dir():
            raise InvalidInputError(f"{directory}: not a directory")
        if root.is_dir() and any(root.iterdir()) and not meta_path.is_file():
            msg = f"{directory}: not empty and not a neuronc mirror"
            raise InvalidInputError(msg, hint="choose an empty or new directory")
        listing = self.current_listing()
        files = []
        for path, oid, size in listing.files:
            loc = parse_registry_path(path)
            if loc is None:
                continue
            if compiler_version and not version_matches(loc.compiler_version, compiler_version):
                continue
            if optimum_version and not version_matches(loc.optimum_version, optimum_version):
                continue
            files.append((loc.path, oid, size))
        missing = {oid: path for path, oid, _ in files if not self._blob_path(oid).is_file()}
        if missing and self._from_cache:
            msg = f"{len(missing)} registry files of '{self.repo_id}' are not in the local copy, and offline"
            raise CacheMissError(msg, hint="mirror on a connected machine (HF_HUB_OFFLINE unset)")
        if missing:
            failed = self._download(missing, progress)
            if failed:
                msg = f"{len(failed)} of {len(missing)} registry files of '{self.repo_id}' could not be downloaded"
                raise CacheMissError(msg, hint="re-run the mirror; files already downloaded are kept")
        previous = _read_json(meta_path) or {}
        wanted = {path for path, _, _ in files}
        for stale in previous.get("paths", []):
            if isinstance(stale, str) and stale not in wanted and parse_registry_path(stale) is not None:
                try:
                    (root / stale).unlink()
                except OSError:
                    pass
        total = 0
        for path, oid, _ in files:
            data = self._blob_path(oid).read_bytes()
            total += len(data)
            target = root / path
            if not (target.is_file() and target.read_bytes() == data):
                _write_atomic(target, data)
        result = {
            "repo": self.repo_id,
            "endpoint": self.endpoint,
            "revision": listing.revision,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "compiler_version": compiler_version,
            "optimum_neuron_version": optimum_version,
            "files": len(files),
            "bytes": total,
            "directory": str(root),
        }
        _write_atomic(meta_path, json.dumps({**result, "paths": sorted(wanted)}, indent=2).encode() + b"\n")
        return result


def _catching(
    fetch: Callable[[tuple[str, str]], tuple[str, bytes | None]],
) -> Callable[[tuple[str, str]], tuple[str, bytes | None]]:
    def run(item: tuple[str, str]) -> tuple[str, bytes | None]:
        try:
            return fetch(item)
        except Exception:
            return item[0], None

    return run


def _content_id(data: bytes, like: str) -> str:
    """The id the listing gives for ``data``: sha256 for LFS files (64 hex), else the git blob id."""
    if len(like) == 64:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _slug(endpoint: str) -> str:
    text = endpoint.split("://", 1)[-1]
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in text)


def _short(exc: BaseException) -> str:
    # requests and urllib3 wrap the socket-level failure in layers whose messages are reprs
    # ("(MaxRetryError('HTTPSConnectionPool(...)"): show the innermost cause, in its own words.
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        reason = getattr(exc, "reason", None)
        first = exc.args[0] if exc.args else None
        inner = next((e for e in (exc.__cause__, reason, first, exc.__context__) if isinstance(e, BaseException)), None)
        if inner is None:
            break
        exc = inner
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _is_network_error(exc: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):
        return True
    # huggingface_hub 0.x talks HTTP through requests (ConnectionError, Timeout); 1.x and later,
    # which transformers 5 requires, through httpx (2.x: its fork httpx2), whose connection failures
    # and timeouts are TransportError. Matched by package and class name: only one of these HTTP
    # libraries is installed (requests is absent beside huggingface_hub 2.x).
    for cls in type(exc).__mro__:
        package = cls.__module__.split(".")[0]
        if package == "requests" and cls.__name__ in ("ConnectionError", "Timeout"):
            return True
        if package in ("httpx", "httpx2") and cls.__name__ == "TransportError":
            return True
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    return False
