"""Read a split back: load its index, reassemble tensors, and check it against the source.

This is deliberately a second implementation of the layout, not a re-run of the splitter: it
reads index.json as the documented contract (docs/split.md), views each source and rank tensor as
[outer, dim, inner] and compares every recorded slice, so a bug in the splitter's byte arithmetic
cannot hide behind the same bug in the checker.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.checkpoint._cast import cast_bytes
from neuronc.checkpoint._safetensors import DTYPE_SIZES
from neuronc.checkpoint.reader import Checkpoint, TensorInfo, open_checkpoint, open_safetensors_file
from neuronc.checkpoint.split import CHUNK_BYTES, INDEX_FILE, INDEX_FORMAT, INDEX_VERSION
from neuronc.errors import CheckpointError, InvalidInputError, NeuroncError
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
        self.data = _load_index(self.split_dir)
        self.tp: int = self.data["tp"]
        self.tensors: dict[str, dict[str, Any]] = self.data["tensors"]
        self.shards: list[dict[str, Any]] = self.data["shards"]
        self._ranks: dict[int, Checkpoint] = {}

    @property
    def source_path(self) -> Path:
        return Path(self.data["source"]["path"])

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
        """Rebuild one original tensor (in its stored dtype) from the rank shards, whole, in memory."""
        import numpy as np

        entry = self.tensors[name]
        if entry["dim"] is None:
            return self.rank_checkpoint(0).read_bytes(name)
        shape, dim = entry["shape"], entry["dim"]
        itemsize = DTYPE_SIZES[entry["dtype"]]
        outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1 :]) * itemsize
        result = np.zeros((outer, shape[dim], inner), dtype=np.uint8)
        filled = np.zeros(shape[dim], dtype=bool)
        for rank_entry in entry["ranks"]:
            rank_shape = rank_entry["shape"]
            data = np.frombuffer(self.rank_checkpoint(rank_entry["rank"]).read_bytes(name), dtype=np.uint8)
            data = data.reshape(outer, rank_shape[dim], inner)
            position = 0
            for start, stop in rank_entry["slices"]:
                # The first rank holding a range supplies it (replicas are equal; check_split verifies).
                todo = ~filled[start:stop]
                result[:, start:stop][:, todo] = data[:, position : position + stop - start][:, todo]
                filled[start:stop] = True
                position += stop - start
        if not filled.all():
            raise CheckpointError(f"{self.split_dir / INDEX_FILE}: tensor '{name}' is not fully covered by its slices")
        return result.tobytes()


def open_split(split_dir: Path) -> SplitIndex:
    """Open a split directory written by ``split_checkpoint``.

    Raises:
        InvalidInputError: no index.json, or one neuronc did not write.
    """
    return SplitIndex(split_dir)


def _load_index(split_dir: Path) -> dict[str, Any]:
    path = split_dir / INDEX_FILE
    if not path.is_file():
        raise InvalidInputError(f"{split_dir}: no {INDEX_FILE}; not a split written by neuronc split")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        raise InvalidInputError(f"{path}: not a neuronc split index (format is not {INDEX_FORMAT!r})")
    if data.get("format_version") != INDEX_VERSION:
        msg = f"{path}: format_version {data.get('format_version')!r} is not {INDEX_VERSION}"
        raise InvalidInputError(msg, hint="upgrade neuronc")
    tp = data.get("tp")
    shards = data.get("shards")
    if not isinstance(tp, int) or not isinstance(shards, list) or len(shards) != tp:
        raise InvalidInputError(f"{path}: 'tp' and 'shards' disagree")
    for shard in shards:
        file = shard.get("file") if isinstance(shard, dict) else None
        if not isinstance(file, str) or Path(file).name != file or file in ("", ".", ".."):
            raise InvalidInputError(f"{path}: shard file {file!r} is not a plain file name")
    if not isinstance(data.get("tensors"), dict):
        raise InvalidInputError(f"{path}: no 'tensors' object")
    return data


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
        total = sum(int(s.get("bytes", 0)) for s in split.shards)
        hashed = sum(int(s.get("bytes", 0)) for s in split.shards if s.get("sha256") is not None)
        task = progress.task(f"check {split_dir.name}", total=total + hashed, unit="bytes")
        healthy = _check_shards(split, problems, task)
        with open_checkpoint(source_dir) as source:
            for name in source.tensors:
                if name not in split.tensors:
                    problems.append(Mismatch("in the source but not in the split", name))
            for name, entry in split.tensors.items():
                try:
                    nbytes, problem = _check_tensor(split, source, name, entry, healthy, task)
                except NeuroncError as exc:
                    nbytes, problem = 0, Mismatch(exc.message, name)
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    nbytes, problem = 0, Mismatch(f"index.json entry is malformed: {exc!r}", name)
                compared += nbytes
                if problem is not None:
                    problems.append(problem)
        task.done("ok" if not problems else f"{len(problems)} problem(s)")
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
    for rank, shard in enumerate(split.shards):
        path = split.split_dir / shard["file"]
        if not path.is_file():
            problems.append(Mismatch(f"shard {shard['file']} is missing", rank=rank))
            continue
        recorded_sha256 = shard.get("sha256")
        digest = hashlib.sha256()
        size = 0
        if recorded_sha256 is None:
            size = path.stat().st_size
        else:
            with path.open("rb") as f:
                while chunk := f.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
                    task.advance(len(chunk))
        if size != shard.get("bytes"):
            recorded = shard.get("bytes")
            problems.append(Mismatch(f"{shard['file']} has {size} bytes, index.json says {recorded}", rank=rank))
        elif recorded_sha256 is not None and digest.hexdigest() != recorded_sha256:
            problems.append(Mismatch(f"{shard['file']}: SHA-256 differs from index.json", rank=rank))
        try:
            rckpt = split.rank_checkpoint(rank)
        except CheckpointError as exc:
            problems.append(Mismatch(exc.message, rank=rank))
            continue
        # Tensors index.json does not list would escape the tensor-by-tensor comparison (a recorded
        # SHA-256 catches them too, but a split made without hashing has none).
        problems.extend(
            Mismatch(f"{shard['file']} holds a tensor index.json does not list", name, rank)
            for name in rckpt.tensors
            if name not in split.tensors
        )
        healthy.add(rank)
    return healthy


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
    if [r["rank"] for r in ranks] != list(range(split.tp)):
        return 0, Mismatch(f"index.json lists ranks {[r['rank'] for r in ranks]} for tp={split.tp}", name)
    if dim is not None and (problem := _coverage_problem(entry)) is not None:
        return 0, Mismatch(problem, name)

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
        if dim is None:
            same = _equal_ranges(source, info, 0, rckpt, rinfo, 0, info.numel, stored, task)
            problem = None if same else "replicated copy differs from the source"
        else:
            problem = _rank_problem(source, info, rckpt, rinfo, rank_entry, dim, stored, task)
        compared += rinfo.nbytes
        if problem is not None:
            return compared, Mismatch(problem, name, rank)
    return compared, None


def _coverage_problem(entry: dict[str, Any]) -> str | None:
    """Check that all ranks' slices cover [0, n) of the split dimension and add up to each rank's shape."""
    dim, length = entry["dim"], entry["shape"][entry["dim"]]
    covered = [False] * length
    for rank_entry in entry["ranks"]:
        held = rank_entry["pad"]
        for start, stop in rank_entry["slices"]:
            if not 0 <= start < stop <= length:
                return f"rank {rank_entry['rank']}: slice [{start}, {stop}) is outside dim {dim} of size {length}"
            covered[start:stop] = [True] * (stop - start)
            held += stop - start
        if held != rank_entry["shape"][dim]:
            return f"rank {rank_entry['rank']}: slices and padding add up to {held}, not {rank_entry['shape'][dim]}"
    if not all(covered):
        return f"index {covered.index(False)} of dim {dim} is in no rank's slices"
    return None


def _rank_problem(
    source: Checkpoint,
    info: TensorInfo,
    rank: Checkpoint,
    rinfo: TensorInfo,
    rank_entry: dict[str, Any],
    dim: int,
    stored: str,
    task: ProgressTask,
) -> str | None:
    """Compare one rank's share of a split tensor with the source."""
    outer = math.prod(info.shape[:dim])
    inner = math.prod(info.shape[dim + 1 :])  # elements per index along dim
    if outer > 1:
        return _blocks_problem(source, info, rank, rinfo, rank_entry, dim, stored, task)
    position = 0
    for start, stop in rank_entry["slices"]:
        count = (stop - start) * inner
        if not _equal_ranges(source, info, start * inner, rank, rinfo, position * inner, count, stored, task):
            return f"slice [{start}, {stop}) of dim {dim} differs from the source"
        position += stop - start
    if not _zeros(rank, rinfo, position * inner, rank_entry["pad"] * inner):
        return "vocabulary padding is not zero"
    return None


