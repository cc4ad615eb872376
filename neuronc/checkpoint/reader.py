"""Read Hugging Face checkpoints one tensor at a time.

Supported layouts, in the order they are looked for:

* ``model.safetensors.index.json`` + the safetensors shards it names,
* a single ``model.safetensors``,
* ``pytorch_model.bin.index.json`` + ``pytorch_model-*.bin`` shards,
* a single ``pytorch_model.bin``.

Safetensors files are read with ``pread`` into one reusable buffer, never memory-mapped: pages of
a memory map count towards the process's resident set, and the point of this module is a resident
set that does not grow with the model. ``.bin`` files are loaded with ``torch.load(weights_only=True,
mmap=True)`` (anything that needs full unpickling is refused), only to learn each tensor's dtype,
shape and place in the file (``_torchzip``); their bytes are then read like safetensors'. A tensor
that cannot be placed (legacy format, strided view) is read through torch's memory map.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from neuronc.checkpoint._safetensors import DTYPE_SIZES, SafetensorsHeader, pread_exact, read_header
from neuronc.checkpoint._torchzip import locate_tensors
from neuronc.errors import CheckpointError, EnvironmentIncompatibleError

if TYPE_CHECKING:
    import numpy as np
    import torch

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

CheckpointFormat = Literal["safetensors", "pytorch"]

# torch dtype name (str(torch.float32) minus the "torch." prefix) -> safetensors dtype code.
_TORCH_TO_CODE = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "bfloat16": "BF16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "int64": "I64",
    "uint64": "U64",
    "float64": "F64",
}
_CODE_TO_TORCH = {code: name for name, code in _TORCH_TO_CODE.items()}


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: dtype is a safetensors code ("BF16", "F32", ...), file is relative."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    offset: int | None
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return DTYPE_SIZES[self.dtype]


@dataclass(frozen=True)
class SourceFile:
    """One file of a checkpoint: its size and, for safetensors, the SHA-256 of its header."""

    file: str
    bytes: int
    header_sha256: str | None


class Checkpoint:
    """A checkpoint opened for streaming reads. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        root: Path,
        fmt: CheckpointFormat,
        files: list[SourceFile],
        tensors: list[TensorInfo],
        config: dict[str, Any] | None,
    ) -> None:
        self.root = root
        self.format: CheckpointFormat = fmt
        self.files = files
        self.tensors: Mapping[str, TensorInfo] = {t.name: t for t in tensors}
        self.config = config
        self._fds: dict[str, int] = {}
        self._scratch = bytearray()
        self._bin_file: str | None = None
        self._bin_state: dict[str, Any] = {}
        self._bin_current: tuple[str, np.ndarray[Any, Any]] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close open files and drop any loaded ``.bin`` state."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._bin_state = {}
        self._bin_current = None
        self._bin_file = None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors.values())

    def __len__(self) -> int:
        return len(self.tensors)

    # -- reading --------------------------------------------------------------------------------
    def info(self, name: str) -> TensorInfo:
        """Return the TensorInfo for ``name``; KeyError names the checkpoint when it is absent."""
        try:
            return self.tensors[name]
        except KeyError:
            msg = f"{self.root}: no tensor named {name!r}"
            raise KeyError(msg) from None

    def read_range(self, info: TensorInfo, start: int, length: int) -> memoryview:
        """Return ``length`` bytes of a tensor from byte ``start``.

        The view points into a scratch buffer that the next call may overwrite: consume it (write
        it, copy it, compare it) before reading again.
        """
        if start < 0 or start + length > info.nbytes:
            msg = f"range {start}+{length} outside tensor {info.name!r} of {info.nbytes} bytes"
            raise ValueError(msg)
        if info.offset is None:
            return memoryview(self._bin_bytes(info))[start : start + length]  # type: ignore[arg-type]
        if len(self._scratch) < length:
            # A new buffer rather than a resize: views handed out earlier may still be alive.
            self._scratch = bytearray(length)
        view = memoryview(self._scratch)[:length]
        pread_exact(self._fd(info.file), view, info.offset + start, display=str(self.root / info.file))
        return view

    def read_bytes(self, name: str) -> bytes:
        """Return one tensor's raw little-endian bytes (a copy)."""
        info = self.info(name)
        return bytes(self.read_range(info, 0, info.nbytes))

    def read_numpy(self, name: str) -> np.ndarray[Any, Any]:
        """Return one tensor as a numpy array (BF16 and FP8 come back as raw unsigned integers)."""
        import numpy as np

        info = self.info(name)
        data = bytearray(self.read_range(info, 0, info.nbytes))
        return np.frombuffer(data, dtype=numpy_dtype(info.dtype)).reshape(info.shape)

    def read_tensor(self, name: str) -> torch.Tensor:
        """Return one tensor as a CPU torch.Tensor with its stored dtype."""
        import torch

        info = self.info(name)
        dtype = getattr(torch, _CODE_TO_TORCH[info.dtype])
        if info.offset is None:
            self._bin_bytes(info)
            tensor = self._bin_state[info.name]
            assert isinstance(tensor, torch.Tensor)
            return tensor
        if info.nbytes == 0:
            return torch.empty(info.shape, dtype=dtype)
        data = bytearray(info.nbytes)
        pread_exact(self._fd(info.file), memoryview(data), info.offset, display=str(self.root / info.file))
        return torch.frombuffer(data, dtype=dtype).reshape(info.shape)

    def source_fd(self, info: TensorInfo) -> tuple[int, int] | None:
        """Return (file descriptor, byte offset) of a tensor's bytes in its file, for kernel copies.

        None for a ``.bin`` tensor that could not be placed in its file (its bytes exist only once
        torch has loaded it). The descriptor
        belongs to the checkpoint (do not close it); read it only with positional calls (pread,
        ``copy_file_range`` with an offset), which other threads may be making at the same time.
        """
        if info.offset is None:
            return None
        return self._fd(info.file), info.offset

    def display(self, info: TensorInfo) -> str:
        """The path of a tensor's file, for messages."""
        return str(self.root / info.file)

    # -- internals ------------------------------------------------------------------------------
    def _fd(self, file: str) -> int:
        fd = self._fds.get(file)
        if fd is None:
            try:
                fd = os.open(self.root / file, os.O_RDONLY)
            except OSError as exc:
                msg = f"{self.root / file}: cannot open: {exc.strerror or exc}"
                raise CheckpointError(msg) from None
            self._fds[file] = fd
        return fd

    def _bin_bytes(self, info: TensorInfo) -> np.ndarray[Any, Any]:
        if self._bin_current is not None and self._bin_current[0] == info.name:
            return self._bin_current[1]
        if self._bin_file != info.file:
            self._bin_state = {}
            self._bin_current = None
            self._bin_state = _load_bin(self.root / info.file)
            self._bin_file = info.file
        tensor = self._bin_state[info.name]
        data: np.ndarray[Any, Any] = tensor.detach().contiguous().reshape(-1).view(_torch_uint8()).numpy()
        self._bin_current = (info.name, data)
        return data


