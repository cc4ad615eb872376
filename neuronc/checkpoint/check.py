"""Read a split back: load its index, reassemble tensors, and check it against the source.

This is deliberately a second implementation of the layout, not a re-run of the splitter: it
reads index.json as the documented contract (docs/split.md), views each source and rank tensor as
[outer, dim, inner] and compares every recorded slice, so a bug in the splitter's byte arithmetic
cannot hide behind the same bug in the checker.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.checkpoint._cast import cast_bytes
from neuronc.checkpoint._index import INDEX_FILE, entry_problem, load_index
from neuronc.checkpoint._safetensors import DTYPE_SIZES
from neuronc.checkpoint._tree import ModelTree
from neuronc.checkpoint.partition import merge_ranges
from neuronc.checkpoint.reader import Checkpoint, TensorInfo, open_checkpoint, open_safetensors_file
from neuronc.checkpoint.split import CHUNK_BYTES
from neuronc.errors import CheckpointError, InvalidInputError, NeuroncError, safe_text
from neuronc.fsutil import open_regular, plural
from neuronc.progress import NULL_PROGRESS, ProgressSink, ProgressTask

if TYPE_CHECKING:
    import numpy as np

MAX_REPORTED = 100


@dataclass(frozen=True)
class Mismatch:
    """One difference between the split and its source."""

    problem: str
    tensor: str | None = None
    rank: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "rank": self.rank, "problem": self.problem}

    def __str__(self) -> str:
        where = []
        if self.tensor is not None:
            where.append(f"tensor {self.tensor}")
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        return f"{', '.join(where)}: {self.problem}" if where else self.problem


@dataclass(frozen=True)
class CheckReport:
    """The outcome of ``check_split``: ok when every tensor and every shard hash matched."""

    split_dir: Path
    model_dir: Path
    tp: int
    tensors_checked: int
    shards_checked: int
    bytes_compared: int
    seconds: float
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        """Return the stable JSON form printed by ``neuronc split --check --json``."""
        return {
            "ok": self.ok,
            "split_dir": str(self.split_dir),
            "model_dir": str(self.model_dir),
            "tp": self.tp,
            "tensors_checked": self.tensors_checked,
            "shards_checked": self.shards_checked,
            "bytes_compared": self.bytes_compared,
            "seconds": round(self.seconds, 3),
            "mismatches": [m.to_json() for m in self.mismatches],
        }


class SplitIndex:
    """A split directory opened through its index.json: rank shards, per-tensor layout, reassembly."""

    def __init__(self, split_dir: Path) -> None:
        self.split_dir = Path(split_dir)
        self.data = load_index(self.split_dir)
        self.tp: int = self.data["tp"]
        self.tensors: dict[str, dict[str, Any]] = self.data["tensors"]
        self.shards: list[dict[str, Any]] = self.data["shards"]
        self._ranks: dict[int, Checkpoint] = {}

    @property
    def source_path(self) -> Path:
        path = self.data.get("source", {}).get("path")
        if path is None:
            msg = f"{safe_text(self.split_dir / INDEX_FILE)}: records no source path"
            raise InvalidInputError(msg, hint="name the source: neuronc split --check DIR MODEL_DIR")
        return Path(path)

    def rank_checkpoint(self, rank: int) -> Checkpoint:
        """Return rank ``rank``'s shard opened for reading (kept open until ``close``)."""
        if rank not in self._ranks:
            self._ranks[rank] = open_safetensors_file(self.split_dir / self.shards[rank]["file"])
        return self._ranks[rank]

    def close(self) -> None:
        for ckpt in self._ranks.values():
            ckpt.close()
        self._ranks.clear()

    def __enter__(self) -> SplitIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reassemble(self, name: str) -> bytes:
        """Rebuild one original tensor (in its stored dtype) from the rank shards, whole, in memory.

        The entry is checked first, and each rank's part against its shard's header, so the memory
        allocated is what the shards really hold, never what index.json claims.
        """
        import numpy as np

        entry = self.tensors[name]
        shown = f"{safe_text(self.split_dir / INDEX_FILE)}: tensor '{safe_text(name)}'"
        if (problem := entry_problem(entry, self.tp)) is not None:
            raise InvalidInputError(f"{shown}: {problem}")
        for rank_entry in entry["ranks"]:
            held = self.rank_checkpoint(rank_entry["rank"]).tensors.get(name)
            if held is None or held.dtype != entry["dtype"] or list(held.shape) != rank_entry["shape"]:
                raise CheckpointError(f"{shown}: rank {rank_entry['rank']}'s shard does not hold it as index.json says")
        if entry["dim"] is None:
            return self.rank_checkpoint(0).read_bytes(name)
        shape, dim = entry["shape"], entry["dim"]
        itemsize = DTYPE_SIZES[entry["dtype"]]
        outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1 :]) * itemsize
        result = np.zeros((outer, shape[dim], inner), dtype=np.uint8)
        filled: list[tuple[int, int]] = []  # sorted, disjoint: the ranges copied so far
        for rank_entry in entry["ranks"]:
            rank_shape = rank_entry["shape"]
            data = np.frombuffer(self.rank_checkpoint(rank_entry["rank"]).read_bytes(name), dtype=np.uint8)
            data = data.reshape(outer, rank_shape[dim], inner)
            position = 0
            for start, stop in rank_entry["slices"]:
                # The first rank holding a range supplies it (replicas are equal; check_split verifies).
                for a, b in _uncovered(filled, start, stop):
                    result[:, a:b] = data[:, position + a - start : position + b - start]
                filled = merge_ranges([*filled, (start, stop)])
                position += stop - start
        return result.tobytes()


