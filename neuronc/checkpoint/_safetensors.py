"""The safetensors file format, parsed and built by hand.

A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of
the header), an optional ``"__metadata__"`` map of strings, then the raw little-endian tensor bytes.

We do this ourselves rather than through the ``safetensors`` library for two reasons: its
``save_file`` wants every tensor in memory at once (there is no streaming writer), and its reader
reports a broken file with a generic message, while we want to tell the user which file, which
tensor and which check failed. The checks mirror the library's own validation
(``SafeTensors::read_metadata`` and ``Metadata::validate`` in safetensors/src/tensor.rs: a header of
at most 100 MB of UTF-8 JSON; shapes and offsets are 64-bit unsigned integers whose products must
not overflow; offsets cover the data section exactly, in order, without gaps or overlaps), so a file
we accept it accepts too. The header is parsed with ``neuronc.jsonfile`` (bounded size and nesting,
integers of at most 64 bits) and type-checked field by field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.errors import CheckpointError, safe_text
from neuronc.fsutil import NotRegularFileError, open_regular
from neuronc.jsonfile import InvalidJsonError, parse_json

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

# The safetensors library refuses headers above 100 MB (safetensors/src/tensor.rs, MAX_HEADER_SIZE =
# 100_000_000); so do we, before allocating anything.
MAX_HEADER_BYTES = 100_000_000

# Shapes and offsets are Rust ``usize`` in the library (64 bits on every platform it ships for).
USIZE_MAX = 2**64 - 1

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


def shape_problem(dtype: str, shape: Sequence[int]) -> str | None:
    """Why the safetensors library would refuse a tensor of this dtype and shape, or None if it accepts it.

    The library's rule (``Metadata::validate`` in safetensors/src/tensor.rs): every dimension is a
    ``usize``; the element count is the product of the dimensions taken in order with checked
    multiplication, so an intermediate product that overflows 64 bits is refused even when a later
    dimension is 0 (``[2**40, 2**40, 0]``); the count times the element's width in bits must fit
    in 64 bits too.
    """
    count = 1
    for i, d in enumerate(shape):
        if d < 0 or d > USIZE_MAX:
            return f"dimension {i} is {d}, outside 0..2**64-1"
        count *= d
        if count > USIZE_MAX:
            return f"the product of its dimensions overflows 64 bits at dimension {i}"
    if count * DTYPE_SIZES[dtype] * 8 > USIZE_MAX:
        return "its size in bits overflows 64 bits"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_header(path: Path, *, display: str | None = None) -> SafetensorsHeader:
    """Read and validate the header of a safetensors file.

    ``path`` is opened as a regular file only (a FIFO or device is refused without blocking).

    Raises:
        CheckpointError: naming the file and the first problem found (truncation, a header that
            does not parse or is nested too deep, an unknown dtype, a shape the safetensors library
            refuses, offsets that disagree with the shape, overlap, gaps or data past the end of the
            file).
    """
    name = display or str(path)

    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"{name}: {problem}", hint="re-download or re-export the checkpoint")

    try:
        fd = open_regular(path, follow_symlinks=False)
    except NotRegularFileError as exc:
        raise CheckpointError(exc.message.replace(str(path), name, 1)) from None
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot open: {exc.strerror or exc}") from None
    try:
        file_size = os.fstat(fd).st_size
        prefix = os.pread(fd, 8, 0)
        if len(prefix) < 8:
            raise fail(f"truncated: {file_size} bytes is too short for a safetensors header")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len == 0 or header_len > MAX_HEADER_BYTES:
            raise fail(f"header length {header_len} is not plausible (not a safetensors file?)")
        if 8 + header_len > file_size:
            raise fail(f"truncated: the header claims {header_len} bytes but only {file_size - 8} follow")
        raw = bytearray(header_len)
        pread_exact(fd, memoryview(raw), 8, display=name)
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)

    try:
        header = parse_json(bytes(raw), where=f"{name}: header", max_bytes=MAX_HEADER_BYTES, unique_keys=True)
    except InvalidJsonError as exc:
        raise CheckpointError(exc.message, hint="re-download or re-export the checkpoint") from None
    if not isinstance(header, dict):
        raise fail("header is not a JSON object")

    # The library reads __metadata__ as an optional map of strings to strings (null means none).
    metadata_raw = header.pop("__metadata__", None) or {}
    if not isinstance(metadata_raw, dict) or not all(isinstance(v, str) for v in metadata_raw.values()):
        raise fail("__metadata__ must map strings to strings")

    entries = [_entry(tensor, spec, fail) for tensor, spec in header.items()]
    data_start = 8 + header_len
    _check_layout(entries, file_size - data_start, fail)
    return SafetensorsHeader(
        path=path,
        data_start=data_start,
        file_size=file_size,
        entries=tuple(sorted(entries, key=lambda e: (e.begin, e.end))),
        metadata=dict(metadata_raw),
        header_sha256=hashlib.sha256(prefix + raw).hexdigest(),
    )


def _entry(tensor: str, spec: object, fail: Callable[[str], CheckpointError]) -> HeaderEntry:
    """One header entry, type-checked field by field."""
    shown = safe_text(tensor)
    if not isinstance(spec, dict) or set(spec) != _EXPECTED_KEYS:
        raise fail(f"tensor '{shown}': entry must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        what = repr(safe_text(dtype, limit=40)) if isinstance(dtype, str) else _short(dtype)
        raise fail(f"tensor '{shown}': unknown dtype {what} (known: {', '.join(DTYPE_SIZES)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise fail(f"tensor '{shown}': shape {_short(shape)} is not a list of non-negative integers")
    if (problem := shape_problem(dtype, shape)) is not None:
        raise fail(f"tensor '{shown}': shape {_short(shape)} is refused by the safetensors library: {problem}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) and 0 <= o <= USIZE_MAX for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise fail(f"tensor '{shown}': data_offsets {_short(offsets)} are not [begin, end] with begin <= end")
    need = tensor_nbytes(dtype, shape)
    if offsets[1] - offsets[0] != need:
        raise fail(
            f"tensor '{shown}': data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, "
            f"but {dtype} {shape} needs {need}"
        )
    return HeaderEntry(tensor, dtype, tuple(shape), offsets[0], offsets[1])


def _check_layout(entries: list[HeaderEntry], data_size: int, fail: Callable[[str], CheckpointError]) -> None:
    """Offsets must cover the data section exactly, in order, without gaps or overlaps (as the library checks)."""
    ordered = sorted(entries, key=lambda e: (e.begin, e.end))
    entry = max(entries, key=lambda e: e.end, default=None)
    if entry is not None and entry.end > data_size:  # the most telling problem first: a header that lies
        raise fail(
            f"tensor '{safe_text(entry.name)}': data ends at byte {entry.end} of the data section, but the file "
            f"holds only {data_size} data bytes (truncated, or the header lies about offsets)"
        )
    cursor = 0
    previous: HeaderEntry | None = None
    for entry in ordered:
        shown = safe_text(entry.name)
        if entry.begin < cursor:
            other = safe_text(previous.name) if previous is not None else "?"
            raise fail(f"tensors '{other}' and '{shown}' overlap (bytes {entry.begin}..{cursor})")
        if entry.begin > cursor:
            raise fail(f"{entry.begin - cursor} unaccounted bytes before tensor '{shown}'")
        cursor = entry.end
        previous = entry
    if cursor != data_size:
        raise fail(f"{data_size - cursor} unaccounted bytes after the last tensor")


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


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
    """Fill ``buffer`` from ``fd`` at ``offset``; a short read means the file changed under us.

    Raises CheckpointError naming ``display`` for a short read or a read error (EIO, ...).
    """
    done = 0
    while done < len(buffer):
        try:
            n = os.preadv(fd, [buffer[done:]], offset + done)
        except OSError as exc:
            msg = f"{display}: cannot read at byte {offset + done}: {exc.strerror or exc}"
            raise CheckpointError(msg) from None
        if n == 0:
            msg = f"{display}: unexpected end of file at byte {offset + done} (file truncated while reading?)"
            raise CheckpointError(msg)
        done += n
