"""Reading JSON that comes from outside: bounded size, bounded nesting, sane numbers, typed access.

Every JSON document neuronc reads from disk or the network (config.json, index.json, safetensors
headers, manifests, registry entries, mirror metadata) goes through ``parse_json`` or
``read_json``, so deep nesting, absurd integers, NaN or a FIFO named ``*.json`` end as an
``InvalidJsonError`` (exit 2) naming the file, never as RecursionError, OverflowError or a hang.
The ``expect_*`` helpers then check fields one by one with the same kind of message. The other way,
``JsonFields`` is the one ``to_json`` of the records whose JSON form is their fields as they are.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from neuronc.errors import InvalidInputError

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
# No field neuronc reads (sizes, offsets, shapes, token ids, counts) needs more than 64 bits.
MAX_INT_DIGITS = 20
# Every ASCII digit to "0", every other byte to " ": a run of MAX_INT_DIGITS + 1 zeros is then a
# long number (or a long digit run in a string). bytes.translate is 30 times faster than a regex here.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_RUN = b"0" * (MAX_INT_DIGITS + 1)

T = TypeVar("T")


class InvalidJsonError(InvalidInputError):
    """A JSON document is malformed, too large, too deep, or has a field of the wrong type."""

    kind = "json_invalid"


class JsonFields:
    """A dataclass whose JSON form (``to_json``) is its fields in order, each as it is."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # what @dataclass gives the subclass

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        msg = f"integer with {len(text.lstrip('-'))} digits"
        raise ValueError(msg)
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        msg = f"number {shown} is out of range"
        raise ValueError(msg)
    return value


def _parse_constant(name: str) -> float:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            shown = key if len(key) <= 60 and key.isprintable() else ascii(key[:60])
            msg = f"duplicate key '{shown}'"
            raise ValueError(msg)
        result[key] = value
    return result


def depth_of(value: Any, limit: int) -> int:
    """Nesting depth of parsed JSON (iterative, stops counting past ``limit``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values() if isinstance(child, dict | list))
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node if isinstance(child, dict | list))
    return deepest


def parse_json(
    raw: bytes | str,
    *,
    where: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    allow_nan: bool = False,
    unique_keys: bool = False,
) -> Any:
    """Parse a JSON document, refusing what no honest file of ours contains.

    Raises InvalidJsonError (exit 2) naming ``where`` for: more than ``max_bytes``, invalid UTF-8
    or JSON, nesting deeper than ``max_depth``, integers beyond 64 bits, NaN/Infinity (unless
    ``allow_nan``), and with ``unique_keys`` an object that names a key twice (which readers
    would otherwise resolve silently, each its own way).
    """
    if len(raw) > max_bytes:
        raise InvalidJsonError(f"{where}: {len(raw)} bytes of JSON; the limit is {max_bytes}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise InvalidJsonError(f"{where}: not UTF-8 (byte {exc.start})") from None
    # The int hook costs a Python call per number: only a document with a run of more than
    # MAX_INT_DIGITS digits somewhere can hold an integer that needs the check.
    encoded = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    kwargs: dict[str, Any] = {"parse_int": _parse_int} if _LONG_RUN in encoded.translate(_DIGITS_ONLY) else {}
    if not allow_nan:
        kwargs["parse_constant"] = _parse_constant
        # 1e999 parses to inf without any constant: only a number with an exponent can.
        if b"e" in encoded or b"E" in encoded:
            kwargs["parse_float"] = _finite_float
    if unique_keys:
        kwargs["object_pairs_hook"] = _unique_keys
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise InvalidJsonError(f"{where}: JSON nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise InvalidJsonError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:
        raise InvalidJsonError(f"{where}: not valid JSON: {exc}") from None
    # Nesting needs brackets: a document with fewer than max_depth of them cannot be too deep.
    if text.count("[") + text.count("{") > max_depth and depth_of(value, max_depth) > max_depth:
        raise InvalidJsonError(f"{where}: JSON nested more than {max_depth} levels deep")
    return value


def read_json(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    what: str = "JSON file",
    allow_nan: bool = False,
) -> Any:
    """Read and parse a JSON file (a regular file only: a FIFO or device is refused, never opened blocking).

    FileNotFoundError and PermissionError propagate for the caller to word; everything about the
    content is an InvalidJsonError naming the path.
    """
    from neuronc.fsutil import read_bytes_limited

    where = os.fspath(path)
    raw = read_bytes_limited(path, max_bytes, what=what)
    return parse_json(raw, where=where, max_bytes=max_bytes, max_depth=max_depth, allow_nan=allow_nan)


def read_json_object(path: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
    """``read_json`` for files whose top level must be an object."""
    value = read_json(path, **kwargs)
    return expect_object(value, os.fspath(path))


def _type_words(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {
        dict: "an object",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
    }
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def expect_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidJsonError(f"{where}: expected a JSON object, got {_describe(value)}")
    return value


def expect_type(value: Any, kind: type[T] | tuple[type, ...], where: str) -> Any:
    """``value`` if it has the JSON type ``kind`` (bool is never an int here), else InvalidJsonError."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        raise InvalidJsonError(f"{where}: must be {_type_words(kind)}, got {_describe(value)}")
    return value


def get_field(
    obj: Mapping[str, Any],
    name: str,
    kind: type[T] | tuple[type, ...],
    where: str,
    *,
    required: bool = True,
    default: Any = None,
) -> Any:
    """``obj[name]`` checked against ``kind``; a missing field is an error unless ``required=False``."""
    if name not in obj:
        if required:
            raise InvalidJsonError(f"{where}: field '{name}' is missing")
        return default
    return expect_type(obj[name], kind, f"{where}: field '{name}'")


def get_int(
    obj: Mapping[str, Any],
    name: str,
    where: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    required: bool = True,
    default: int | None = None,
) -> int | None:
    """An integer field within [minimum, maximum]."""
    value = get_field(obj, name, int, where, required=required, default=default)
    if value is None:
        return None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise InvalidJsonError(f"{where}: field '{name}' must be {bounds}, got {value}")
    return int(value)


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "InvalidJsonError",
    "JsonFields",
    "depth_of",
    "expect_object",
    "expect_type",
    "get_field",
    "get_int",
    "parse_json",
    "read_json",
    "read_json_object",
]
