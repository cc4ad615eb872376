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

import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from neuronc.checkpoint._safetensors import (
    DTYPE_SIZES,
    SafetensorsHeader,
    pread_exact,
    read_header,
    shape_problem,
)
from neuronc.checkpoint._torchzip import load_bin, locate_tensors
from neuronc.checkpoint._tree import ModelTree, plain_name_problem
from neuronc.errors import CheckpointError, NeuroncError, safe_text
from neuronc.fsutil import open_regular, read_bytes_limited
from neuronc.jsonfile import InvalidJsonError, expect_object, expect_type, parse_json
from neuronc.model.files import CONFIG_NAME, read_model_config

if TYPE_CHECKING:
    import numpy as np
    import torch

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

# An index.json names every tensor once: 16 MB of it is over 100,000 tensors, more than any model has.
MAX_INDEX_BYTES = 64 * 1024 * 1024

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
        paths: Mapping[str, Path] | None = None,
    ) -> None:
        self.root = root
        # file -> the checked regular file it stands for (links resolved by ModelTree)
        self._paths = dict(paths or {})
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
                fd = open_regular(self._paths.get(file, self.root / file), follow_symlinks=False)
            except (OSError, NeuroncError) as exc:
                reason = exc.message if isinstance(exc, NeuroncError) else exc.strerror or str(exc)
                msg = f"{safe_text(self.root / file)}: cannot open: {reason}"
                raise CheckpointError(msg) from None
            self._fds[file] = fd
        return fd

    def _bin_bytes(self, info: TensorInfo) -> np.ndarray[Any, Any]:
        if self._bin_current is not None and self._bin_current[0] == info.name:
            return self._bin_current[1]
        if self._bin_file != info.file:
            self._bin_state = {}
            self._bin_current = None
            path = self._paths.get(info.file, self.root / info.file)
            self._bin_state = load_bin(path, display=safe_text(self.root / info.file))
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

    Files are opened only as regular files inside the directory (see ``_tree``): a link out of it,
    a link loop, a FIFO or a device is a CheckpointError, never followed or opened.

    Raises:
        CheckpointError: the directory holds no checkpoint, or a file is missing, truncated or
            malformed; the message names the file and the problem.
        EnvironmentIncompatibleError: a ``.bin`` checkpoint needs torch, which is not installed.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        msg = f"{model_dir}: not a directory" if model_dir.exists() else f"{model_dir}: no such directory"
        raise CheckpointError(safe_text(msg, limit=400))
    tree = ModelTree(model_dir)
    config = None
    if tree.has(CONFIG_NAME):
        tree.path(CONFIG_NAME)  # inside the tree and a regular file; read by the one config.json reader
        config = read_model_config(model_dir, required=False)
    if tree.has(SAFETENSORS_INDEX):
        return _open_safetensors(tree, _read_index(tree, SAFETENSORS_INDEX), config, index=SAFETENSORS_INDEX)
    if tree.has(SAFETENSORS_SINGLE):
        return _open_safetensors(tree, {SAFETENSORS_SINGLE: None}, config, index=None)
    if tree.has(BIN_INDEX):
        return _open_bin(tree, _read_index(tree, BIN_INDEX), config, index=BIN_INDEX)
    if tree.has(BIN_SINGLE):
        return _open_bin(tree, {BIN_SINGLE: None}, config, index=None)
    looked = ", ".join((SAFETENSORS_INDEX, SAFETENSORS_SINGLE, BIN_INDEX, BIN_SINGLE))
    msg = f"{safe_text(model_dir, limit=400)}: no checkpoint found (looked for {looked})"
    raise CheckpointError(msg, hint="pass the directory that holds config.json and the weights")


def open_safetensors_file(path: Path) -> Checkpoint:
    """Open a single safetensors file (a rank shard, for instance) as a Checkpoint."""
    path = Path(path)
    return _open_safetensors(ModelTree(path.parent), {path.name: None}, None, index=None)


