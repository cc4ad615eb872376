"""Load a ``pytorch_model.bin`` safely, and find where each tensor lies in it so it can be read like safetensors.

``load_bin`` uses ``torch.load(weights_only=True, mmap=True)``: anything that needs full unpickling
is refused, and nothing is read into memory.

``torch.save`` (since 1.6) writes a zip whose members ``<prefix>/data/<key>`` hold the storages'
raw bytes, uncompressed. ``torch.load(mmap=True)`` maps the whole file once and makes every storage
a slice of that map at its member's offset, so a storage's address minus the map's start is its
offset in the file. With those offsets the splitter reads ``.bin`` tensors as it reads safetensors:
``pread`` (or a kernel copy) of just the bytes it needs. Without them it reads through the map, and
every page it touches stays in the resident set until the whole file is done (1.3 GiB peak RSS for
a 1.1 GB ``pytorch_model.bin``).

torch has no public call that says where a storage lies in the file, hence this module. It takes
the members' data offsets from the zip directory (``zipfile``) and the 30-byte local headers
(``zipfile`` reads them but does not expose the data offset), then checks its answer: every storage
must land exactly on a member of its size under a single map start, and each storage's first and
last bytes read through the map must equal those read from the file at the computed offset.
Anything else — a legacy (pre-zip) file, a compressed member, a big-endian file, a storage that
torch did not map — gives no offsets, and the caller reads through torch as before.
"""

from __future__ import annotations

import os
import struct
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import MISSING_LIBRARY, CheckpointError, safe_text

if TYPE_CHECKING:
    import torch

# A zip local file header: signature, 22 bytes we do not need, file name length, extra field length.
_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"

# Bytes compared at each end of every storage (map against file) to confirm the offsets.
_PROBE_BYTES = 16


# What torch.load raises on bytes that are not a valid checkpoint: its zip reader raises RuntimeError,
# and its weights-only unpickler (torch/_weights_only_unpickler.py) lets the errors of its own parsing
# through (a memo or stack index that does not exist: KeyError, IndexError; a bad opcode argument:
# struct.error, TypeError, UnicodeDecodeError, which is a ValueError), and so does persistent_load in
# torch/serialization.py (AttributeError, and an AssertionError "saved_id must be a tuple"). Found by
# fuzzing saved files.
_UNREADABLE = (
    AssertionError,
    AttributeError,
    RuntimeError,
    EOFError,
    OSError,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    struct.error,
    NotImplementedError,
    zipfile.BadZipFile,
)


def load_bin(path: Path, *, display: str) -> dict[str, Any]:
    """Load a PyTorch state dict without executing code: weights_only, memory-mapped when possible.

    ``path`` is a checked regular file; messages name ``display``.
    """
    try:
        import torch
    except ImportError as exc:
        msg = f"{display}: reading .bin checkpoints needs torch"
        raise MISSING_LIBRARY.convert(exc, msg, hint="pip install 'neuronc[cpu]', or use safetensors") from None
    import pickle

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            # Files in the legacy (pre-1.6, non-zip) format cannot be memory-mapped; load them whole.
            if "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        msg = f"{display}: refused: loading it would need full unpickling, which can run arbitrary code"
        reason = _torch_reason(exc, prefer="Unsupported global")
        msg += f" ({reason})" if reason else ""
        raise CheckpointError(msg, hint="convert the checkpoint to safetensors with a tool you trust") from None
    except _UNREADABLE as exc:
        reason = _torch_reason(exc) or type(exc).__name__
        raise CheckpointError(f"{display}: not a readable PyTorch checkpoint (truncated?): {reason}") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        msg = f"{display}: not a flat state dict of tensors (a training checkpoint or a wrapped model?)"
        raise CheckpointError(msg)
    return state


def _torch_reason(exc: BaseException, prefer: str = "") -> str:
    """The informative part of a torch.load error: one line, no ANSI colour, first sentence only."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    chosen = next((line for line in lines if prefer and prefer in line), lines[0] if lines else "")
    chosen = chosen.removeprefix("WeightsUnpickler error: ")
    return safe_text(chosen.split(". ")[0].rstrip("."))


def locate_tensors(path: Path, state: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Return {tensor name: file offset of its first byte} for the tensors of ``state`` found in ``path``.

    ``state`` must come from ``torch.load(path, mmap=True)`` and stay alive during the call.
    Tensors that are not contiguous are left out (read them through torch); so is everything when
    the storages cannot be placed with certainty. Zero-size tensors get offset 0.
    """
    members = _data_members(path)
    if members is None:
        return {}
    storages: dict[int, torch.UntypedStorage] = {}
    for tensor in state.values():
        storage = tensor.untyped_storage()
        if storage.nbytes():
            storages[storage.data_ptr()] = storage
    base = _map_start(storages, members)
    if storages and (base is None or not _probes_match(path, storages, base)):
        return {}
    offsets: dict[str, int] = {}
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes == 0:
            offsets[name] = 0
            continue
        storage = tensor.untyped_storage()
        inside = tensor.data_ptr() - storage.data_ptr()
        if tensor.is_contiguous() and base is not None and 0 <= inside <= storage.nbytes() - nbytes:
            offsets[name] = tensor.data_ptr() - base
    return offsets


def _data_members(path: Path) -> dict[int, int] | None:
    """{data offset: size} of every storage member, or None when the file is not a readable little-endian zip."""
    members: dict[int, int] = {}
    byteorder = sys.byteorder.encode()  # what torch assumes for files without a byteorder record
    try:
        with zipfile.ZipFile(path) as archive, path.open("rb") as raw:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if parts[-1] == "byteorder":
                    byteorder = archive.read(info).strip()
                if len(parts) < 2 or parts[-2] != "data":
                    continue
                if info.compress_type != zipfile.ZIP_STORED:
                    return None
                raw.seek(info.header_offset)
                header = raw.read(_LOCAL_HEADER.size)
                if len(header) != _LOCAL_HEADER.size:
                    return None
                signature, name_length, extra_length = _LOCAL_HEADER.unpack(header)
                if signature != _LOCAL_SIGNATURE:
                    return None
                members[info.header_offset + _LOCAL_HEADER.size + name_length + extra_length] = info.file_size
    except (
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,
        zipfile.BadZipFile,
    ):  # NotImplementedError: "zip file version 8.7"
        return None
    return members if byteorder == b"little" else None


def _map_start(storages: Mapping[int, torch.UntypedStorage], members: Mapping[int, int]) -> int | None:
    """The address at which the file is mapped: the one that puts every storage on a member of its size."""
    if not storages:
        return None
    lowest = min(storages)
    for offset in sorted(members):  # try `lowest` as each member in turn; the first usually fits
        base = lowest - offset
        if all(members.get(address - base) == storage.nbytes() for address, storage in storages.items()):
            return base
    return None


def _probes_match(path: Path, storages: Mapping[int, torch.UntypedStorage], base: int) -> bool:
    """Compare each storage's first and last bytes through the map with the file's at the computed offset."""
    import torch

    fd = os.open(path, os.O_RDONLY)
    try:
        for address, storage in storages.items():
            mapped = torch.empty(0, dtype=torch.uint8).set_(storage)
            n = storage.nbytes()
            for start in {0, max(0, n - _PROBE_BYTES)}:
                stop = min(n, start + _PROBE_BYTES)
                expected = mapped[start:stop].numpy().tobytes()
                if os.pread(fd, stop - start, address - base + start) != expected:
                    return False
    finally:
        os.close(fd)
    return True
