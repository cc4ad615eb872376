"""The files of a checkpoint (or split) directory, opened without trusting the directory.

A model directory comes from anywhere: a download, a colleague, a Hugging Face cache snapshot. Every
file the reader opens goes through ``ModelTree.path``, which:

* follows a symbolic link only when it resolves inside the directory, or, for a Hugging Face cache
  snapshot (``models--org--name/snapshots/<commit>/``, whose files are links to ``../../blobs/``),
  inside that repository folder; a link out of it, a broken link or a link loop is a CheckpointError;
* refuses anything that is not a regular file (a FIFO, a device, a socket, a directory) without
  opening it, so a FIFO named ``model.safetensors`` cannot hang the reader and a link to
  ``/dev/zero`` cannot fill its memory;
* refuses file names (from an index.json) that are not plain names in the directory.

The reader only opens names it knows (config.json, the index files, the shards an index lists), so
there is no directory walk to bound.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from neuronc.errors import CheckpointError, safe_text
from neuronc.fsutil import file_kind

_HF_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def plain_name_problem(name: object) -> str | None:
    """Why ``name`` (from an index.json) cannot be a file in the directory itself (None when it can)."""
    if not isinstance(name, str) or not name:
        return "is not a file name"
    if name in (".", "..") or "/" in name or "\x00" in name:
        return "is outside the directory (not a plain file name)"
    return None


class ModelTree:
    """One directory whose files are opened only as regular files inside it."""

    def __init__(self, root: Path) -> None:
        self.shown = Path(root)
        self.root = Path(os.path.realpath(root))
        snapshots = self.root.parent
        if snapshots.name == "snapshots" and snapshots.parent.name.startswith(_HF_REPO_PREFIXES):
            self.bound = snapshots.parent  # a Hugging Face cache snapshot links into ../../blobs
        else:
            self.bound = self.root

    def display(self, name: str) -> str:
        """The path of ``name`` as the user knows it, safe to print."""
        return safe_text(self.shown / name, limit=400)

    def has(self, name: str) -> bool:
        """Whether the directory has an entry ``name`` of any kind (a FIFO, a broken link too: opening
        it then says what is wrong, instead of the reader silently looking for another layout)."""
        return plain_name_problem(name) is None and os.path.lexists(self.root / name)

    def path(self, name: str) -> Path:
        """The regular file that ``name`` stands for, with every link resolved and checked.

        Raises:
            FileNotFoundError: there is no entry ``name`` (callers word this their own way).
            CheckpointError: a bad name, a link out of the tree, a broken link, a loop, or not a regular file.
        """
        if (problem := plain_name_problem(name)) is not None:
            raise CheckpointError(f"{self.display(str(name))}: {problem}")
        shown = self.display(name)
        entry = self.root / name
        try:
            mode = os.lstat(entry).st_mode
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise CheckpointError(f"{shown}: cannot read: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            target = Path(os.path.realpath(entry))
            if target != self.bound and self.bound not in target.parents:
                msg = f"{shown}: is a link to {safe_text(target)}, outside {safe_text(self.bound)}"
                hint = "neuronc does not follow links out of a model directory: copy the file in, or pass its directory"
                raise CheckpointError(msg, hint=hint)
            try:
                mode = os.stat(target).st_mode
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise CheckpointError(f"{shown}: is a symbolic link loop") from None
                if exc.errno == errno.ENOENT:
                    raise CheckpointError(f"{shown}: is a broken symbolic link (to {safe_text(target)})") from None
                raise CheckpointError(f"{shown}: cannot read: {exc.strerror or exc}") from None
            entry = target
        if not stat.S_ISREG(mode):
            raise CheckpointError(f"{shown}: is {file_kind(mode)}, not a regular file")
        return entry