def _uncovered(filled: list[tuple[int, int]], start: int, stop: int) -> list[tuple[int, int]]:
    """The parts of [start, stop) outside the sorted, disjoint ranges ``filled``."""
    parts, cursor = [], start
    for a, b in filled:
        if b <= cursor or a >= stop:
            continue
        if a > cursor:
            parts.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < stop:
        parts.append((cursor, stop))
    return parts


def open_split(split_dir: Path) -> SplitIndex:
    """Open a split directory written by ``split_checkpoint``.

    Raises:
        InvalidInputError: no index.json, one neuronc did not write, or a malformed one.
    """
    return SplitIndex(split_dir)


def check_split(
    split_dir: Path,
    model_dir: Path | None = None,
    *,
    progress: ProgressSink = NULL_PROGRESS,
) -> CheckReport:
    """Reassemble every tensor of a split and compare it, bit for bit, with the source checkpoint.

    Also verifies each shard's size and SHA-256 against index.json, that the recorded slices cover
    every tensor exactly, that GQA replicas agree and that vocabulary padding is zero.

    Args:
        split_dir: a directory written by ``split_checkpoint``.
        model_dir: the source checkpoint; defaults to the path recorded in index.json.

    Raises:
        InvalidInputError: split_dir is not a split.
        CheckpointError: the source checkpoint cannot be read.
    """
    started = time.perf_counter()
    split_dir = Path(split_dir)
    problems: list[Mismatch] = []
    compared = 0
    with SplitIndex(split_dir) as split:
        source_dir = Path(model_dir) if model_dir is not None else split.source_path
        total = sum(s["bytes"] for s in split.shards)
        hashed = sum(s["bytes"] for s in split.shards if s.get("sha256") is not None)
        task = progress.task(f"check {split_dir.name}", total=total + hashed, unit="bytes")
        healthy = _check_shards(split, problems, task)
        with open_checkpoint(source_dir) as source:
            for name in source.tensors:
                if name not in split.tensors:
                    problems.append(Mismatch("in the source but not in the split", name))
            for name, entry in split.tensors.items():
                if (malformed := entry_problem(entry, split.tp)) is not None:
                    problems.append(Mismatch(malformed, name))
                    continue
                try:
                    nbytes, problem = _check_tensor(split, source, name, entry, healthy, task)
                except NeuroncError as exc:  # a source or shard that cannot be read: one problem of this tensor
                    nbytes, problem = 0, Mismatch(exc.message, name)
                compared += nbytes
                if problem is not None:
                    problems.append(problem)
        task.done("ok" if not problems else plural(len(problems), "problem"))
    return CheckReport(
        split_dir=split_dir,
        model_dir=source_dir,
        tp=split.tp,
        tensors_checked=len(split.tensors),
        shards_checked=len(split.shards),
        bytes_compared=compared,
        seconds=time.perf_counter() - started,
        mismatches=problems[:MAX_REPORTED],
    )


