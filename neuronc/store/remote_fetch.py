"""Reading whole bundles from a remote store: materialise one in the local cache, verify one, repair one."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.bundle import MANIFEST_NAME, FileEntry, FileProblem, Manifest, VerifyReport, read_manifest_bytes
from neuronc.bundle.fs import LOCK_SUFFIX, STAGING_PREFIX, OwnerLock, hash_fd
from neuronc.bundle.signature import SIGNATURE_NAME
from neuronc.errors import BundleFormatError
from neuronc.fsutil import NotRegularFileError, disk_full_as_error, open_regular
from neuronc.store._records import Removed, Repair, RepairAction, StoreEntry, Verified
from neuronc.store.remote_io import FsOp
from neuronc.store.remote_signatures import read_stored_signature, sync_signature
from neuronc.store.remote_transfer import download_object, hash_object, object_problem, upload_files
from neuronc.store.remote_url import OBJECTS_DIR, object_rel

if TYPE_CHECKING:
    from neuronc.store.remote_store import RemoteStore


def repair_hint(store: RemoteStore, config_hash: str) -> str:
    return (
        f"the stored bundle is damaged: `neuronc store verify {config_hash[:12]} --store {store.url.url} --repair` "
        "uploads good copies again from this host, or drops the bundle so that the next compile rebuilds it"
    )


def cached_object(store: RemoteStore, sha256: str) -> Path:
    """Where the local object cache keeps an object."""
    return store.cache.root / OBJECTS_DIR / sha256[:2] / sha256


def _same_manifest(path: Path, raw: bytes) -> bool:
    """Whether the cached bundle at ``path`` has exactly these manifest bytes (``raw`` is already validated)."""
    try:
        return read_manifest_bytes(path) == raw
    except (OSError, BundleFormatError):
        return False


def materialize(store: RemoteStore, rel: str, manifest: Manifest, raw: bytes) -> Path:
    """Build the stored bundle in the local cache: verified objects hard-linked in, manifest last.

    A different bundle already at that path (this host's own build of the key) is replaced. A full
    disk is a DiskFullError (exit 5) naming the cache and the bytes needed; nothing partial stays.
    """
    from neuronc.fsutil import check_free_space

    dest = store.cache.root / rel
    if _same_manifest(dest, raw):
        sync_signature(store.io, rel, manifest, raw, dest)  # signed (or re-signed) since it was fetched
        return dest
    signature = read_stored_signature(store.io, rel, manifest, raw)
    with store.cache.lock(manifest.config_hash, manifest.toolchain_key):
        if _same_manifest(dest, raw):
            sync_signature(store.io, rel, manifest, raw, dest)
            return dest
        wanted = {f.sha256: f for f in manifest.files}
        todo = [entry for sha, entry in sorted(wanted.items()) if not _cached(store, sha, entry.size)]
        needed = sum(entry.size for entry in todo)
        check_free_space(store.cache.root, needed, what=f"bundle {manifest.config_hash[:12]} from {store.url.url}")
        hint = repair_hint(store, manifest.config_hash)

        def fetch(entry: FileEntry) -> Callable[[], Awaitable[None]]:
            return lambda: download_object(store.io, entry, cached_object(store, entry.sha256), hint=hint)

        store.io.run_all("downloading objects", [(entry.size, fetch(entry)) for entry in todo])
        staging, owner = _fetch_staging(store.cache.staging_dir, dest.name)
        try:
            with disk_full_as_error(store.cache.root, len(raw)):
                staging.mkdir()
                for entry in manifest.files:
                    target = staging / entry.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _link_or_copy(cached_object(store, entry.sha256), target)
                if signature is not None:
                    (staging / SIGNATURE_NAME).write_bytes(signature)
                (staging / MANIFEST_NAME).write_bytes(raw)
            if dest.exists():
                store.cache.discard_path(dest)  # this host's own build of the key: the stored one wins
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, dest)
        except BaseException:
            store.cache.discard_path(staging)
            raise
        finally:
            owner.release()
    return dest


def _fetch_staging(staging_dir: Path, name: str) -> tuple[Path, OwnerLock]:
    """A staging path for one fetch and the lock that says its process is alive: a fetch killed midway
    leaves a directory the next writer on this host sweeps (``sweep_work_dir``), as a build's does."""
    staging_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        path = staging_dir / f"{STAGING_PREFIX}fetch-{name}-{os.getpid()}-{secrets.token_hex(4)}"
        owner = OwnerLock.create(path.with_name(path.name + LOCK_SUFFIX))
        if owner is not None:
            return path, owner
    msg = f"cannot create a staging directory in {staging_dir}"
    raise OSError(msg)


def _cached(store: RemoteStore, sha256: str, size: int) -> bool:
    path = cached_object(store, sha256)
    return path.is_file() and path.stat().st_size == size


def verify_entry(store: RemoteStore, entry: StoreEntry) -> Verified:
    """Hash every object ``entry`` names as it streams from the store (nothing is written locally)."""
    manifest = entry.manifest
    report = VerifyReport(bundle=entry.location, jobs=8)
    start = time.perf_counter()
    objects = {f.sha256: f for f in manifest.files}

    def digest(sha: str) -> Callable[[], Awaitable[tuple[str, int] | None]]:
        return lambda: hash_object(store.io, sha, objects[sha].size)

    shas = sorted(objects)
    results = dict(
        zip(shas, store.io.run_all("verifying objects", [(objects[s].size, digest(s)) for s in shas]), strict=True)
    )
    for entry_file in sorted(manifest.files, key=lambda f: f.path):
        report.files_checked += 1
        found = results[entry_file.sha256]
        if found is None:
            report.missing.append(f"{entry_file.path} (object {entry_file.sha256[:12]})")
            continue
        actual_sha, actual_size = found
        report.bytes_hashed += actual_size
        problem = object_problem(entry_file.sha256, entry_file.size, actual_sha, actual_size)
        if problem is not None:
            report.mismatched.append(
                FileProblem(
                    entry_file.path,
                    f"object {entry_file.sha256[:12]}: {problem}",
                    entry_file.size,
                    actual_size,
                    entry_file.sha256,
                    actual_sha,
                )
            )
    report.seconds = time.perf_counter() - start
    return Verified(entry, report)


def _bad_objects(manifest: Manifest, report: VerifyReport) -> dict[str, FileEntry]:
    bad_paths = {p.path for p in report.mismatched} | {m.split(" (object ", 1)[0] for m in report.missing}
    return {f.sha256: f for f in manifest.files if f.path in bad_paths}


def _good_local_copy(store: RemoteStore, entry: FileEntry, source: Path | None) -> Path | None:
    """A local file with exactly this object's bytes: in ``source``, the object cache, or the cached bundle."""
    candidates = [cached_object(store, entry.sha256)]
    if source is not None:
        candidates.insert(0, source / entry.path)
    for path in candidates:
        with contextlib.suppress(OSError, NotRegularFileError):
            fd = open_regular(path, follow_symlinks=False)  # a FIFO here is passed over, not waited on
            try:
                if os.fstat(fd).st_size == entry.size and hash_fd(fd, limit=entry.size)[0] == entry.sha256:
                    return path
            finally:
                os.close(fd)
    return None


def repair_entry(store: RemoteStore, checked: Verified, source: str | os.PathLike[str] | None) -> Repair:
    """Mend one verified bundle: upload good copies of its damaged objects, else drop it."""
    entry, report = checked.entry, checked.report
    if report.ok:
        return Repair(entry, RepairAction.OK)
    problems = report.problems()
    bad = _bad_objects(entry.manifest, report)
    copies = {sha: _good_local_copy(store, f, Path(source) if source else None) for sha, f in bad.items()}
    if all(copies.values()):
        upload_files(store.io, [(path, bad[sha]) for sha, path in copies.items() if path is not None])
        if store.verify(f"{entry.manifest.config_hash}@{entry.manifest.toolchain_key}")[0].ok:
            return Repair(entry, RepairAction.REPAIRED, problems, uploaded=sorted(bad))
    return Repair(entry, RepairAction.DROPPED, problems, removed=_drop(store, set(bad)))


def _drop(store: RemoteStore, bad: set[str]) -> list[Removed]:
    """Delete damaged objects and every manifest that names one: each such bundle is broken."""
    removed: list[Removed] = []
    for other in store.list():
        if bad & {f.sha256 for f in other.manifest.files}:
            store.discard(other)
            removed.append(Removed(other.location, other.size, "names a damaged object"))

    def rm(sha: str) -> Callable[[], Awaitable[Any]]:
        return lambda: store.io.op(FsOp.RM_FILE, store.io.path(object_rel(sha)), missing_ok=True)

    store.io.run_all("removing damaged objects", [(0, rm(sha)) for sha in sorted(bad)])
    for sha in sorted(bad):
        removed.append(Removed(store.io.path(object_rel(sha)), 0, "damaged object"))
        cached_object(store, sha).unlink(missing_ok=True)
    return removed


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link a verified object into a bundle (copy across file systems)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


__all__ = ["cached_object", "materialize", "repair_entry", "repair_hint", "verify_entry"]
