"""BundleWriter: build a bundle in staging, hash while writing, write the manifest last, publish atomically."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from neuronc.bundle._files import HashingFile
from neuronc.bundle._manifest import (
    BUNDLE_DIRS,
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    path_problem,
    role_for,
    semantic_problems,
)
from neuronc.bundle.fs import (
    CHUNK,
    LOCK_SUFFIX,
    STAGING_PREFIX,
    TRASH_PREFIX,
    OwnerLock,
    entry_kind,
    fsync_path,
    fsync_tree_dirs,
    hash_fd,
    remove_tree,
    sweep_work_dir,
)
from neuronc.bundle.publish import Published, PublishHook, PublishStatus
from neuronc.bundle.record import BuildRecord, record_manifest
from neuronc.errors import CompileError, InvalidInputError
from neuronc.fsutil import disk_full_as_error

SCRATCH = ".scratch"


class BundleExistsError(InvalidInputError):
    """The destination already holds something and overwriting was not asked for."""

    kind = "bundle_exists"


class BundleWriter:
    """Write one bundle into a staging directory and publish it atomically at ``destination``.

    Args:
        destination: where the finished bundle appears (a store path or an explicit output dir).
        overwrite: replace an existing bundle at ``destination`` (it moves aside first, then goes).
        work_dir: where staging lives; must be on the destination's filesystem (default: its parent).
        on_publish: called with the sealed bundle at ``destination``; what it returns is ``published``
            (a store uses it to upload the bundle). Without it the bundle is published where it lands.
        expected_bytes: the bundle's expected size, if known: named in a full-disk error.

    ``path`` is the staging directory, with ``model/ weights/ artifacts/ deploy/ logs/`` ready. Files
    enter the bundle through ``open``, ``add_file``, ``write_bytes`` or ``adopt``; ``finish`` writes
    ``manifest.json`` last, fsyncs, and renames. Leaving the ``with`` block without ``finish`` (or on
    an exception) removes the staging directory. A process killed at any instant leaves either no
    bundle at ``destination`` or a complete one; its staging leftovers are swept by the next writer
    for the same destination or by ``Store.gc``. A full disk is a ``DiskFullError`` (exit 5) naming
    the file, and the staging directory goes as on any other failure.
    """

    def __init__(
        self,
        destination: str | os.PathLike[str] | Callable[[Manifest], Path],
        *,
        overwrite: bool = False,
        work_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        on_publish: PublishHook | None = None,
        expected_bytes: int | None = None,
    ) -> None:
        if callable(destination):
            # Decided at finish from the manifest (a store places bundles by model and toolchain).
            if work_dir is None:
                msg = "a destination decided at finish needs an explicit work_dir"
                raise ValueError(msg)
            self._resolve: Callable[[Manifest], Path] | None = destination
            self.destination: Path | None = None
            label = name or "bundle"
        else:
            self._resolve = None
            self.destination = Path(os.path.abspath(destination))
            label = self.destination.name
        self.overwrite = overwrite
        self.expected_bytes = expected_bytes
        self._on_publish = on_publish
        self.published: Published | None = None  # set by finish
        if work_dir is not None:
            self.work_dir = Path(os.path.abspath(work_dir))
        else:
            assert self.destination is not None
            self.work_dir = self.destination.parent
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.destination is not None:
            self.destination.parent.mkdir(parents=True, exist_ok=True)
            if not overwrite:
                self._check_destination_free(self.destination)
        self._label = "".join(c if c.isalnum() or c in "._" else "_" for c in label)[:64] or "bundle"
        sweep_work_dir(self.work_dir, self._label)
        self._files: dict[str, FileEntry] = {}
        self._finished: Path | None = None
        self._closed = False
        with disk_full_as_error(self.work_dir, expected_bytes):
            self.path, self._owner = self._make_staging()
            try:
                for sub in BUNDLE_DIRS:
                    (self.path / sub).mkdir()
            except BaseException:
                self.abort()
                raise

    # -- staging ------------------------------------------------------------------------------
    def _make_staging(self) -> tuple[Path, OwnerLock]:
        for _ in range(100):
            name = f"{STAGING_PREFIX}{self._label}-{os.getpid()}-{secrets.token_hex(4)}"
            owner = OwnerLock.create(self.work_dir / (name + LOCK_SUFFIX))
            if owner is None:
                continue
            path = self.work_dir / name
            try:
                path.mkdir(mode=0o755)
            except FileExistsError:
                owner.release()
                continue
            return path, owner
        msg = f"cannot create a staging directory in {self.work_dir}"
        raise OSError(msg)

    @staticmethod
    def _check_destination_free(dest: Path) -> None:
        if dest.is_symlink() or (dest.exists() and not (dest.is_dir() and not any(dest.iterdir()))):
            msg = f"{dest} already exists"
            raise BundleExistsError(msg, hint="choose another output directory, or pass --force to replace it")

    @property
    def scratch_dir(self) -> Path:
        """A private work directory beside the bundle's files: never published, removed at finish or abort."""
        scratch = self.path / SCRATCH
        scratch.mkdir(exist_ok=True)
        return scratch

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    @property
    def weights_dir(self) -> Path:
        return self.path / "weights"

    @property
    def artifacts_dir(self) -> Path:
        return self.path / "artifacts"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def _target(self, rel: str, *, create_parent: bool = True) -> Path:
        self._check_open()
        why = path_problem(rel)
        if why:
            msg = f"bundle path {rel!r}: {why}"
            raise ValueError(msg)
        target = self.path / rel
        if create_parent:
            target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def _check_open(self) -> None:
        if self._closed:
            msg = "this BundleWriter is finished or aborted"
            raise RuntimeError(msg)

    def _record(self, rel: str, role: str | None, size: int, sha256: str) -> FileEntry:
        entry = FileEntry(path=rel, size=size, sha256=sha256, role=role or role_for(rel))
        self._files[rel] = entry
        return entry

    # -- adding files -------------------------------------------------------------------------
    def open(self, rel_path: str, role: str | None = None) -> HashingFile:
        """A new file in the bundle that hashes while it is written; closing it records it."""
        target = self._target(rel_path)
        return HashingFile(self, rel_path, role or role_for(rel_path), target)

    def write_bytes(self, rel_path: str, data: bytes, role: str | None = None) -> FileEntry:
        with self.open(rel_path, role) as f:
            f.write(data)
        return self._files[rel_path]

    def write_text(self, rel_path: str, text: str, role: str | None = None) -> FileEntry:
        return self.write_bytes(rel_path, text.encode("utf-8"), role)

    def add_file(
        self, rel_path: str, role: str | None = None, source_path: str | os.PathLike[str] | None = None
    ) -> FileEntry:
        """Copy ``source_path`` into the bundle (hashing as it copies); with no source, adopt the staged file."""
        if source_path is None:
            return self.adopt(rel_path, role)
        with Path(source_path).open("rb") as src, self.open(rel_path, role) as dst:
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            while n := src.readinto(buffer):
                dst.write(view[:n])
        return self._files[rel_path]

    def adopt(
        self, rel_path: str, role: str | None = None, *, sha256: str | None = None, size: int | None = None
    ) -> FileEntry:
        """Record a file a producer already wrote into staging (hashing it once unless ``sha256`` is given)."""
        target = self._target(rel_path, create_parent=False)
        st = target.lstat()
        if not stat.S_ISREG(st.st_mode):
            msg = f"{rel_path}: only regular files can enter a bundle"
            raise ValueError(msg)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if sha256 is None:
                sha256, actual = hash_fd(fd)
            else:
                actual = os.fstat(fd).st_size
                if size is not None and size != actual:
                    msg = f"{rel_path}: producer reported {size} bytes, the file has {actual}"
                    raise ValueError(msg)
            with disk_full_as_error(target, self.expected_bytes):
                os.fsync(fd)
        finally:
            os.close(fd)
        return self._record(rel_path, role, actual, sha256.lower())

    def write_unlisted(self, name: str, data: bytes) -> None:
        """A top-level file the manifest does not list: only the bundle's signature (``copy_bundle``)."""
        from neuronc.bundle.signature import SIGNATURE_NAME

        if name != SIGNATURE_NAME:
            msg = f"{name}: only the signature ({SIGNATURE_NAME}) may stand beside the listed files"
            raise ValueError(msg)
        self._check_open()
        target = self.path / name
        with disk_full_as_error(target, len(data)), target.open("xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @property
    def files(self) -> dict[str, FileEntry]:
        return dict(self._files)

    # -- finishing ----------------------------------------------------------------------------
    def _adopt_unrecorded(self) -> None:
        shutil.rmtree(self.path / SCRATCH, ignore_errors=True)
        for dirpath, dirnames, filenames in os.walk(self.path):
            for name in dirnames + filenames:
                full = Path(dirpath) / name
                rel = full.relative_to(self.path).as_posix()
                st = full.lstat()
                if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    # Left by the backend (the writer itself writes regular files only): the compile
                    # failed (exit 3), and nothing is published (finish aborts the staging directory).
                    kind = entry_kind(st.st_mode)
                    msg = f"{rel}: the backend left {kind} in the bundle; bundles hold regular files only"
                    hint = f"found in the staging directory {self.path}; a backend must write regular files"
                    raise CompileError(msg, hint=hint)
                if stat.S_ISREG(st.st_mode) and rel not in self._files and rel != MANIFEST_NAME:
                    self.adopt(rel)
        for rel, entry in list(self._files.items()):
            try:
                size = (self.path / rel).lstat().st_size
            except FileNotFoundError:
                msg = f"{rel} was recorded but no longer exists in staging"
                raise ValueError(msg) from None
            if size != entry.size:
                msg = f"{rel} changed after it was recorded ({entry.size} -> {size} bytes)"
                raise ValueError(msg)

    def build_manifest(self, record: BuildRecord) -> Manifest:
        """The manifest ``finish`` would write (files as recorded so far)."""
        manifest = record_manifest(record, self._files)
        problems = semantic_problems(manifest)
        if problems:
            msg = "inconsistent manifest fields: " + "; ".join(problems[:10])
            raise ValueError(msg)
        return manifest

    def finish(self, record: BuildRecord) -> Path:
        """Write manifest.json last, fsync everything, rename into place, publish; return the bundle path.

        ``published`` then says what publishing did (a store's hook may find that another host won the
        race for this key and put the published bundle at the returned path instead).
        """
        self._check_open()
        try:
            self._adopt_unrecorded()
            manifest = self.build_manifest(record)
            return self._seal(manifest, manifest.to_json_text().encode("utf-8"))
        except BaseException:
            self.abort()
            raise

    def finish_copy(self, manifest: Manifest, raw: bytes) -> Path:
        """Publish files copied from another bundle under that bundle's own manifest bytes.

        Every file the manifest lists must have been added with the recorded size and SHA-256, and
        nothing else; the manifest keeps its seal, so the copy is byte-identical.
        """
        self._check_open()
        try:
            shutil.rmtree(self.path / SCRATCH, ignore_errors=True)
            expected = {f.path: (f.size, f.sha256) for f in manifest.files}
            actual = {rel: (e.size, e.sha256) for rel, e in self._files.items()}
            if expected != actual:
                differing = sorted(set(expected.items()) ^ set(actual.items()))
                msg = "copied files differ from the manifest: " + ", ".join(p for p, _ in differing[:10])
                raise ValueError(msg)
            return self._seal(manifest, raw)
        except BaseException:
            self.abort()
            raise

    def _seal(self, manifest: Manifest, raw: bytes) -> Path:
        if self._resolve is not None:
            self.destination = Path(os.path.abspath(self._resolve(manifest)))
            self.destination.parent.mkdir(parents=True, exist_ok=True)
            if not self.overwrite:
                self._check_destination_free(self.destination)
        with disk_full_as_error(self.path / MANIFEST_NAME, len(raw)), (self.path / MANIFEST_NAME).open("xb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        fsync_tree_dirs(self.path)
        self._publish()
        self._closed = True
        self._owner.release()
        assert self.destination is not None
        self._finished = self.destination
        # The bundle is complete here; a hook that fails (an upload) leaves it in place to be retried.
        if self._on_publish is not None:
            self.published = self._on_publish(self.destination)
        else:
            self.published = Published(self.destination, PublishStatus.PUBLISHED, str(self.destination))
        return self.published.path

    def _rename_into(self, dest: Path) -> None:
        """rename(staging, dest), recreating dest's parents if a concurrent gc removed them while empty."""
        for _ in range(100):
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(self.path, dest)  # atomic; replaces an empty directory
                return
            except FileNotFoundError:
                if not self.path.is_dir():
                    raise
        msg = f"cannot publish {dest}: its parent directory keeps disappearing"
        raise OSError(msg)

    def _publish(self) -> None:
        dest = self.destination
        assert dest is not None
        trash: Path | None = None
        try:
            self._rename_into(dest)
        except FileNotFoundError:
            raise
        except OSError:
            if not dest.exists() and not dest.is_symlink():
                raise
            if not self.overwrite:
                msg = f"{dest} already exists"
                raise BundleExistsError(msg, hint="pass --force to replace it") from None
            # Not atomic as a pair: a crash in between leaves no bundle at dest, never a partial one.
            trash = self.work_dir / f"{TRASH_PREFIX}{self._label}-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                os.rename(dest, trash)
            except FileNotFoundError:
                trash = None  # someone (gc, store rm) moved it away first
            self._rename_into(dest)
        fsync_path(dest.parent, directory=True)
        if self.work_dir != dest.parent:
            fsync_path(self.work_dir, directory=True)
        if trash is not None:
            remove_tree(trash)

    def abort(self) -> None:
        """Remove the staging directory; the destination is untouched."""
        if self._closed:
            return
        self._closed = True
        shutil.rmtree(self.path, ignore_errors=True)
        self._owner.release()

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):
                self.abort()


def copy_bundle(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str] | BundleWriter,
    *,
    overwrite: bool = False,
) -> Path:
    """Copy a complete bundle into ``destination`` (a directory, or a writer a store made) and publish
    it atomically: byte-identical, manifest included, each file hashed as it lands and checked
    against the manifest. Symlinks in the source are never followed.

    Raises BundleFormatError (exit 2) for an unreadable manifest, VerificationError (exit 4) for a
    file larger than the manifest says (read no further than one byte past its size), ValueError
    when a copied file differs from the manifest (the source changed or is damaged: nothing is
    published), and
    DiskFullError (exit 5) when the destination cannot hold it.
    """
    from neuronc.bundle._manifest import parse_manifest
    from neuronc.bundle._reader import read_manifest_bytes
    from neuronc.bundle.fs import open_in_bundle, open_root
    from neuronc.bundle.signature import SIGNATURE_NAME, read_signature
    from neuronc.errors import DiskFullError, VerificationError, safe_text
    from neuronc.fsutil import check_free_space, disk_full_error, output_error

    source_dir = Path(source)
    raw = read_manifest_bytes(source_dir)
    manifest = parse_manifest(raw, where=f"{source_dir}/{MANIFEST_NAME}")
    size = manifest.total_bytes + len(raw)
    if isinstance(destination, BundleWriter):
        writer = destination
    else:
        target = Path(os.path.abspath(destination))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent is a file, no permission, a read-only file system
            raise output_error(target, exc, what=f"a copy of bundle {manifest.config_hash[:12]}") from None
        check_free_space(target.parent, size, what=f"a copy of bundle {manifest.config_hash[:12]}")
        writer = BundleWriter(target, overwrite=overwrite, expected_bytes=size)
    try:
        with writer:
            root = Path(os.path.realpath(source_dir))
            root_fd = open_root(root)
            try:
                for entry in manifest.files:
                    fd = open_in_bundle(root_fd, entry.path, root)
                    with os.fdopen(fd, "rb", buffering=0) as src, writer.open(entry.path, entry.role) as dst:
                        # At most one byte past the declared size, as verify reads: a file that grew
                        # (sparse, or still being written) is refused, not copied to its end.
                        left = entry.size + 1
                        while left > 0 and (chunk := src.read(min(CHUNK, left))):
                            left -= len(chunk)
                            if left == 0:
                                shown = f"{safe_text(source_dir)}/{safe_text(entry.path)}"
                                msg = f"{shown}: larger than the {entry.size} bytes the manifest says"
                                raise VerificationError(msg, hint="the bundle changed after it was written: rebuild it")
                            dst.write(chunk)
            finally:
                os.close(root_fd)
            signature = read_signature(root)
            if signature is not None:  # not a listed file: it travels beside the manifest it covers
                writer.write_unlisted(SIGNATURE_NAME, signature)
            return writer.finish_copy(manifest, raw)
    except DiskFullError as exc:
        # Name where the bundle was going, not the staging file that ran out of space.
        raise disk_full_error(writer.destination or writer.work_dir, size, exc.__cause__) from exc


def peak_rss_bytes() -> int:
    """Peak resident set size of this process and its waited-for children, in bytes (0 if unknown)."""
    from neuronc.resources import children_peak_rss_bytes
    from neuronc.resources import peak_rss_bytes as own_peak

    return max(own_peak() or 0, children_peak_rss_bytes() or 0)


__all__ = ["SCRATCH", "BundleExistsError", "BundleWriter", "HashingFile", "copy_bundle", "peak_rss_bytes"]
