"""The local bundle store: complete bundles by (config hash, toolchain key), with per-key locks.

Layout, readable by people; the full keys live in each manifest::

    <store>/<model-slug>/<toolchain-label>/<config-hash[:16]>/   a complete bundle (manifest.json inside)
    <store>/.staging/                                            bundles being written, and trash
    <store>/.locks/<config-hash[:16]>-<toolchain-key[:16]>.lock  one lock per key

Publishing is atomic (``BundleWriter``: staging on the same filesystem, fsync, rename), so every
directory at bundle depth is complete unless someone copied it there by hand; ``gc`` removes those,
staging leftovers of killed builds, and stale locks.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neuronc.bundle import MANIFEST_NAME, BundleWriter, Manifest, NewerSchemaError, read_manifest
from neuronc.bundle._fs import LOCK_SUFFIX, TRASH_PREFIX, remove_tree, sweep_work_dir, tree_bytes, try_claim
from neuronc.errors import BundleFormatError, InvalidInputError

STORE_ENV = "NEURONC_STORE"
HASH_PREFIX = 16
_HEX = re.compile(r"^[0-9a-f]+$")


def default_store_path() -> Path:
    """$NEURONC_STORE, else bundles/ in the user cache directory (see neuronc.locations)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    from neuronc.locations import user_cache_dir

    return user_cache_dir() / "bundles"


def model_slug(model_id: str | None, *, local: bool = False) -> str:
    """A directory name for a model: ``org--name`` for hub ids, ``local--name`` for directories."""
    if not model_id:
        return "unknown-model"
    if local or model_id.startswith(("/", ".", "~")) or os.path.isdir(model_id):
        raw = "local--" + (Path(model_id.rstrip("/")).name or "model")
    else:
        raw = model_id.replace("/", "--")
    safe = "".join(c if c.isalnum() or c in ".-_" else "_" for c in raw).lstrip(".")
    return safe[:100] or "model"


def _check_hex(value: str, what: str) -> str:
    value = value.lower()
    if not _HEX.match(value):
        msg = f"{what} must be hexadecimal, got {value!r}"
        raise InvalidInputError(msg)
    return value


@dataclass
class StoreEntry:
    """One complete bundle in the store."""

    path: Path
    manifest: Manifest
    size: int

    @property
    def key(self) -> str:
        return self.manifest.config_hash[:12]

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        m = self.manifest
        return {
            "key": self.key,
            "config_hash": m.config_hash,
            "toolchain_key": m.toolchain_key,
            "toolchain_label": self.path.parent.name,
            "model": m.model_id,
            "backend": m.backend,
            "target": m.target,
            "size": self.size,
            "created_at": m.created_at,
            "age_seconds": _age(m.created_at, now),
            "path": str(self.path),
        }


def _age(created_at: str, now: float | None) -> float | None:
    try:
        created = datetime.fromisoformat(created_at)
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return round((now if now is not None else time.time()) - created.timestamp(), 1)


@dataclass
class Removed:
    path: str
    bytes: int
    reason: str


@dataclass
class GcReport:
    """What ``Store.gc`` removed and how many bytes that freed."""

    removed: list[Removed] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(r.bytes for r in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes_freed": self.bytes_freed,
            "removed": [{"path": r.path, "bytes": r.bytes, "reason": r.reason} for r in self.removed],
        }


@dataclass
class Nearest:
    """The stored bundle closest to a missed key, and what differs."""

    path: Path
    manifest: Manifest
    differences: list[dict[str, Any]]
    same_toolchain: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "config_hash": self.manifest.config_hash,
            "toolchain_key": self.manifest.toolchain_key,
            "same_toolchain": self.same_toolchain,
            "differences": self.differences,
        }