def _source_chunk(source: Checkpoint, info: TensorInfo, first: int, count: int, stored: str) -> Any:
    return cast_bytes(source.read_range(info, first * info.itemsize, count * info.itemsize), info.dtype, stored)


def _equal_ranges(
    source: Checkpoint,
    info: TensorInfo,
    source_first: int,
    rank: Checkpoint,
    rinfo: TensorInfo,
    rank_first: int,
    count: int,
    stored: str,
    task: ProgressTask,
) -> bool:
    """Compare ``count`` elements of the source (cast to ``stored``) with a rank tensor's elements."""
    step = CHUNK_BYTES // 8
    for done in range(0, count, step):
        n = min(step, count - done)
        expected = memoryview(_source_chunk(source, info, source_first + done, n, stored)).cast("B")
        actual = rank.read_range(rinfo, (rank_first + done) * rinfo.itemsize, n * rinfo.itemsize)
        task.advance(len(actual))
        if expected != actual:
            return False
    return True


def _zeros(rank: Checkpoint, rinfo: TensorInfo, first: int, count: int) -> bool:
    step = CHUNK_BYTES // 8
    for done in range(0, count, step):
        n = min(step, count - done)
        if any(rank.read_range(rinfo, (first + done) * rinfo.itemsize, n * rinfo.itemsize).tobytes()):
            return False
    return True


