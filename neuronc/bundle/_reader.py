"""Reading and checking bundles: read_manifest, verify_bundle, compare_toolchain.

Nothing here follows a symlink inside a bundle, opens a non-regular file, reads more than a
manifest's declared sizes, or deserialises anything but JSON.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

from neuronc.bundle._manifest import (
    MANIFEST_NAME,
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    FileEntry,
    Manifest,
    manifest_seal_problem,
    parse_manifest,
    safe_text,
)
from neuronc.bundle.fs import (
    MissingEntry,
    UnsafeEntry,
    hash_fd,
    open_in_bundle,
    open_root,
    walk_regular,
)
from neuronc.bundle.signature import SIGNATURE_NAME
from neuronc.errors import BundleFormatError, VerificationError
from neuronc.fsutil import plural, read_fd_upto
from neuronc.progress import NULL_PROGRESS, ProgressSink
from neuronc.resources import default_jobs


def _root(bundle_dir: str | os.PathLike[str]) -> Path:
    path = Path(bundle_dir)
    shown = safe_text(path)
    if not path.exists():
        raise BundleFormatError(f"{shown}: no such bundle directory")
    if not path.is_dir():
        raise BundleFormatError(f"{shown}: not a bundle (not a directory)")
    return Path(os.path.realpath(path))


def read_manifest_bytes(bundle_dir: str | os.PathLike[str]) -> bytes:
    """The raw manifest bytes, read without following symlinks, capped at MAX_MANIFEST_BYTES."""
    root = _root(bundle_dir)
    shown = safe_text(bundle_dir)
    try:
        root_fd = open_root(root)
    except OSError as exc:
        raise BundleFormatError(f"{shown}: cannot open: {exc.strerror}") from None
    try:
        fd = open_in_bundle(root_fd, MANIFEST_NAME, root)
    except MissingEntry:
        hint = "a bundle is complete only once manifest.json exists; an interrupted build leaves none"
        raise BundleFormatError(f"{shown}: not a bundle (no {MANIFEST_NAME})", hint=hint) from None
    except UnsafeEntry as exc:
        raise BundleFormatError(f"{shown}/{MANIFEST_NAME}: {exc}") from None
    finally:
        os.close(root_fd)
    try:
        if os.fstat(fd).st_size > MAX_MANIFEST_BYTES:
            msg = f"{shown}/{MANIFEST_NAME}: larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB"
            raise BundleFormatError(msg)
        return read_fd_upto(fd, MAX_MANIFEST_BYTES)
    finally:
        os.close(fd)


def read_manifest(bundle_dir: str | os.PathLike[str]) -> Manifest:
    """Read and check a bundle's manifest.json; raise BundleFormatError (exit 2) if it is unsafe or invalid."""
    raw = read_manifest_bytes(bundle_dir)
    return parse_manifest(raw, where=f"{safe_text(bundle_dir)}/{MANIFEST_NAME}")


# -- verify -------------------------------------------------------------------------------------


class FileCheck(Enum):
    """What checking one listed file found (``verify_bundle``; the report groups files by it)."""

    OK = "ok"
    MISSING = "missing"
    UNSAFE = "unsafe"
    MISMATCH = "mismatch"


@dataclass
class FileProblem:
    path: str
    reason: str
    expected_size: int | None = None
    actual_size: int | None = None
    expected_sha256: str | None = None
    actual_sha256: str | None = None


# A FileProblem as JSON (dataclasses.asdict): path and reason, sizes and hashes where known.
FileProblemJSON = dict[str, str | int | None]


class VerifyJSON(TypedDict):
    """``VerifyReport.to_json()``: ``verify`` in the reports of `inspect --verify` and `verify`."""

    bundle: str
    ok: bool
    files_checked: int
    bytes_hashed: int
    seconds: float
    jobs: int
    mismatched: list[FileProblemJSON]
    missing: list[str]
    extra: list[str]
    unsafe: list[FileProblemJSON]


