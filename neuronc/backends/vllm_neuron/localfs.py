"""Where a vllm-neuron compile may write its cache: a local filesystem, never NFS or Lustre.

The plugin takes a file lock beside every entry while it compiles or checks it, and refuses (or moves
off) a cache on NFS/Lustre, "incompatible with FileLock semantics" (0.21 line ``vllm_neuron/envs.py``
``_path_is_remote_filesystem``: ``stat -f -c %T``, ``nfs*`` or ``lustre``; jinhuang12/vllm-neuron
@0bae3e9c). neuronc's staging directory sits in the store's work tree, which may be a shared mount on a
build farm: the compile's cache root is then staged in a local temporary directory, or the build stops
before compiling, naming the path and the fix.

The filesystem type comes from ``/proc/self/mountinfo`` (the mount whose mount point is the longest
prefix of the resolved path): ``os.statvfs`` does not report ``f_type``, and no well-kept library in
neuronc's dependencies does (psutil's ``disk_partitions`` reads the same table, but is not one of them).
Hand-written for that reason; the format is the kernel's ``proc(5)``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from neuronc.backends.vllm_neuron.facts import REMOTE_FS_PREFIXES
from neuronc.errors import EnvironmentIncompatibleError

MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo`` octal."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def filesystem_type(path: Path, mountinfo: Path | None = None) -> str | None:
    """The type of the filesystem ``path`` is on (``ext4``, ``nfs4``, ``lustre`` ...), or None if unknown."""
    table = mountinfo or MOUNTINFO
    try:
        lines = table.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    resolved = str(Path(os.path.realpath(path)))
    best: tuple[int, str] | None = None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or not after:
            continue
        mount = _unescape(fields[4])
        inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= best[0]):
            best = (len(mount), after[0])
    return best[1] if best else None


def is_remote(fs_type: str | None) -> bool:
    return fs_type is not None and fs_type.lower().startswith(REMOTE_FS_PREFIXES)


def local_cache_root(work_dir: Path) -> tuple[Path, bool]:
    """The directory to stage the compile's cache in, and whether it is a temporary one to remove after.

    ``work_dir/vllm-cache`` when the work directory is local; else a new directory under the system's
    temporary directory (``TMPDIR``) when that is local; else EnvironmentIncompatibleError (exit 5).
    """
    fs_type = filesystem_type(work_dir)
    if not is_remote(fs_type):
        return work_dir / "vllm-cache", False
    tmp = Path(tempfile.gettempdir())
    tmp_type = filesystem_type(tmp)
    if is_remote(tmp_type):
        msg = (
            f"the compile's work directory {work_dir} is on {fs_type} and the temporary directory {tmp} on "
            f"{tmp_type}: the vllm-neuron plugin refuses a compile cache on NFS/Lustre (file locks)"
        )
        hint = "set TMPDIR to a directory on a local filesystem (or run the store's work tree on local disk)"
        raise EnvironmentIncompatibleError(msg, hint=hint)
    return Path(tempfile.mkdtemp(prefix="neuronc-vllm-cache-")), True


__all__ = ["MOUNTINFO", "filesystem_type", "is_remote", "local_cache_root"]
