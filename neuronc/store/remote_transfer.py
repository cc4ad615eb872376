"""Moving bundle files to and from a remote store: uploads, the manifest's conditional write, verified downloads.

Every function here takes the store's ``RemoteIO``, so each transfer is bounded in time and
cancelled by Ctrl-C like any other remote call (neuronc.store.remote_io).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.bundle import MANIFEST_NAME, FileEntry, Manifest
from neuronc.bundle.publish import PublishStatus
from neuronc.errors import VerificationError
from neuronc.fsutil import disk_full_as_error
from neuronc.store.remote_io import FsOp, RemoteIO, precondition_failed, unsupported
from neuronc.store.remote_url import object_rel

CHUNK = 1 << 20


@dataclass
class UploadResult:
    """What uploading one bundle did."""

    url: str
    status: PublishStatus  # EXISTS: another publisher's manifest was there first
    objects_uploaded: int = 0
    bytes_uploaded: int = 0
    objects_present: int = 0
    seconds: float = 0.0
    conditional: bool | None = None  # whether the manifest was written with If-None-Match
    winner: tuple[Manifest, bytes] | None = field(default=None, repr=False)  # the stored manifest when ``exists``

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": str(self.status),
            "objects_uploaded": self.objects_uploaded,
            "bytes_uploaded": self.bytes_uploaded,
            "objects_present": self.objects_present,
            "seconds": round(self.seconds, 3),
            "conditional": self.conditional,
        }


# -- uploads ------------------------------------------------------------------------------------


def upload_files(io: RemoteIO, sources: Sequence[tuple[Path, FileEntry]]) -> None:
    """Upload each ``(local file, entry)`` to its content-addressed object path, in parallel."""

    def put(local: Path, entry: FileEntry) -> Callable[[], Awaitable[Any]]:
        return lambda: io.op(FsOp.PUT_FILE, str(local), io.path(object_rel(entry.sha256)))

    io.run_all("uploading objects", [(entry.size, put(local, entry)) for local, entry in sources])


def write_manifest(io: RemoteIO, rel: str, raw: bytes) -> str:
    """Write ``rel``'s manifest only if it is absent (If-None-Match: *).

    Returns ``written``, ``exists`` (another publisher's manifest is there) or ``unsupported`` (the
    server has no conditional writes: the caller decides whether to overwrite).
    """
    path = io.path(f"{rel}/{MANIFEST_NAME}")

    async def attempt() -> str:
        try:
            await io.op(FsOp.PIPE_FILE, path, raw, mode="create")
        except (OSError, ValueError, TypeError, NotImplementedError) as exc:
            if precondition_failed(exc):
                return "exists"
            if unsupported(exc):
                return "unsupported"
            raise
        return "written"

    return io.run("writing the manifest", attempt)


def overwrite_manifest(io: RemoteIO, rel: str, raw: bytes) -> None:
    io.call("writing the manifest", FsOp.PIPE_FILE, io.path(f"{rel}/{MANIFEST_NAME}"), raw)


def hf_commit(
    io: RemoteIO,
    rel: str,
    sources: Sequence[tuple[Path, FileEntry]],
    raw: bytes,
    title: str,
    *,
    extra: Mapping[str, bytes] | None = None,
    readme: bytes | None = None,
) -> None:
    """One Hub commit with the missing objects, ``extra`` files (store-relative path: bytes; the
    signature) and the manifest: the Hub applies it atomically. ``readme`` (a model card) becomes
    the repository's README.md when it has none: an existing README is kept."""
    from huggingface_hub import CommitOperationAdd, HfApi

    url = io.url
    operations = [
        CommitOperationAdd(path_in_repo=url.repo_path(object_rel(entry.sha256)), path_or_fileobj=str(local))
        for local, entry in sources
    ]
    operations += [
        CommitOperationAdd(path_in_repo=url.repo_path(path), path_or_fileobj=data)
        for path, data in (extra or {}).items()
    ]
    operations.append(CommitOperationAdd(path_in_repo=url.repo_path(f"{rel}/{MANIFEST_NAME}"), path_or_fileobj=raw))
    api = getattr(io.fs, "_api", None) or HfApi()

    def commit() -> Any:
        ops = list(operations)
        if readme is not None and not api.file_exists(
            url.container, "README.md", repo_type=url.repo_type, revision=url.revision
        ):
            ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme))
        return api.create_commit(
            repo_id=url.container,
            repo_type=url.repo_type,
            revision=url.revision,
            operations=ops,
            commit_message=title,
        )

    size = sum(entry.size for _, entry in sources)
    io.run("committing to the Hub", lambda: asyncio.to_thread(commit), size=size)


# -- downloads ----------------------------------------------------------------------------------


async def chunks(io: RemoteIO, rel: str, limit: int) -> AsyncIterator[bytes]:
    """An object's bytes, at most ``limit`` of them (FileNotFoundError if it is absent)."""
    path = io.path(rel)
    read = 0
    if io.is_async:
        handle = await io.fs.open_async(path, "rb")
        try:
            while read < limit:
                chunk = await handle.read(min(CHUNK, limit - read))
                if not chunk:
                    return
                read += len(chunk)
                yield chunk
        finally:
            await handle.close()  # else the HTTP response stays open until garbage collection
        return
    sync_handle = await asyncio.to_thread(io.fs.open, path, "rb")
    try:
        while read < limit:
            chunk = await asyncio.to_thread(sync_handle.read, min(CHUNK, limit - read))
            if not chunk:
                return
            read += len(chunk)
            yield chunk
    finally:
        await asyncio.to_thread(sync_handle.close)


def object_problem(sha256: str, size: int, actual_sha256: str, actual_size: int) -> str | None:
    """Why an object's bytes do not match the manifest ("size differs", "hash differs"), or None."""
    if actual_size != size:
        return f"size differs: {actual_size} bytes, the manifest says {size}"
    if actual_sha256 != sha256:
        return f"hash differs: SHA-256 {actual_sha256[:12]}..., the manifest says {sha256[:12]}..."
    return None


async def hash_object(io: RemoteIO, sha256: str, size: int) -> tuple[str, int] | None:
    """(SHA-256, bytes) of a stored object, reading at most one byte past ``size``; None if absent."""
    digest = hashlib.sha256()
    read = 0
    try:
        async for chunk in chunks(io, object_rel(sha256), size + 1):
            digest.update(chunk)
            read += len(chunk)
    except FileNotFoundError:
        return None
    return digest.hexdigest(), read


async def download_object(io: RemoteIO, entry: FileEntry, target: Path, *, hint: str) -> None:
    """Download one object to ``target``, checking its size and SHA-256 as it streams; keep nothing bad."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{entry.sha256}.{os.getpid()}.{secrets.token_hex(4)}.part")
    digest = hashlib.sha256()
    read = 0
    try:
        with disk_full_as_error(tmp, entry.size), tmp.open("wb") as dst:
            async for chunk in chunks(io, object_rel(entry.sha256), entry.size + 1):
                digest.update(chunk)
                dst.write(chunk)
                read += len(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        problem = object_problem(entry.sha256, entry.size, digest.hexdigest(), read)
        if problem is not None:
            msg = f"{io.url.url}: {entry.path} (object {entry.sha256[:12]}) failed verification: {problem}"
            raise VerificationError(msg, hint=hint)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = [
    "UploadResult",
    "chunks",
    "download_object",
    "hash_object",
    "hf_commit",
    "object_problem",
    "overwrite_manifest",
    "upload_files",
    "write_manifest",
]