def _blocks_problem(
    source: Checkpoint,
    info: TensorInfo,
    rank: Checkpoint,
    rinfo: TensorInfo,
    rank_entry: dict[str, Any],
    dim: int,
    stored: str,
    task: ProgressTask,
) -> str | None:
    """Compare a tensor split along a later dimension, a block of outer rows at a time."""
    import numpy as np

    outer = math.prod(info.shape[:dim])
    full, held = info.shape[dim], rank_entry["shape"][dim]
    inner = math.prod(info.shape[dim + 1 :])
    inner_bytes = inner * DTYPE_SIZES[stored]
    rows_per_block = max(1, CHUNK_BYTES // max(full * inner * info.itemsize, 1))
    for first in range(0, outer, rows_per_block):
        count = min(rows_per_block, outer - first)
        chunk = _source_chunk(source, info, first * full * inner, count * full * inner, stored)
        expected: np.ndarray[Any, Any] = np.frombuffer(chunk, dtype=np.uint8).reshape(count, full, inner_bytes)
        data = rank.read_range(rinfo, first * held * inner_bytes, count * held * inner_bytes)
        actual = np.frombuffer(data, dtype=np.uint8).reshape(count, held, inner_bytes)
        task.advance(actual.nbytes)
        position = 0
        for start, stop in rank_entry["slices"]:
            if not np.array_equal(actual[:, position : position + stop - start], expected[:, start:stop]):
                return f"slice [{start}, {stop}) of dim {dim} differs from the source"
            position += stop - start
        if actual[:, position:].any():
            return "padding is not zero"
    return None