class KeyLock:
    """An exclusive per-key lock (flock); the kernel frees it if the holder dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self, *, timeout: float | None = None, on_wait: Callable[[str], None] | None = None) -> None:
        """Block until the lock is ours (or raise TimeoutError after ``timeout`` seconds)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.005
        told = False
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    msg = f"timed out waiting for {self.path}"
                    raise TimeoutError(msg) from None
                if not told and on_wait is not None:
                    told = True
                    on_wait(self.holder() or "another process")
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            # gc may have unlinked the file we opened; then our lock guards nothing: start over.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} since {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode())
            self._fd = fd
            return

    def holder(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock; the file stays for the next builder
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0


class Store:
    """A directory of complete bundles keyed by (config hash, toolchain key)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(Path(root).expanduser()))

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    @classmethod
    def default(cls) -> Store:
        """The user's store: $NEURONC_STORE, else the user cache directory (XDG_CACHE_HOME-aware)."""
        return cls(default_store_path())

    @classmethod
    def from_option(cls, value: str | os.PathLike[str] | None) -> Store:
        """The store named by ``--store`` (a directory), else the default."""
        if value is None or str(value) == "":
            return cls.default()
        text = str(value)
        if text.startswith("file://"):
            text = text[len("file://") :]
        elif "://" in text:
            msg = f"--store {text}: remote stores cannot be used here"
            raise InvalidInputError(msg, hint="pass a local directory (remote stores are for publish and fetch)")
        return cls(text)

    @property
    def staging_dir(self) -> Path:
        return self.root / ".staging"

    @property
    def locks_dir(self) -> Path:
        return self.root / ".locks"

    # -- keys and paths ---------------------------------------------------------------------
    def bundle_path(
        self,
        *,
        model_id: str | None,
        backend: str,
        toolchain: Mapping[str, str | None],
        config_hash: str,
        local_model: bool = False,
    ) -> Path:
        """Where the bundle for these keys lives: <store>/<model-slug>/<toolchain-label>/<hash prefix>/."""
        from neuronc.keys import toolchain_label

        config_hash = _check_hex(config_hash, "config hash")
        slug = model_slug(model_id, local=local_model)
        return self.root / slug / toolchain_label(backend, toolchain) / config_hash[:HASH_PREFIX]

    def path_for(self, manifest: Manifest) -> Path:
        """Where the bundle with this manifest lives in this store."""
        identity = manifest.hashed_inputs.get("model.identity")
        return self.bundle_path(
            model_id=manifest.model_id,
            backend=manifest.backend,
            toolchain=manifest.toolchain,
            config_hash=manifest.config_hash,
            local_model=isinstance(identity, dict) and "local_fingerprint" in identity,
        )

    def _candidates(self, config_hash: str, toolchain_key: str) -> list[Path]:
        config_hash = _check_hex(config_hash, "config hash")
        toolchain_key = _check_hex(toolchain_key, "toolchain key")
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob(f"*/*-{toolchain_key[:8]}/{config_hash[:HASH_PREFIX]}"))

    def lookup(self, config_hash: str, toolchain_key: str) -> Path | None:
        """The complete bundle for these full keys, or None (incomplete or unreadable dirs do not count)."""
        for path in self._candidates(config_hash, toolchain_key):
            try:
                manifest = read_manifest(path)
            except BundleFormatError:
                continue
            if manifest.config_hash == config_hash.lower() and manifest.toolchain_key == toolchain_key.lower():
                return path
        return None

    @contextlib.contextmanager
    def lock(
        self,
        config_hash: str,
        toolchain_key: str,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[KeyLock]:
        """Hold the per-key lock: concurrent builders of one key compile once, the others wait and reuse.

        ``on_wait(holder)`` is called once if another process holds the lock.
        """
        config_hash = _check_hex(config_hash, "config hash")
        toolchain_key = _check_hex(toolchain_key, "toolchain key")
        name = f"{config_hash[:HASH_PREFIX]}-{toolchain_key[:HASH_PREFIX]}{LOCK_SUFFIX}"
        key_lock = KeyLock(self.locks_dir / name)
        key_lock.acquire(timeout=timeout, on_wait=on_wait)
        try:
            yield key_lock
        finally:
            key_lock.release()

    def writer(
        self,
        config_hash: str,
        toolchain_key: str | None = None,
        *,
        toolchain: Mapping[str, str | None] | None = None,
        backend: str | None = None,
        model_id: str | None = None,
    ) -> BundleWriter:
        """A BundleWriter staging inside this store; ``finish`` publishes at this key's path.

        The path (<model-slug>/<toolchain-label>/<hash prefix>) comes from the manifest at finish,
        which must carry these keys. Call it while holding ``lock(config_hash, toolchain_key)``.
        """
        from neuronc.keys import toolchain_key as compute_toolchain_key

        config_hash = _check_hex(config_hash, "config hash")
        if toolchain_key is None and toolchain is not None:
            toolchain_key = compute_toolchain_key(dict(toolchain))
        expected_tk = _check_hex(toolchain_key, "toolchain key") if toolchain_key else None

        def destination(manifest: Manifest) -> Path:
            if manifest.config_hash != config_hash:
                msg = f"manifest config hash {manifest.config_hash[:12]} != store key {config_hash[:12]}"
                raise ValueError(msg)
            if expected_tk is not None and manifest.toolchain_key != expected_tk:
                msg = f"manifest toolchain key {manifest.toolchain_key[:12]} != store key {expected_tk[:12]}"
                raise ValueError(msg)
            for what, given, recorded in (
                ("backend", backend, manifest.backend),
                ("model", model_id, manifest.model_id),
            ):
                if given is not None and given != recorded:
                    msg = f"manifest {what} {recorded!r} != {given!r} given to Store.writer"
                    raise ValueError(msg)
            return self.path_for(manifest)

        return BundleWriter(destination, overwrite=True, work_dir=self.staging_dir, name=config_hash[:HASH_PREFIX])

    def get_or_build(
        self,
        config_hash: str,
        toolchain_key: str,
        build: Callable[[], Path],
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> tuple[Path, bool]:
        """Return (bundle, built): reuse a stored bundle, or build it once under the key lock."""
        hit = self.lookup(config_hash, toolchain_key)
        if hit is not None:
            return hit, False
        with self.lock(config_hash, toolchain_key, timeout=timeout, on_wait=on_wait):
            hit = self.lookup(config_hash, toolchain_key)
            if hit is not None:
                return hit, False
            return build(), True

    def publish(self, bundle_dir: str | os.PathLike[str], *, jobs: int | None = None) -> Path:
        """Copy a complete bundle into the store, checking every file as it copies; return its store path.

        One read per file: the copy is hashed as it lands and compared with the manifest. The copy is
        byte-identical, manifest included; a bundle already stored under the same keys is reused.
        Raises BundleFormatError (exit 2) for an unreadable manifest and VerificationError (exit 4)
        naming every problem if the source is not intact.
        """
        from neuronc.bundle import read_manifest_bytes, verify_bundle
        from neuronc.bundle._fs import MissingEntry, UnsafeEntry, walk_regular
        from neuronc.bundle._manifest import MAX_FILES, manifest_seal_problem, parse_manifest

        source = Path(bundle_dir)
        raw = read_manifest_bytes(source)
        manifest = parse_manifest(raw, where=f"{source}/{MANIFEST_NAME}")
        listed = {f.path for f in manifest.files} | {MANIFEST_NAME}
        root = Path(os.path.realpath(source))
        intact = manifest_seal_problem(raw) is None and all(
            why is None and rel in listed for rel, why in walk_regular(root, MAX_FILES + 1000)
        )
        try:
            if not intact:
                raise ValueError
            with self.lock(manifest.config_hash, manifest.toolchain_key):
                hit = self.lookup(manifest.config_hash, manifest.toolchain_key)
                if hit is not None:
                    return hit
                with self.writer(manifest.config_hash, manifest.toolchain_key) as writer:
                    _copy_files(source, manifest, writer)
                    return writer.finish_copy(manifest, raw)
        except (MissingEntry, UnsafeEntry, ValueError):
            # Name every problem (this second read happens only for a damaged source).
            verify_bundle(source, jobs=jobs).raise_for_problems()
            raise

    # -- listing ----------------------------------------------------------------------------
    def _bundle_dirs(self) -> Iterator[Path]:
        # Directories may vanish while we walk (gc, rm, a concurrent publish replacing one).
        for slug in _subdirs(self.root, skip_hidden=True):
            for label in _subdirs(slug):
                yield from _subdirs(label, skip_hidden=True)

    def list(self) -> list[StoreEntry]:
        """Every complete bundle, newest first."""
        entries = []
        for path in self._bundle_dirs():
            try:
                manifest = read_manifest(path)
            except BundleFormatError:
                continue
            size = manifest.total_bytes + _file_size(path / MANIFEST_NAME)
            entries.append(StoreEntry(path, manifest, size))
        entries.sort(key=lambda e: e.manifest.created_at, reverse=True)
        return entries

    def find(self, key: str) -> builtins.list[StoreEntry]:
        """Bundles matching a key: a config-hash prefix, ``HASH@TOOLCHAIN`` prefixes, or a store-relative path."""
        key = key.strip()
        entries = self.list()
        if "/" in key:
            target = (self.root / key).resolve()
            return [e for e in entries if e.path.resolve() == target]
        config, _, toolchain = key.lower().partition("@")
        if len(config) < 4 or not _HEX.match(config) or (toolchain and not _HEX.match(toolchain)):
            msg = f"'{key}' is not a key (a config-hash prefix of 4+ hex digits, optionally @toolchain-prefix)"
            raise InvalidInputError(msg, hint="see `neuronc store list`")
        return [
            e
            for e in entries
            if e.manifest.config_hash.startswith(config) and e.manifest.toolchain_key.startswith(toolchain)
        ]

    def remove(self, key: str, *, all_matches: bool = False) -> builtins.list[StoreEntry]:
        """Remove the bundle(s) a key names; raise if it names none, or several without ``all_matches``."""
        matches = self.find(key)
        if not matches:
            msg = f"no bundle in {self.root} matches '{key}'"
            raise InvalidInputError(msg, hint="see `neuronc store list`")
        if len(matches) > 1 and not all_matches:
            msg = f"'{key}' matches {len(matches)} bundles"
            details = [f"{e.manifest.config_hash[:16]}@{e.manifest.toolchain_key[:8]}  {e.path}" for e in matches]
            raise InvalidInputError(msg, details=details, hint="give a longer prefix, HASH@TOOLCHAIN, or --all")
        for entry in matches:
            self._discard(entry.path)
        return matches

    def _discard(self, path: Path) -> None:
        # Rename first so the bundle disappears atomically, then delete at leisure.
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        trash = self.staging_dir / f"{TRASH_PREFIX}{path.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(path, trash)
        remove_tree(trash)
        for parent in (path.parent, path.parent.parent):
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when empty

    # -- gc ---------------------------------------------------------------------------------
    def gc(self) -> GcReport:
        """Remove staging leftovers, incomplete bundle dirs and stale locks; report bytes freed."""
        report = GcReport()
        for swept in sweep_work_dir(self.staging_dir):
            report.removed.append(Removed(str(swept.path), swept.bytes, swept.reason))
        for path in list(self._bundle_dirs()):
            reason = _incomplete_reason(path)
            if reason is None:
                continue
            size = tree_bytes(path)
            try:
                self._discard(path)
            except OSError:
                continue
            report.removed.append(Removed(str(path), size, reason))
        if self.locks_dir.is_dir():
            for lock_path in sorted(self.locks_dir.glob(f"*{LOCK_SUFFIX}")):
                fd = try_claim(lock_path)
                if fd is None:
                    continue  # held: a build is running
                try:
                    lock_path.unlink()
                    report.removed.append(Removed(str(lock_path), 0, "stale lock"))
                except FileNotFoundError:
                    pass
                finally:
                    os.close(fd)
        self._remove_empty_dirs()
        return report

    def _remove_empty_dirs(self) -> None:
        for slug in _subdirs(self.root, skip_hidden=True):
            for label in _subdirs(slug):
                with contextlib.suppress(OSError):
                    label.rmdir()  # only when empty; a publisher recreates it if it needs it
            with contextlib.suppress(OSError):
                slug.rmdir()

    # -- nearest ----------------------------------------------------------------------------
    def nearest(
        self,
        hashed_inputs: Mapping[str, Any],
        *,
        toolchain_key: str | None = None,
        backend: str | None = None,
    ) -> Nearest | None:
        """The stored bundle whose hashed inputs differ from ``hashed_inputs`` in the fewest fields."""
        from neuronc.keys import diff_inputs

        best: tuple[tuple[int, int, str], Nearest] | None = None
        for entry in self.list():
            m = entry.manifest
            if backend is not None and m.backend != backend:
                continue
            differences = diff_inputs(m.hashed_inputs, dict(hashed_inputs))
            same_toolchain = toolchain_key is None or m.toolchain_key == toolchain_key
            rank = (len(differences), 0 if same_toolchain else 1, m.config_hash)
            if best is None or rank < best[0]:
                best = (rank, Nearest(entry.path, m, differences, same_toolchain))
        return best[1] if best else None


def _copy_files(source: Path, manifest: Manifest, writer: BundleWriter) -> None:
    """Copy the listed files without following symlinks; the writer hashes them as they land."""
    from neuronc.bundle._fs import CHUNK, open_in_bundle, open_root

    root = Path(os.path.realpath(source))
    root_fd = open_root(root)
    try:
        for entry in manifest.files:
            fd = open_in_bundle(root_fd, entry.path, root)
            with os.fdopen(fd, "rb", buffering=0) as src, writer.open(entry.path, entry.role) as dst:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
    finally:
        os.close(root_fd)


def _subdirs(path: Path, *, skip_hidden: bool = False) -> builtins.list[Path]:
    """Real (non-symlink) subdirectories, sorted; an unreadable or vanished directory has none."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return []
    return [
        Path(e.path)
        for e in entries
        if not (skip_hidden and e.name.startswith(".")) and e.is_dir(follow_symlinks=False)
    ]


def _incomplete_reason(path: Path) -> str | None:
    if not (path / MANIFEST_NAME).exists() and not (path / MANIFEST_NAME).is_symlink():
        return "incomplete (no manifest)"
    try:
        read_manifest(path)
    except NewerSchemaError:
        return None  # a newer neuronc's bundle: not ours to judge
    except BundleFormatError:
        return "unreadable manifest"
    return None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


__all__ = [
    "STORE_ENV",
    "GcReport",
    "KeyLock",
    "Nearest",
    "Removed",
    "Store",
    "StoreEntry",
    "default_store_path",
    "model_slug",
]
