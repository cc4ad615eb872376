"""The safetensors file format, parsed and built by hand.

A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of
the header), an optional ``"__metadata__"`` map of strings, then the raw little-endian tensor bytes.

We do this ourselves rather than through the ``safetensors`` library for two reasons: its
``save_file`` wants every tensor in memory at once (there is no streaming writer), and its reader
reports a broken file with a generic message, while we want to tell the user which file, which
tensor and which check failed. The checks mirror the library's own validation (offsets must cover
the data section exactly, in order, without gaps or overlaps), so a file we accept it accepts too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.errors import CheckpointError

# Bytes per element for every dtype the safetensors format defines.
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})

# The safetensors library refuses headers above 100 MB; so do we, before allocating anything.
MAX_HEADER_BYTES = 100 * 1024 * 1024

_EXPECTED_KEYS = frozenset({"dtype", "shape", "data_offsets"})


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor as a safetensors header describes it; offsets are relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: every tensor's place in the file, in file order."""

    path: Path
    data_start: int
    file_size: int
    entries: tuple[HeaderEntry, ...]
    metadata: Mapping[str, str]
    header_sha256: str


def tensor_nbytes(dtype: str, shape: Iterable[int]) -> int:
    """Return the byte size of a tensor of ``dtype`` and ``shape``."""
    return math.prod(shape) * DTYPE_SIZES[dtype]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            msg = f"duplicate key '{key}' in header"
            raise ValueError(msg)
        result[key] = value
    return result


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_header(path: Path, *, display: str | None = None) -> SafetensorsHeader:
    """Read and validate the header of a safetensors file.

    Raises:
        CheckpointError: naming the file and the first problem found (truncation, a header that
            does not parse, an unknown dtype, offsets that disagree with the shape, overlap, gaps
            or data past the end of the file).
    """
    name = display or path.name

    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"{name}: {problem}", hint="re-download or re-export the checkpoint")

    try:
        file_size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise fail(f"truncated: {file_size} bytes is too short for a safetensors header")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len == 0 or header_len > MAX_HEADER_BYTES:
                raise fail(f"header length {header_len} is not plausible (not a safetensors file?)")
            if 8 + header_len > file_size:
                raise fail(f"truncated: the header claims {header_len} bytes but only {file_size - 8} follow")
            raw = f.read(header_len)
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot read: {exc.strerror or exc}") from None

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError) as exc:
        raise fail(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise fail("header is not a JSON object")

    metadata_raw = header.pop("__metadata__", {})
    if not isinstance(metadata_raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata_raw.items()
    ):
        raise fail("__metadata__ must map strings to strings")

    entries: list[HeaderEntry] = []
    for tensor, spec in header.items():
        if not isinstance(spec, dict) or set(spec) != _EXPECTED_KEYS:
            raise fail(f"tensor '{tensor}': entry must have exactly dtype, shape and data_offsets")
        dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise fail(f"tensor '{tensor}': unknown dtype {dtype!r} (known: {', '.join(DTYPE_SIZES)})")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise fail(f"tensor '{tensor}': shape {shape!r} is not a list of non-negative integers")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_int(o) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise fail(f"tensor '{tensor}': data_offsets {offsets!r} are not [begin, end] with begin <= end")
        need = tensor_nbytes(dtype, shape)
        if offsets[1] - offsets[0] != need:
            raise fail(
                f"tensor '{tensor}': data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, "
                f"but {dtype} {shape} needs {need}"
            )
        entries.append(HeaderEntry(tensor, dtype, tuple(shape), offsets[0], offsets[1]))

    data_start = 8 + header_len
    data_size = file_size - data_start
    entries.sort(key=lambda e: (e.begin, e.end))
    cursor = 0
    previous: HeaderEntry | None = None
    for entry in entries:
        if entry.end > data_size:
            raise fail(
                f"tensor '{entry.name}': data ends at byte {entry.end} of the data section, but the file "
                f"holds only {data_size} data bytes (truncated, or the header lies about offsets)"
            )
        if entry.begin < cursor:
            other = previous.name if previous is not None else "?"
            raise fail(f"tensors '{other}' and '{entry.name}' overlap (bytes {entry.begin}..{cursor})")
        if entry.begin > cursor:
            raise fail(f"{entry.begin - cursor} unaccounted bytes before tensor '{entry.name}'")
        cursor = entry.end
        previous = entry
    if cursor != data_size:
        raise fail(f"{data_size - cursor} unaccounted bytes after the last tensor")

    return SafetensorsHeader(
        path=path,
        data_start=data_start,
        file_size=file_size,
        entries=tuple(entries),
        metadata=dict(metadata_raw),
        header_sha256=hashlib.sha256(prefix + raw).hexdigest(),
    )


def build_header(
    tensors: Iterable[tuple[str, str, tuple[int, ...]]], metadata: Mapping[str, str] | None = None
) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """Lay out tensors back to back, in the order given; return the encoded header and offsets.

    The JSON is padded with spaces so the data section starts on an 8-byte boundary, as the
    safetensors library does.
    """
    header: dict[str, Any] = {}
    offsets: dict[str, tuple[int, int]] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    cursor = 0
    for name, dtype, shape in tensors:
        if name in offsets:
            msg = f"tensor {name!r} laid out twice"
            raise ValueError(msg)
        size = tensor_nbytes(dtype, shape)
        offsets[name] = (cursor, cursor + size)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [cursor, cursor + size]}
        cursor += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    return struct.pack("<Q", len(raw)) + raw, offsets


def pread_exact(fd: int, buffer: memoryview, offset: int, *, display: str) -> None:
    """Fill ``buffer`` from ``fd`` at ``offset``; a short read means the file changed under us."""
    done = 0
    while done < len(buffer):
        n = os.preadv(fd, [buffer[done:]], offset + done)
        if n == 0:
            msg = f"{display}: unexpected end of file at byte {offset + done} (file truncated while reading?)"
            raise CheckpointError(msg)
        done += n
