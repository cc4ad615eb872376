"""Writing a profile a user named (`buckets --write`, `compile --model … --save-profile`, `profiles new`).

docs/failure-modes.md's "Files you name" rules, through the project's writer for such files
(``neuronc.fsutil.write_output``): a regular file is replaced atomically, keeping its permissions;
anything else is written through, as a shell's ``>`` does (a symbolic link stays a link and its target
gets the profile; ``/dev/stdout`` stays what it is). A read-only profile is refused rather than
replaced (a rename would go around its permissions, as root's ``>`` would go around them too); a
directory, a parent that is a file, a read-only directory or file system are one error line (exit 2).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from neuronc.errors import InvalidInputError, safe_text

WHAT = "the profile"


def write_profile(text: str, path: str | os.PathLike[str], *, hint: str = "choose another path") -> None:
    """Write ``text`` at ``path`` (a file a user named); ``hint``: the flag or argument that named it."""
    from neuronc.fsutil import output_error, write_output

    target = Path(path)
    mode = 0o644
    try:
        info = os.stat(target)  # through a link: the file that gets the bytes
    except OSError:
        info = None  # absent, or a parent that is not a directory: write_output says which
    if info is not None and stat.S_ISREG(info.st_mode):
        if not info.st_mode & 0o222:
            shown = safe_text(os.fspath(path), 1000)
            raise InvalidInputError(
                f"{shown}: cannot write {WHAT}: the file is read-only",
                hint=f"make it writable (chmod u+w), or {hint}",
            )
        try:  # whether `>` could write it (another user's file, a read-only file system): opened, not changed
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError as exc:
            raise output_error(path, exc, what=WHAT, hint=hint) from None
        mode = stat.S_IMODE(info.st_mode)
    write_output(target, text.encode("utf-8"), what=WHAT, fsync=True, mode=mode)


__all__ = ["write_profile"]
