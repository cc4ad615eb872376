"""The files of a local compile-cache entry that `cache synchronize` may publish, links included.

libneuronxla writes a compiled graph's files as regular files. A graph optimum-neuron fetched from
a Hub cache during an export is different: ``CompileCacheHfProxy`` downloads each file with
``hf_hub_download`` and links it into the local cache (optimum-neuron 0.4.5
``optimum/neuron/cache/hub_cache.py``; shared/reference/hf-neuron-cache.md §1.3), so ``model.neff``
is a symbolic link into ``$HF_HUB_CACHE/models--*/blobs/``. Such a link is published with its
content when it resolves to a blob of the Hugging Face cache whose content is what its name says
(the SHA-256 of an LFS file, or the git blob id of a small one); any other link (out of the cache:
``/etc/shadow``, a FIFO, another user's file) is refused, and its whole entry is left out.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from neuronc.errors import printable
from neuronc.fsutil import NotRegularFileError, file_kind, open_regular

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}\Z")


def module_file(path: Path) -> tuple[Path | None, str | None]:
    """``(file to publish, None)``; ``(None, None)`` when absent; ``(None, why)`` when it must not be published."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if stat.S_ISREG(info.st_mode):
        return path, None
    if not stat.S_ISLNK(info.st_mode):
        return None, f"is {file_kind(info.st_mode)}, not a regular file"
    return hub_blob(path)


def hub_blob(link: Path) -> tuple[Path | None, str | None]:
    """The Hugging Face cache blob a link resolves to, checked against its name; or why it is refused."""
    from neuronc.model.hfcache import hub_cache_dir

    target = os.path.realpath(link)
    hub = os.path.realpath(hub_cache_dir())
    blob = Path(target)
    inside = target.startswith(hub.rstrip(os.sep) + os.sep)
    if not inside or blob.parent.name != "blobs" or not blob.parent.parent.name.startswith("models--"):
        return None, (
            f"a link to {printable(target)}, not to a blob of the Hugging Face cache ({printable(hub)}): not published"
        )
    try:
        fd = open_regular(blob, follow_symlinks=False)
    except NotRegularFileError:
        return None, f"a link to {printable(target)}, not to a regular file: not published"
    except OSError as exc:
        return None, f"a link to {printable(target)}: {exc.strerror or exc}"
    try:
        digest = _content_id(fd, blob.name)
    finally:
        os.close(fd)
    if digest != blob.name:
        return None, f"a link to {printable(target)}, whose content is not what its blob name says: not published"
    return blob, None


def _content_id(fd: int, name: str) -> str | None:
    """The id the Hub names a blob by: SHA-256 of an LFS file, git's blob SHA-1 of a small one."""
    if _SHA256.match(name):
        digest = hashlib.sha256()
    elif _GIT_SHA1.match(name):
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % os.fstat(fd).st_size)
    else:
        return None
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()