def _read_index(tree: ModelTree, name: str) -> dict[str, set[str] | None]:
    """Return {shard file: tensor names the index places there}, validating names and presence."""
    shown = tree.display(name)
    try:
        raw = read_bytes_limited(tree.path(name), MAX_INDEX_BYTES, what=name)
        index = expect_object(parse_json(raw, where=shown, max_bytes=MAX_INDEX_BYTES, unique_keys=True), shown)
    except InvalidJsonError as exc:
        raise CheckpointError(exc.message) from None
    except OSError as exc:
        raise CheckpointError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{shown}: no 'weight_map' object mapping tensor names to files")
    files: dict[str, set[str] | None] = {}
    for tensor, file in weight_map.items():
        try:
            expect_type(file, str, f"{shown}: weight_map entry '{safe_text(tensor)}'")
        except InvalidJsonError as exc:
            raise CheckpointError(exc.message) from None
        if (problem := plain_name_problem(file)) is not None:
            raise CheckpointError(f"{shown}: tensor '{safe_text(tensor)}' maps to '{safe_text(file)}', which {problem}")
        names = files.setdefault(file, set())
        assert names is not None
        names.add(tensor)
    missing = sorted(f for f in files if not tree.has(f))
    if missing:
        msg = f"{tree.display(missing[0])}: missing shard (listed in {name})"
        details = [f"missing: {safe_text(f)}" for f in missing[:20]]
        raise CheckpointError(msg, details=details if len(missing) > 1 else (), hint="download every shard")
    return dict(sorted(files.items()))


@dataclass
class _Gathered:
    """What opening a checkpoint's files gathers, with the checks every format makes: each file
    exists, holds the tensors the index places there, and names no tensor another file has."""

    tree: ModelTree
    index: str | None
    tensors: list[TensorInfo] = field(default_factory=list)
    sources: list[SourceFile] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)

    def open(self, file: str, shown: str) -> Path:
        try:
            self.paths[file] = path = self.tree.path(file)
        except FileNotFoundError:
            raise CheckpointError(f"{shown}: no such file") from None
        return path

    def expect(self, shown: str, expected: set[str] | None, names: Collection[str]) -> None:
        absent = sorted((expected or set()) - set(names))
        if absent:
            msg = f"{shown}: has no tensor '{safe_text(absent[0])}', which {self.index} places there"
            raise CheckpointError(msg, details=[f"absent: {safe_text(n)}" for n in absent[:20]])

    def claim(self, name: str, file: str, shown: str) -> None:
        if name in self.seen:
            raise CheckpointError(f"{shown}: tensor '{safe_text(name)}' is also in {safe_text(self.seen[name])}")
        self.seen[name] = file

    def checkpoint(self, fmt: CheckpointFormat, config: dict[str, Any] | None) -> Checkpoint:
        return Checkpoint(self.tree.shown, fmt, self.sources, self.tensors, config, self.paths)


def _open_safetensors(
    tree: ModelTree, files: dict[str, set[str] | None], config: dict[str, Any] | None, *, index: str | None
) -> Checkpoint:
    found = _Gathered(tree, index)
    for file, expected in files.items():
        shown = tree.display(file)
        header: SafetensorsHeader = read_header(found.open(file, shown), display=shown)
        found.expect(shown, expected, [e.name for e in header.entries])
        for entry in header.entries:
            found.claim(entry.name, file, shown)
            found.tensors.append(
                TensorInfo(
                    name=entry.name,
                    dtype=entry.dtype,
                    shape=entry.shape,
                    file=file,
                    offset=header.data_start + entry.begin,
                    nbytes=entry.nbytes,
                )
            )
        found.sources.append(SourceFile(file, header.file_size, header.header_sha256))
    return found.checkpoint("safetensors", config)


def _open_bin(
    tree: ModelTree, files: dict[str, set[str] | None], config: dict[str, Any] | None, *, index: str | None
) -> Checkpoint:
    found = _Gathered(tree, index)
    for file, expected in files.items():
        shown = tree.display(file)
        path = found.open(file, shown)
        state = load_bin(path, display=shown)
        offsets = locate_tensors(path, state)
        found.expect(shown, expected, state.keys())
        for name, tensor in state.items():
            found.claim(name, file, shown)
            code = torch_dtype_code(tensor.dtype)
            if code is None:
                msg = f"{shown}: tensor '{safe_text(name)}' has dtype {tensor.dtype}, which neuronc cannot split"
                raise CheckpointError(msg)
            shape = tuple(int(d) for d in tensor.shape)
            if (problem := shape_problem(code, shape)) is not None:
                msg = f"{shown}: tensor '{safe_text(name)}': shape {list(shape)} does not fit safetensors: {problem}"
                raise CheckpointError(msg)
            nbytes = tensor.numel() * DTYPE_SIZES[code]
            found.tensors.append(TensorInfo(name, code, shape, file, offsets.get(name), nbytes))
        found.sources.append(SourceFile(file, os.stat(path).st_size, None))
        del state
    return found.checkpoint("pytorch", config)
