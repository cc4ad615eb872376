"""``neuronc cache mirror``: copy a cache repository's registry files into a snapshot directory.

Only ``neuronxcc-*/0_REGISTRY/**.json`` files are fetched (a few kB each), never compiled
artifacts; the copy keeps the repository's paths, so ``SnapshotSource(directory)`` reads it.
``.neuronc-mirror.json`` (repository, revision, time, the paths written) is written last and read
back as hostile input: bounded, type-checked, and never used to touch a file outside the mirror.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from neuronc.errors import CacheMissError, InvalidInputError
from neuronc.fsutil import atomic_write_bytes, atomic_write_text
from neuronc.hubcache.entries import MAX_ENTRY_BYTES
from neuronc.hubcache.index import read_limited
from neuronc.hubcache.paths import MIRROR_METADATA, parse_registry_path, printable, version_matches
from neuronc.jsonfile import InvalidJsonError, JsonFields, expect_object, get_field, read_json
from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.hubcache.hub import HubSource

# The metadata lists every path mirrored (about 150 bytes each): room for a million of them.
_MAX_METADATA_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class MirrorMetadata:
    """What ``.neuronc-mirror.json`` says about the copy."""

    repo: str | None
    revision: str | None
    created_at: str | None
    endpoint: str | None
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class MirrorResult(JsonFields):
    """What ``cache mirror`` did (its ``--json``)."""

    repo: str
    endpoint: str
    revision: str
    created_at: str
    compiler_version: str | None
    optimum_neuron_version: str | None
    files: int
    bytes: int
    directory: str


def read_mirror_metadata(path: Path) -> MirrorMetadata:
    """Read ``.neuronc-mirror.json``; InvalidInputError (exit 2) naming the file and the field if it is not ours."""
    where = printable(str(path))
    try:
        doc = expect_object(read_json(path, max_bytes=_MAX_METADATA_BYTES, what="mirror metadata"), where)
    except FileNotFoundError:
        raise InvalidInputError(f"{where}: missing") from None
    except OSError as exc:
        raise InvalidInputError(f"{where}: cannot read: {exc.strerror or exc}") from None
    texts = {name: get_field(doc, name, str, where, required=False) for name in ("repo", "revision", "created_at")}
    endpoint = get_field(doc, "endpoint", str, where, required=False)
    paths = get_field(doc, "paths", list, where, required=False, default=[])
    for i, item in enumerate(paths):
        if not isinstance(item, str):
            raise InvalidJsonError(f"{where}: field 'paths' item {i} must be a string")
    return MirrorMetadata(texts["repo"], texts["revision"], texts["created_at"], endpoint, tuple(paths))


def mirror(
    source: HubSource,
    directory: str | os.PathLike[str],
    *,
    compiler_version: str | None = None,
    optimum_version: str | None = None,
    progress: ProgressSink = NULL_PROGRESS,
) -> MirrorResult:
    """Copy the registry files (optionally of one compiler / optimum-neuron version) to a directory.

    Re-running it updates the copy: files no longer listed are removed (only registry files that the
    previous run wrote, only inside the directory). A non-empty directory that is not a mirror is
    refused, and so is any path that would be written through a link out of the directory.
    """
    root = Path(directory).expanduser()
    shown = printable(os.fspath(directory))
    meta_path = root / MIRROR_METADATA
    if root.exists() and not root.is_dir():
        raise InvalidInputError(f"{shown}: not a directory")
    previous = MirrorMetadata(None, None, None, None)
    if root.is_dir() and any(root.iterdir()):
        if not meta_path.exists():
            raise InvalidInputError(
                f"{shown}: not empty and not a neuronc mirror", hint="choose an empty or new directory"
            )
        try:
            previous = read_mirror_metadata(meta_path)
        except InvalidInputError as exc:
            hint = "remove the directory (or that file) and mirror again"
            raise InvalidInputError(f"not a neuronc mirror: {exc.message}", hint=hint) from None
    listing = source.current_listing()
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
    missing = {oid: path for path, oid, _ in files if not source.blob_path(oid).is_file()}
    if missing and source.from_local_copy:
        msg = f"{len(missing)} registry files of '{source.repo_id}' are not in the local copy, and offline"
        raise CacheMissError(msg, hint="mirror on a connected machine (HF_HUB_OFFLINE unset)")
    if missing:
        failed = source.download(missing, progress)
        if failed:
            msg = f"{len(failed)} of {len(missing)} registry files of '{source.repo_id}' could not be downloaded"
            raise CacheMissError(msg, hint="re-run the mirror; files already downloaded are kept")
    root.mkdir(parents=True, exist_ok=True)
    real = os.path.realpath(root)
    wanted = {path for path, _, _ in files}
    for stale in previous.paths:
        if stale not in wanted and parse_registry_path(stale) is not None:
            target = os.path.join(real, stale)
            if _inside(target, real) and os.path.isfile(target) and not os.path.islink(target):
                with contextlib.suppress(OSError):
                    os.unlink(target)
    total = 0
    for path, oid, _ in files:
        data = source.read_blob(oid)
        total += len(data)
        target = os.path.join(real, path)
        if not _inside(os.path.dirname(target), real, create=True):
            msg = f"{shown}: refusing to write {path} through a symbolic link out of the mirror"
            raise InvalidInputError(msg, hint="remove the link, or mirror into a new directory")
        if _same_bytes(target, data):
            continue
        atomic_write_bytes(target, data, fsync=False)
    result = MirrorResult(
        repo=source.repo_id,
        endpoint=source.endpoint,
        revision=listing.revision,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        compiler_version=compiler_version,
        optimum_neuron_version=optimum_version,
        files=len(files),
        bytes=total,
        directory=str(root),
    )
    import json

    body = {**result.to_json(), "paths": sorted(wanted)}
    atomic_write_text(meta_path, json.dumps(body, indent=2) + "\n")
    return result


def _inside(path: str, root: str, *, create: bool = False) -> bool:
    """Whether ``path`` resolves inside ``root`` (a resolved path); ``create`` makes missing folders first."""
    if create:
        # Created one level at a time below the deepest existing folder, which is checked first.
        existing = path
        while not os.path.exists(existing) and existing != os.path.dirname(existing):
            existing = os.path.dirname(existing)
        if not _inside(existing, root):
            return False
        os.makedirs(path, exist_ok=True)
    resolved = os.path.realpath(path)
    return resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)


def _same_bytes(path: str, data: bytes) -> bool:
    try:
        return read_limited(path, MAX_ENTRY_BYTES) == data
    except (OSError, ValueError):  # missing, not a regular file, or too large: rewrite it
        return False