@dataclass
class VerifyReport:
    """What ``verify_bundle`` found: every mismatched, missing, extra and unsafe file."""

    bundle: str
    files_checked: int = 0
    bytes_hashed: int = 0
    seconds: float = 0.0
    jobs: int = 1
    mismatched: list[FileProblem] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    unsafe: list[FileProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra or self.unsafe)

    def problems(self) -> list[str]:
        """One line per problem, naming the file."""
        lines = [f"mismatch: {safe_text(p.path)}: {p.reason}" for p in self.mismatched]
        lines += [f"missing: {safe_text(p)}" for p in self.missing]
        lines += [f"extra: {safe_text(p)} (not in the manifest)" for p in self.extra]
        lines += [f"unsafe: {safe_text(p.path)}: {p.reason}" for p in self.unsafe]
        return lines

    def to_json(self) -> VerifyJSON:
        return {
            "bundle": self.bundle,
            "ok": self.ok,
            "files_checked": self.files_checked,
            "bytes_hashed": self.bytes_hashed,
            "seconds": round(self.seconds, 4),
            "jobs": self.jobs,
            "mismatched": [asdict(p) for p in self.mismatched],
            "missing": list(self.missing),
            "extra": list(self.extra),
            "unsafe": [asdict(p) for p in self.unsafe],
        }

    def raise_for_problems(self) -> None:
        """Raise VerificationError (exit 4) naming every problem, if there are any."""
        if self.ok:
            return
        problems = self.problems()
        shown = problems[:50] + ([f"... and {len(problems) - 50} more"] if len(problems) > 50 else [])
        msg = f"{safe_text(self.bundle)}: bundle failed verification ({plural(len(problems), 'problem')})"
        raise VerificationError(msg, details=shown, hint="rebuild or re-download the bundle; do not deploy it")


# Below this, starting threads costs more than hashing in one.
SMALL_BUNDLE_BYTES = 16 * 1024 * 1024


def verify_bundle(
    bundle_dir: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    manifest: Manifest | None = None,
    progress: ProgressSink = NULL_PROGRESS,
) -> VerifyReport:
    """Recompute every file's SHA-256 (files in parallel) and list mismatched, missing and extra files.

    Raises BundleFormatError (exit 2) if the manifest itself is unreadable or unsafe; integrity
    problems are returned in the report (``report.raise_for_problems()`` turns them into exit 4).
    """
    raw = read_manifest_bytes(bundle_dir)
    if manifest is None:
        manifest = parse_manifest(raw, where=f"{safe_text(bundle_dir)}/{MANIFEST_NAME}")
    root = _root(bundle_dir)
    jobs = max(1, jobs or default_jobs(cap=16))  # the cores this process may use (affinity), at most 16
    report = VerifyReport(bundle=str(bundle_dir), jobs=jobs)
    start = time.perf_counter()
    seal = manifest_seal_problem(raw)
    if seal is not None:
        report.mismatched.append(FileProblem(MANIFEST_NAME, seal))
    listed = {f.path for f in manifest.files}
    for rel, why in walk_regular(root, MAX_FILES + 1000):
        if rel in (MANIFEST_NAME, SIGNATURE_NAME) and why is None:
            continue  # the signature is the one file a manifest cannot list (it covers the manifest)
        if why is not None:
            report.unsafe.append(FileProblem(rel, why))
        elif rel not in listed:
            report.extra.append(rel)
    unsafe_paths = {p.path for p in report.unsafe}
    todo = sorted((f for f in manifest.files if f.path not in unsafe_paths), key=lambda f: -f.size)
    total = sum(f.size for f in todo)
    task = progress.task("verifying", total=total, unit="bytes")
    root_fd = open_root(root)
    try:

        def check(entry: FileEntry) -> tuple[FileEntry, FileCheck, FileProblem | None, int]:
            try:
                fd = open_in_bundle(root_fd, entry.path, root)
            except MissingEntry:
                return entry, FileCheck.MISSING, None, 0
            except UnsafeEntry as exc:
                return entry, FileCheck.UNSAFE, FileProblem(entry.path, str(exc)), 0
            try:
                actual_size = os.fstat(fd).st_size
                if actual_size != entry.size:
                    # Never hash past what the manifest declares: a size mismatch is enough.
                    return (
                        entry,
                        FileCheck.MISMATCH,
                        FileProblem(
                            entry.path, f"size {actual_size} != {entry.size} in manifest", entry.size, actual_size
                        ),
                        0,
                    )
                digest, read = hash_fd(fd, limit=entry.size)
            finally:
                os.close(fd)
            task.advance(read)
            if read != entry.size or digest != entry.sha256:
                reason = "content changed (SHA-256 differs)" if read == entry.size else "size changed while reading"
                return (
                    entry,
                    FileCheck.MISMATCH,
                    FileProblem(entry.path, reason, entry.size, read, entry.sha256, digest),
                    read,
                )
            return entry, FileCheck.OK, None, read

        if jobs == 1 or len(todo) <= 1 or total < SMALL_BUNDLE_BYTES:
            results = [check(e) for e in todo]
        else:
            from concurrent.futures import ThreadPoolExecutor  # threads only for large bundles

            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="neuronc-verify") as pool:
                results = list(pool.map(check, todo))
    finally:
        os.close(root_fd)
    for entry, status, problem, read in sorted(results, key=lambda r: r[0].path):
        report.files_checked += 1
        report.bytes_hashed += read
        if status is FileCheck.MISSING:
            report.missing.append(entry.path)
        elif status is FileCheck.UNSAFE and problem is not None:
            report.unsafe.append(problem)
        elif status is FileCheck.MISMATCH and problem is not None:
            report.mismatched.append(problem)
    report.unsafe.sort(key=lambda p: p.path)
    report.seconds = time.perf_counter() - start
    task.done("ok" if report.ok else "FAILED")
    return report