def _check_shards(split: SplitIndex, problems: list[Mismatch], task: ProgressTask) -> set[int]:
    """Check every shard's size, and its SHA-256 where index.json records one (a split made without
    hashing records null: its bytes are still compared with the source, tensor by tensor); open its
    header; return the ranks whose shard can be read."""
    healthy: set[int] = set()
    tree = ModelTree(split.split_dir)
    for rank, shard in enumerate(split.shards):
        file = shard["file"]
        try:
            size, digest = _size_and_sha256(tree.path(file), hashing=shard.get("sha256") is not None, task=task)
        except FileNotFoundError:
            problems.append(Mismatch(f"shard {file} is missing", rank=rank))
            continue
        except CheckpointError as exc:  # a link out of the split, a FIFO, a read error
            problems.append(Mismatch(exc.message, rank=rank))
            continue
        if size != shard["bytes"]:
            problems.append(Mismatch(f"{file} has {size} bytes, index.json says {shard['bytes']}", rank=rank))
        elif digest is not None and digest != shard["sha256"]:
            problems.append(Mismatch(f"{file}: SHA-256 differs from index.json", rank=rank))
        try:
            rckpt = split.rank_checkpoint(rank)
        except CheckpointError as exc:
            problems.append(Mismatch(exc.message, rank=rank))
            continue
        # Tensors index.json does not list would escape the tensor-by-tensor comparison (a recorded
        # SHA-256 catches them too, but a split made without hashing has none).
        problems.extend(
            Mismatch(f"{file} holds a tensor index.json does not list", name, rank)
            for name in rckpt.tensors
            if name not in split.tensors
        )
        healthy.add(rank)
    return healthy


def _size_and_sha256(path: Path, *, hashing: bool, task: ProgressTask) -> tuple[int, str | None]:
    """A shard's size, and its SHA-256 when ``hashing`` (read a bounded chunk at a time)."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError as exc:
        raise CheckpointError(f"{safe_text(path)}: cannot open: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        if not hashing:
            return os.fstat(f.fileno()).st_size, None
        digest, size = hashlib.sha256(), 0
        try:
            while chunk := f.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
                task.advance(len(chunk))
        except OSError as exc:
            raise CheckpointError(f"{safe_text(path)}: cannot read: {exc.strerror or exc}") from None
        return size, digest.hexdigest()


def _check_tensor(
    split: SplitIndex,
    source: Checkpoint,
    name: str,
    entry: dict[str, Any],
    healthy: set[int],
    task: ProgressTask,
) -> tuple[int, Mismatch | None]:
    """Compare one tensor's rank pieces with the source; return bytes compared and the first problem."""
    if name not in source.tensors:
        return 0, Mismatch("in the split but not in the source", name)
    info = source.tensors[name]
    if list(info.shape) != entry["shape"] or info.dtype != entry["source_dtype"]:
        recorded = f"{entry['source_dtype']} {entry['shape']}"
        return 0, Mismatch(f"source is {info.dtype} {list(info.shape)}, index.json recorded {recorded}", name)
    stored, dim, ranks = entry["dtype"], entry["dim"], entry["ranks"]
    compared = 0
    for rank_entry in ranks:
        rank = rank_entry["rank"]
        if rank not in healthy:
            continue  # already reported by the shard check
        rckpt = split.rank_checkpoint(rank)
        rinfo = rckpt.tensors.get(name)
        if rinfo is None:
            return compared, Mismatch("missing from the rank shard", name, rank)
        if rinfo.dtype != stored or list(rinfo.shape) != rank_entry["shape"]:
            held = f"{rinfo.dtype} {list(rinfo.shape)}"
            return compared, Mismatch(f"shard holds {held}, index.json says {stored} {rank_entry['shape']}", name, rank)
        if info.nbytes == 0:
            continue  # an empty tensor (some dimension is 0): its shape was all there was to compare
        piece = _Piece(source, info, rckpt, rinfo, stored, task)
        if dim is None:
            problem = None if piece.equal(0, 0, info.numel) else "replicated copy differs from the source"
        else:
            problem = piece.problem(rank_entry, dim)
        compared += rinfo.nbytes
        if problem is not None:
            return compared, Mismatch(problem, name, rank)
    return compared, None


