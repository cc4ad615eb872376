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
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.bundle import MANIFEST_NAME, BundleWriter, Manifest, NewerSchemaError, read_manifest
from neuronc.bundle.fs import LOCK_SUFFIX, TRASH_PREFIX, remove_tree, sweep_work_dir, try_claim
from neuronc.errors import DISK_FULL, BundleFormatError, EnvironmentIncompatibleError, InvalidInputError, foreign_row
from neuronc.fsutil import tree_bytes
from neuronc.store._api import HASH_PREFIX, BundleStore, check_hex, key_name, marker_rel
from neuronc.store._records import (
    GcReport,
    LocalEntry,
    Removed,
    Repair,
    RepairAction,
    StoreEntry,
    Verified,
)

if TYPE_CHECKING:
    from neuronc.bundle.publish import Published

STORE_ENV = "NEURONC_STORE"


def default_store_path() -> Path:
    """bundles/ in the user cache directory (see neuronc.locations): the store when neither --store
    nor $NEURONC_STORE names one (``neuronc.store.open_store`` reads both, URLs included)."""
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


class LocalStore(BundleStore):
    """A directory of complete bundles keyed by (config hash, toolchain key)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        try:
            expanded = Path(root).expanduser()
        except RuntimeError as exc:  # "~nosuchuser/...": Python cannot find that home directory
            msg = f"store {os.fspath(root)}: {exc}"
            raise InvalidInputError(
                msg, hint="name the store's directory without ~user, or with a user that exists"
            ) from None
        self.root = Path(os.path.abspath(expanded))

    @property
    def location(self) -> str:
        return str(self.root)

    @property
    def staging_dir(self) -> Path:
        return self.root / ".staging"

    @property
    def locks_dir(self) -> Path:
        return self.root / ".locks"

    # -- keys and paths ---------------------------------------------------------------------
    def path_for(self, manifest: Manifest) -> Path:
        """Where the bundle with this manifest lives: <store>/<model-slug>/<toolchain-label>/<hash prefix>/.

        The label is the one the build recorded (schema 1.1); a 1.0 manifest gets ``<backend>-<key[:8]>``.
        """
        from neuronc.keys import toolchain_label

        # Scheme 2 keys a local model's weights by their files' digests; scheme 1 by a fingerprint.
        identity = manifest.hashed_inputs.get("weights") or manifest.hashed_inputs.get("model.identity")
        local = isinstance(identity, dict) and ("local_files" in identity or "local_fingerprint" in identity)
        slug = model_slug(manifest.model_id, local=local)
        label = manifest.toolchain_label or toolchain_label(manifest.backend, None, manifest.toolchain)
        return self.root / slug / label / check_hex(manifest.config_hash, "config hash")[:HASH_PREFIX]

    def _candidates(self, config_hash: str, toolchain_key: str) -> builtins.list[Path]:
        config_hash = check_hex(config_hash, "config hash")
        toolchain_key = check_hex(toolchain_key, "toolchain key")
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob(f"*/*-{toolchain_key[:8]}/{config_hash[:HASH_PREFIX]}"))

    # -- the pipeline -----------------------------------------------------------------------
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

    def locate(self, config_hash: str, toolchain_key: str) -> str | None:
        found = self.lookup(config_hash, toolchain_key)
        return None if found is None else str(found)

    def lock_path(self, config_hash: str, toolchain_key: str) -> Path:
        return self.locks_dir / f"{key_name(config_hash, toolchain_key)}{LOCK_SUFFIX}"

    def writer(
        self,
        config_hash: str,
        toolchain_key: str,
        *,
        expected_bytes: int | None = None,
        on_publish: Callable[[Path], Published] | None = None,
    ) -> BundleWriter:
        """A BundleWriter staging inside this store; ``finish`` publishes at this key's path.

        The path (<model-slug>/<toolchain-label>/<hash prefix>) comes from the manifest at finish,
        which must carry these keys. Call it while holding ``lock(config_hash, toolchain_key)``.
        ``on_publish`` runs once the bundle is in place (a remote store uploads it there).
        """
        config_hash = check_hex(config_hash, "config hash")
        expected_tk = check_hex(toolchain_key, "toolchain key")

        def destination(manifest: Manifest) -> Path:
            if manifest.config_hash != config_hash:
                msg = f"manifest config hash {manifest.config_hash[:12]} != store key {config_hash[:12]}"
                raise ValueError(msg)
            if manifest.toolchain_key != expected_tk:
                msg = f"manifest toolchain key {manifest.toolchain_key[:12]} != store key {expected_tk[:12]}"
                raise ValueError(msg)
            return self.path_for(manifest)

        # Leftovers of any key whose writer died (a killed process, a Ray worker ended with its job)
        # go now, not only those of this key: the next build here cleans up after every dead one.
        sweep_work_dir(self.staging_dir)
        return BundleWriter(
            destination,
            overwrite=True,
            work_dir=self.staging_dir,
            name=config_hash[:HASH_PREFIX],
            on_publish=on_publish,
            expected_bytes=expected_bytes,
        )

    def ensure_writable(self) -> None:
        """Create and remove a file in the store's staging directory; exit 5 if that fails."""
        try:
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            probe = self.staging_dir / f".writable-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            if foreign_row(exc) is DISK_FULL:
                from neuronc.fsutil import disk_full_error

                raise disk_full_error(self.root, None, exc) from exc
            msg = f"store {self.root} is not writable: {exc.strerror or exc}"
            raise EnvironmentIncompatibleError(msg, hint="choose another --store or NEURONC_STORE") from exc

    def _marker(self, name: str) -> Path:
        return self.root / marker_rel(name)

    def write_marker(self, name: str, data: bytes) -> None:
        from neuronc.fsutil import atomic_write_bytes

        path = self._marker(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        except OSError as exc:
            msg = f"store {self.root} is not writable: {exc.strerror or exc}"
            raise EnvironmentIncompatibleError(msg, hint="choose another --store or NEURONC_STORE") from exc

    def read_marker(self, name: str) -> bytes | None:
        try:
            return self._marker(name).read_bytes()
        except OSError:
            return None

    def remove_marker(self, name: str) -> None:
        self._marker(name).unlink(missing_ok=True)

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

    def publish(self, bundle_dir: str | os.PathLike[str], *, jobs: int | None = None) -> Published:
        """Copy a complete bundle into the store, checking every file as it copies.

        One read per file: the copy is hashed as it lands and compared with the manifest. The copy is
        byte-identical, manifest included; a bundle already stored under the same keys is reused
        (status ``exists``). Raises BundleFormatError (exit 2) for an unreadable manifest,
        VerificationError (exit 4) naming every problem if the source is not intact, and
        DiskFullError (exit 5) if the store cannot hold it.
        """
        from neuronc.bundle import (
            MAX_FILES,
            copy_bundle,
            manifest_seal_problem,
            parse_manifest,
            read_manifest_bytes,
            verify_bundle,
        )
        from neuronc.bundle.fs import MissingEntry, UnsafeEntry, walk_regular
        from neuronc.bundle.publish import Published, PublishStatus
        from neuronc.bundle.signature import SIGNATURE_NAME
        from neuronc.fsutil import check_free_space

        source = Path(bundle_dir)
        raw = read_manifest_bytes(source)
        manifest = parse_manifest(raw, where=f"{source}/{MANIFEST_NAME}")
        listed = {f.path for f in manifest.files} | {MANIFEST_NAME, SIGNATURE_NAME}
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
                    self._adopt_signature(source, raw, hit)
                    return Published(hit, PublishStatus.EXISTS, str(hit), "already in the store")
                size = manifest.total_bytes + len(raw)
                check_free_space(self.root, size, what=f"bundle {manifest.config_hash[:12]}")
                writer = self.writer(manifest.config_hash, manifest.toolchain_key, expected_bytes=size)
                path = copy_bundle(source, writer)
                return Published(path, PublishStatus.PUBLISHED, str(path))
        except (MissingEntry, UnsafeEntry, ValueError):
            # Name every problem (this second read happens only for a damaged source).
            verify_bundle(source, jobs=jobs).raise_for_problems()
            raise

    def _adopt_signature(self, source: Path, raw: bytes, stored: Path) -> bool:
        """A signed copy of a stored bundle (same manifest bytes) gives the stored bundle its signature;
        whether the stored bundle now holds the source's signature."""
        from neuronc.bundle import read_manifest_bytes
        from neuronc.bundle.signature import read_signature, write_signature

        signature = read_signature(source)
        if signature is None or read_manifest_bytes(stored) != raw:
            return False
        if read_signature(stored) != signature:
            write_signature(stored, signature)
        return True

    def publish_signature(self, bundle_dir: str | os.PathLike[str]) -> str | None:
        """Store the signature of ``bundle_dir`` with the stored bundle of the same manifest bytes."""
        from neuronc.bundle import parse_manifest, read_manifest_bytes
        from neuronc.bundle.signature import SIGNATURE_NAME, read_signature

        source = Path(bundle_dir)
        raw = read_manifest_bytes(source)
        stored = self.path_for(parse_manifest(raw, where=f"{source}/{MANIFEST_NAME}"))
        if read_signature(source) is None or not (stored / MANIFEST_NAME).is_file():
            return None
        return str(stored / SIGNATURE_NAME) if self._adopt_signature(source, raw, stored) else None

    def fetch(self, key: str) -> Path:
        """The stored bundle ``key`` names, as a directory (a local store's bundles are directories already)."""
        [entry] = self.select(key)
        return Path(entry.location)

    # -- listing ----------------------------------------------------------------------------
    def _bundle_dirs(self) -> Iterator[Path]:
        # Directories may vanish while we walk (gc, rm, a concurrent publish replacing one).
        for slug in _subdirs(self.root, skip_hidden=True):
            for label in _subdirs(slug):
                yield from _subdirs(label, skip_hidden=True)

    def _entry(self, path: Path, manifest: Manifest) -> LocalEntry:
        size = manifest.total_bytes + _file_size(path / MANIFEST_NAME)
        return LocalEntry(str(path), path.relative_to(self.root).as_posix(), manifest, size, path)

    def list(self) -> builtins.list[StoreEntry]:
        """Every complete bundle, newest first."""
        entries: builtins.list[StoreEntry] = []
        for path in self._bundle_dirs():
            try:
                manifest = read_manifest(path)
            except BundleFormatError:
                continue
            entries.append(self._entry(path, manifest))
        entries.sort(key=lambda e: e.manifest.created_at, reverse=True)
        return entries

    def find(self, key: str) -> builtins.list[StoreEntry]:
        """Bundles matching a key: a config-hash prefix, ``HASH@TOOLCHAIN`` prefixes, or a store-relative path."""
        if "/" in key.strip():
            target = (self.root / key.strip()).resolve()
            return [e for e in self.list() if Path(e.location).resolve() == target]
        return super().find(key)

    def discard(self, entry: StoreEntry) -> None:
        self.discard_path(Path(entry.location))

    def discard_path(self, path: Path) -> None:
        """Remove a directory of this store: renamed away first so it disappears at once; a missing one is fine."""
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        trash = self.staging_dir / f"{TRASH_PREFIX}{path.name}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        remove_tree(trash)
        for parent in (path.parent, path.parent.parent):
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when empty

    # -- integrity --------------------------------------------------------------------------
    def verify(self, key: str, *, jobs: int | None = None) -> builtins.list[Verified]:
        from neuronc.bundle import verify_bundle

        return [Verified(e, verify_bundle(e.location, jobs=jobs)) for e in self.select(key, all_matches=True)]

    def repair(self, key: str, *, source: str | os.PathLike[str] | None = None) -> builtins.list[Repair]:
        """Verify; replace a damaged bundle by ``source`` when that is the same key and intact, else drop it."""
        from neuronc.bundle import verify_bundle

        results: builtins.list[Repair] = []
        for checked in self.verify(key):
            entry = checked.entry
            if checked.ok:
                results.append(Repair(entry, RepairAction.OK))
                continue
            problems = checked.report.problems()
            size = tree_bytes(Path(entry.location))
            self.discard(entry)
            removed = [Removed(entry.location, size, "failed verification")]
            usable = source is not None and _same_keys(Path(source), entry.manifest) and verify_bundle(source).ok
            if usable and source is not None:
                self.publish(source)
                results.append(Repair(entry, RepairAction.REPAIRED, problems, removed=removed))
            else:
                results.append(Repair(entry, RepairAction.DROPPED, problems, removed=removed))
        return results

    # -- gc ---------------------------------------------------------------------------------
    def gc(self) -> GcReport:
        """Remove staging leftovers, incomplete bundle dirs and stale locks; report bytes freed."""
        report = GcReport()
        for swept in sweep_work_dir(self.staging_dir):
            report.removed.append(Removed(str(swept.path), swept.bytes, swept.reason))
        for path in builtins.list(self._bundle_dirs()):
            reason = _incomplete_reason(path)
            if reason is None:
                continue
            size = tree_bytes(path)
            try:
                self.discard_path(path)
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


def _same_keys(bundle: Path, manifest: Manifest) -> bool:
    try:
        other = read_manifest(bundle)
    except BundleFormatError:
        return False
    return (other.config_hash, other.toolchain_key) == (manifest.config_hash, manifest.toolchain_key)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


__all__ = ["STORE_ENV", "LocalStore", "default_store_path", "model_slug"]