def _torch_uint8() -> Any:
    import torch

    return torch.uint8


def numpy_dtype(code: str) -> str:
    """Return the numpy dtype string that holds a safetensors dtype (raw bits for BF16 and FP8)."""
    return {
        "BOOL": "?",
        "U8": "u1",
        "I8": "i1",
        "F8_E4M3": "u1",
        "F8_E5M2": "u1",
        "I16": "<i2",
        "U16": "<u2",
        "F16": "<f2",
        "BF16": "<u2",
        "I32": "<i4",
        "U32": "<u4",
        "F32": "<f4",
        "I64": "<i8",
        "U64": "<u8",
        "F64": "<f8",
    }[code]


def torch_dtype_code(dtype: object) -> str | None:
    """Return the safetensors code for a torch dtype, or None when safetensors cannot hold it."""
    return _TORCH_TO_CODE.get(str(dtype).removeprefix("torch."))


# -- opening ---------------------------------------------------------------------------------------


def open_checkpoint(model_dir: Path) -> Checkpoint:
    """Open a Hugging Face checkpoint directory and validate every file's header.

    Raises:
        CheckpointError: the directory holds no checkpoint, or a file is missing, truncated or
            malformed; the message names the file and the problem.
        EnvironmentIncompatibleError: a ``.bin`` checkpoint needs torch, which is not installed.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        msg = f"{model_dir}: not a directory" if model_dir.exists() else f"{model_dir}: no such directory"
        raise CheckpointError(msg)
    config = _read_config(model_dir)
    if (model_dir / SAFETENSORS_INDEX).is_file():
        files = _read_index(model_dir / SAFETENSORS_INDEX)
        return _open_safetensors(model_dir, files, config, index=SAFETENSORS_INDEX)
    if (model_dir / SAFETENSORS_SINGLE).is_file():
        return _open_safetensors(model_dir, {SAFETENSORS_SINGLE: None}, config, index=None)
    if (model_dir / BIN_INDEX).is_file():
        files = _read_index(model_dir / BIN_INDEX)
        return _open_bin(model_dir, files, config, index=BIN_INDEX)
    if (model_dir / BIN_SINGLE).is_file():
        return _open_bin(model_dir, {BIN_SINGLE: None}, config, index=None)
    looked = ", ".join((SAFETENSORS_INDEX, SAFETENSORS_SINGLE, BIN_INDEX, BIN_SINGLE))
    msg = f"{model_dir}: no checkpoint found (looked for {looked})"
    raise CheckpointError(msg, hint="pass the directory that holds config.json and the weights")


def open_safetensors_file(path: Path) -> Checkpoint:
    """Open a single safetensors file (a rank shard, for instance) as a Checkpoint."""
    path = Path(path)
    return _open_safetensors(path.parent, {path.name: None}, None, index=None)


def _read_config(model_dir: Path) -> dict[str, Any] | None:
    path = model_dir / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return config


def _read_index(path: Path) -> dict[str, set[str] | None]:
    """Return {shard file: tensor names the index places there}, validating names and presence."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not valid JSON: {exc}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{path}: no 'weight_map' object mapping tensor names to files")
    files: dict[str, set[str] | None] = {}
    for tensor, file in weight_map.items():
        if not isinstance(file, str) or not file:
            raise CheckpointError(f"{path}: tensor '{tensor}' maps to {file!r}, not a file name")
        if Path(file).name != file or file in (".", ".."):
            msg = f"{path}: tensor '{tensor}' maps to '{file}', which is outside the model directory"
            raise CheckpointError(msg)
        names = files.setdefault(file, set())
        assert names is not None
        names.add(tensor)
    missing = sorted(f for f in files if not (path.parent / f).is_file())
    if missing:
        msg = f"{path.parent / missing[0]}: missing shard (listed in {path.name})"
        details = [f"missing: {f}" for f in missing]
        raise CheckpointError(msg, details=details if len(missing) > 1 else (), hint="download every shard")
    return dict(sorted(files.items()))