@dataclass(frozen=True)
class _Piece:
    """One tensor of the source and its piece in one rank's shard, held as ``stored``."""

    source: Checkpoint
    info: TensorInfo
    rank: Checkpoint
    rinfo: TensorInfo
    stored: str
    task: ProgressTask

    def problem(self, rank_entry: dict[str, Any], dim: int) -> str | None:
        """Compare the rank's share of a tensor split along ``dim`` with the source."""
        outer = math.prod(self.info.shape[:dim])
        inner = math.prod(self.info.shape[dim + 1 :])  # elements per index along dim
        if outer > 1:
            return self._blocks_problem(rank_entry, dim)
        position = 0
        for start, stop in rank_entry["slices"]:
            if not self.equal(start * inner, position * inner, (stop - start) * inner):
                return f"slice [{start}, {stop}) of dim {dim} differs from the source"
            position += stop - start
        if not self._zeros(position * inner, rank_entry["pad"] * inner):
            return "vocabulary padding is not zero"
        return None

    def _source_chunk(self, first: int, count: int) -> Any:
        size = self.info.itemsize
        return cast_bytes(self.source.read_range(self.info, first * size, count * size), self.info.dtype, self.stored)

    def equal(self, source_first: int, rank_first: int, count: int) -> bool:
        """Compare ``count`` elements of the source (cast to ``stored``) with the rank tensor's elements."""
        step = CHUNK_BYTES // 8
        size = self.rinfo.itemsize
        for done in range(0, count, step):
            n = min(step, count - done)
            expected = memoryview(self._source_chunk(source_first + done, n)).cast("B")
            actual = self.rank.read_range(self.rinfo, (rank_first + done) * size, n * size)
            self.task.advance(len(actual))
            if expected != actual:
                return False
        return True

    def _zeros(self, first: int, count: int) -> bool:
        step = CHUNK_BYTES // 8
        size = self.rinfo.itemsize
        for done in range(0, count, step):
            n = min(step, count - done)
            if any(self.rank.read_range(self.rinfo, (first + done) * size, n * size).tobytes()):
                return False
        return True

    def _blocks_problem(self, rank_entry: dict[str, Any], dim: int) -> str | None:
        """Compare a tensor split along a later dimension, a block of outer rows at a time."""
        import numpy as np

        shape = self.info.shape
        outer = math.prod(shape[:dim])
        full, held = shape[dim], rank_entry["shape"][dim]
        inner = math.prod(shape[dim + 1 :])
        inner_bytes = inner * DTYPE_SIZES[self.stored]
        rows_per_block = max(1, CHUNK_BYTES // max(full * inner * self.info.itemsize, 1))
        for first in range(0, outer, rows_per_block):
            count = min(rows_per_block, outer - first)
            chunk = self._source_chunk(first * full * inner, count * full * inner)
            expected: np.ndarray[Any, Any] = np.frombuffer(chunk, dtype=np.uint8).reshape(count, full, inner_bytes)
            data = self.rank.read_range(self.rinfo, first * held * inner_bytes, count * held * inner_bytes)
            actual = np.frombuffer(data, dtype=np.uint8).reshape(count, held, inner_bytes)
            self.task.advance(actual.nbytes)
            position = 0
            for start, stop in rank_entry["slices"]:
                if not np.array_equal(actual[:, position : position + stop - start], expected[:, start:stop]):
                    return f"slice [{start}, {stop}) of dim {dim} differs from the source"
                position += stop - start
            if actual[:, position:].any():
                return "padding is not zero"
        return None