# -- toolchain ----------------------------------------------------------------------------------

IDENTICAL = "identical"
COMPATIBLE = "compatible"
INCOMPATIBLE = "incompatible"


@dataclass
class PackageDifference:
    package: str
    bundle: str | None
    installed: str | None
    verdict: str  # compatible | incompatible
    reason: str

    def to_json(self) -> PackageDifferenceJSON:
        return {
            "package": self.package,
            "bundle": self.bundle,
            "installed": self.installed,
            "verdict": self.verdict,
            "reason": self.reason,
        }


class PackageDifferenceJSON(TypedDict):
    package: str
    bundle: str | None
    installed: str | None
    verdict: str
    reason: str


class ToolchainJSON(TypedDict):
    """``ToolchainComparison.to_json()``."""

    verdict: str
    bundle_toolchain_key: str
    installed_toolchain_key: str
    differences: list[PackageDifferenceJSON]


@dataclass
class ToolchainComparison:
    """How the toolchain a bundle was built with compares with what is installed here."""

    verdict: str
    differences: list[PackageDifference]
    bundle_key: str
    installed_key: str

    def to_json(self) -> ToolchainJSON:
        return {
            "verdict": self.verdict,
            "bundle_toolchain_key": self.bundle_key,
            "installed_toolchain_key": self.installed_key,
            "differences": [d.to_json() for d in self.differences],
        }


def _release(version: str) -> tuple[Any, ...] | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:
        return None


def _compare_package(package: str, built: str | None, installed: str | None) -> PackageDifference | None:
    if built == installed:
        return None
    if built is None:
        return PackageDifference(package, built, installed, COMPATIBLE, "not present when the bundle was built")
    if installed is None:
        return PackageDifference(package, built, installed, INCOMPATIBLE, "not installed here")
    a, b = _release(built), _release(installed)
    if package == "neuronc":
        # neuronc writes bundles but not the compiled artifacts: any release with the same
        # major.minor reads the same manifest schema and loads the same way.
        if a is not None and b is not None and a[:2] == b[:2]:
            return PackageDifference(package, built, installed, COMPATIBLE, "neuronc patch release differs")
        return PackageDifference(package, built, installed, INCOMPATIBLE, "neuronc major or minor version differs")
    if a is not None and b is not None and a == b:
        # Same release, different local label or post/dev suffix (e.g. 2.5.1 vs 2.5.1+cpu): same code.
        return PackageDifference(package, built, installed, COMPATIBLE, "same release, different build label")
    return PackageDifference(
        package, built, installed, INCOMPATIBLE, "version differs (compiled artifacts are tied to it)"
    )


def compare_toolchain(manifest: Manifest, installed: Mapping[str, str | None]) -> ToolchainComparison:
    """Compare a bundle's toolchain with installed versions: identical, compatible or incompatible.

    identical: every recorded version matches exactly. compatible: only neuronc's patch release
    differs, a package differs only by a build label (``2.5.1`` vs ``2.5.1+cpu``), or a package the
    bundle did not have is now installed. incompatible: anything else, including a package the bundle
    recorded that is missing here, and any other version change of the compiler, runtime or
    framework packages a compiled artifact is tied to.
    """
    from neuronc.keys import toolchain_key

    differences: list[PackageDifference] = []
    for package in list(dict.fromkeys([*manifest.toolchain, *installed])):
        if package not in manifest.toolchain and installed.get(package) is None:
            continue
        diff = _compare_package(package, manifest.toolchain.get(package), installed.get(package))
        if diff is not None:
            differences.append(diff)
    if not differences:
        verdict = IDENTICAL
    elif any(d.verdict == INCOMPATIBLE for d in differences):
        verdict = INCOMPATIBLE
    else:
        verdict = COMPATIBLE
    return ToolchainComparison(verdict, differences, manifest.toolchain_key, toolchain_key(dict(installed)))