def _open_safetensors(
    root: Path, files: dict[str, set[str] | None], config: dict[str, Any] | None, *, index: str | None
) -> Checkpoint:
    tensors: list[TensorInfo] = []
    sources: list[SourceFile] = []
    seen: dict[str, str] = {}
    for file, expected in files.items():
        header: SafetensorsHeader = read_header(root / file, display=str(root / file))
        names = {e.name for e in header.entries}
        if expected is not None:
            absent = sorted(expected - names)
            if absent:
                msg = f"{root / file}: has no tensor '{absent[0]}', which {index} places there"
                raise CheckpointError(msg, details=[f"absent: {n}" for n in absent[:20]])
        for entry in header.entries:
            if entry.name in seen:
                msg = f"{root / file}: tensor '{entry.name}' is also in {seen[entry.name]}"
                raise CheckpointError(msg)
            seen[entry.name] = file
            tensors.append(
                TensorInfo(
                    name=entry.name,
                    dtype=entry.dtype,
                    shape=entry.shape,
                    file=file,
                    offset=header.data_start + entry.begin,
                    nbytes=entry.nbytes,
                )
            )
        sources.append(SourceFile(file, header.file_size, header.header_sha256))
    return Checkpoint(root, "safetensors", sources, tensors, config)


def _open_bin(
    root: Path, files: dict[str, set[str] | None], config: dict[str, Any] | None, *, index: str | None
) -> Checkpoint:
    tensors: list[TensorInfo] = []
    sources: list[SourceFile] = []
    seen: dict[str, str] = {}
    for file, expected in files.items():
        state = _load_bin(root / file)
        offsets = locate_tensors(root / file, state)
        absent = sorted((expected or set()) - set(state))
        if absent:
            msg = f"{root / file}: has no tensor '{absent[0]}', which {index} places there"
            raise CheckpointError(msg, details=[f"absent: {n}" for n in absent[:20]])
        for name, tensor in state.items():
            if name in seen:
                raise CheckpointError(f"{root / file}: tensor '{name}' is also in {seen[name]}")
            seen[name] = file
            code = torch_dtype_code(tensor.dtype)
            if code is None:
                msg = f"{root / file}: tensor '{name}' has dtype {tensor.dtype}, which neuronc cannot split"
                raise CheckpointError(msg)
            shape = tuple(int(d) for d in tensor.shape)
            nbytes = tensor.numel() * DTYPE_SIZES[code]
            tensors.append(TensorInfo(name, code, shape, file, offsets.get(name), nbytes))
        sources.append(SourceFile(file, (root / file).stat().st_size, None))
        del state
    return Checkpoint(root, "pytorch", sources, tensors, config)


def _load_bin(path: Path) -> dict[str, Any]:
    """Load a PyTorch state dict without executing code: weights_only, memory-mapped when possible."""
    try:
        import torch
    except ImportError:
        msg = f"{path}: reading .bin checkpoints needs torch, which is not installed"
        raise EnvironmentIncompatibleError(msg, hint="pip install 'neuronc[cpu]', or use safetensors") from None
    import pickle
    import zipfile

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            # Files in the legacy (pre-1.6, non-zip) format cannot be memory-mapped; load them whole.
            if "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        msg = f"{path}: refused: loading it would need full unpickling, which can run arbitrary code"
        reason = _torch_reason(exc, prefer="Unsupported global")
        msg += f" ({reason})" if reason else ""
        raise CheckpointError(msg, hint="convert the checkpoint to safetensors with a tool you trust") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        reason = _torch_reason(exc) or type(exc).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated?): {reason}") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        msg = f"{path}: not a flat state dict of tensors (a training checkpoint or a wrapped model?)"
        raise CheckpointError(msg)
    return state


def _torch_reason(exc: BaseException, prefer: str = "") -> str:
    """The informative part of a torch.load error: one line, no ANSI colour, first sentence only."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    chosen = next((line for line in lines if prefer and prefer in line), lines[0] if lines else "")
    chosen = chosen.removeprefix("WeightsUnpickler error: ")
    return chosen.split(". ")[0].rstrip(".")
