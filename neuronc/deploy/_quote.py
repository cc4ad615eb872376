"""Quoting for the files deploy writes: each value goes out in its file's own syntax.

Values are checked against what they can be when they are read from the manifest
(``_values.serving_values``); these helpers are the second half of the rule: whatever a value
holds, it stays one value of the file it lands in. Shell words go through ``shlex.quote``, YAML
and JSON through their libraries; env files and comments have no library that writes them, so
they are written here, refusing (env files) or escaping (comments) what they cannot hold.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from neuronc.errors import InvalidInputError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An env-file value docker compose's `env_file` and `docker run --env-file` read the same way:
# neither quotes (compose would strip them, `docker run` would keep them) nor `$` (compose expands it).
_ENV_FILE_VALUE = re.compile(r"^[A-Za-z0-9_./:@+,=%-]*$")


def _line_breaking(char: str) -> bool:
    """Control and format characters, and the Unicode line/paragraph separators YAML breaks lines at."""
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def comment_text(value: object) -> str:
    """``value`` made safe inside a ``#`` comment of sh, YAML, env and nginx files: one line, always.

    Characters that could end the line (or hide text from a terminal) are written as ``\\xNN`` /
    ``\\uNNNN`` escapes.
    """
    out = []
    for char in str(value):
        if _line_breaking(char):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def sh_word(value: object) -> str:
    """One shell word, whatever it holds (``shlex.quote``)."""
    return shlex.quote(str(value))


def sh_command(argv: Iterable[object]) -> str:
    """A command line of shell words (``shlex.join``)."""
    return shlex.join(str(a) for a in argv)


def _env_name(name: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise InvalidInputError(f"{comment_text(name)!r} is not an environment variable name")
    return name


def sh_env_file(env: Mapping[str, object]) -> str:
    """An env file that ``sh`` sources (``. ./file``): ``NAME='value'`` lines, each value one shell word."""
    return "".join(f"{_env_name(name)}={shlex.quote(str(value))}\n" for name, value in env.items())


def env_file(env: Mapping[str, object], *, header: str = "") -> str:
    """A docker ``--env-file`` / compose ``env_file``: ``NAME=value`` lines, no quoting.

    The two readers disagree on quotes and compose expands ``$``; so a value is written only when it
    needs none of those (the values deploy writes here are numbers, dtypes and container paths),
    and anything else is refused (InvalidInputError, exit 2) rather than written differently.
    """
    lines = [f"# {comment_text(header)}\n"] if header else []
    for name, value in env.items():
        text = str(value)
        if not _ENV_FILE_VALUE.fullmatch(text):
            shown = f"{_env_name(name)}={comment_text(text)!r}"
            msg = f"{shown}: a value an env file cannot hold the same way for every reader"
            raise InvalidInputError(msg)
        lines.append(f"{_env_name(name)}={text}\n")
    return "".join(lines)


def yaml_text(data: Any, *, header: str = "") -> str:
    """YAML through ``yaml.safe_dump`` (keys and values quoted as YAML needs), after an optional comment line."""
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return (f"# {comment_text(header)}\n" if header else "") + body


__all__ = ["comment_text", "env_file", "sh_command", "sh_env_file", "sh_word", "yaml_text"]
