"""Split a checkpoint into tensor-parallel rank shards, streaming, with bounded memory.

Each source tensor is read once, in chunks of at most ``CHUNK_BYTES`` (a tensor split along its
first dimension, or replicated, is copied range by range; one split along a later dimension is
read a block of outer rows at a time and each rank's columns gathered from it), and each chunk is
appended to every rank file that needs it. Rank files are written front to back — header first,
from the shapes the partition plan gives — and hashed while written. The whole output is built in
a hidden staging directory next to ``out_dir``, fsynced, then renamed into place, so a failure at
any point leaves no ``out_dir`` at all.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.checkpoint._cast import cast_bytes, cast_target, dtype_code
from neuronc.checkpoint._safetensors import DTYPE_SIZES
from neuronc.checkpoint.partition import Partition, model_dims, plan_partitions
from neuronc.checkpoint.reader import Checkpoint, TensorInfo, open_checkpoint
from neuronc.checkpoint.writer import ShardWriter, fsync_dir
from neuronc.errors import InvalidInputError
from neuronc.progress import NULL_PROGRESS, ProgressSink, ProgressTask

INDEX_FILE = "index.json"
INDEX_FORMAT = "neuronc-tp-split"
INDEX_VERSION = 1

# Bytes read or gathered at a time; a multiple of every element size. Large enough that syscall
# overhead vanishes, small enough to be noise next to the 300 MB budget.
CHUNK_BYTES = 16 * 1024 * 1024


def shard_name(rank: int, tp: int) -> str:
    """Return the file name of rank ``rank``'s shard."""
    return f"rank-{rank:03d}-of-{tp:03d}.safetensors"


@dataclass(frozen=True)
class ShardInfo:
    """One written rank shard; ``file`` is relative to the split directory."""

    rank: int
    file: str
    bytes: int
    sha256: str
    tensors: int

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "file": self.file,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "tensors": self.tensors,
        }


@dataclass(frozen=True)
class SplitResult:
    """What ``split_checkpoint`` wrote and what it cost."""

    out_dir: Path
    model_dir: Path
    tp: int
    family: str
    dtype: str | None
    tensors: int
    shards: list[ShardInfo]
    index_file: Path
    total_bytes: int
    seconds: float
    peak_rss_bytes: int | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """Return the stable JSON form printed by ``neuronc split --json``."""
        return {
            "out_dir": str(self.out_dir),
            "model_dir": str(self.model_dir),
            "tp": self.tp,
            "family": self.family,
            "dtype": self.dtype,
            "tensors": self.tensors,
            "index_file": self.index_file.name,
            "total_bytes": self.total_bytes,
            "seconds": round(self.seconds, 3),
            "peak_rss_bytes": self.peak_rss_bytes,
            "shards": [s.to_json() for s in self.shards],
        }


def peak_rss_bytes() -> int | None:
    """Return this process's peak resident set size so far (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Linux
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def split_checkpoint(
    model_dir: Path,
    out_dir: Path,
    tp: int,
    *,
    dtype: str | None = None,
    progress: ProgressSink = NULL_PROGRESS,
) -> SplitResult:
    """Split a Hugging Face checkpoint into ``tp`` rank shards plus ``index.json`` in ``out_dir``.

    Args:
        model_dir: directory with config.json and the weights (safetensors or .bin, sharded or not).
        out_dir: where to publish; must not exist or be empty. Created atomically.
        tp: tensor-parallel degree.
        dtype: cast floating-point tensors to "fp32", "fp16" or "bf16" while streaming.
        progress: receives one bytes task covering every byte written.

    Raises:
        CheckpointError: the checkpoint is missing, broken, or has tensors no rule covers.
        InvalidInputError: bad tp or dtype, an unsupported architecture, or a non-empty out_dir.
    """
    started = time.perf_counter()
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InvalidInputError(f"tp must be a positive integer, got {tp!r}")
    target = dtype_code(dtype)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        msg = f"{out_dir}: already exists and is not an empty directory"
        raise InvalidInputError(msg, hint="remove it or choose another --out")

    with open_checkpoint(model_dir) as ckpt:
        dims = model_dims(ckpt.config, where=str(model_dir))
        plans = plan_partitions(dims, ckpt, tp, root=model_dir)
        stored = {p.name: cast_target(ckpt.tensors[p.name].dtype, target) for p in plans}
        # Widest elements first, then source order: every tensor then starts at a multiple of its
        # element size in the shard (the header is padded to 8), which zero-copy loaders like.
        order = sorted(plans, key=lambda p: -DTYPE_SIZES[stored[p.name]])
        layouts = [[(p.name, stored[p.name], p.rank_shape(r)) for p in order] for r in range(tp)]

        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
        writers: list[ShardWriter] = []
        try:
            for rank in range(tp):
                metadata = {"format": "pt", "neuronc.rank": str(rank), "neuronc.tp": str(tp)}
                writers.append(ShardWriter(staging / shard_name(rank, tp), layouts[rank], metadata))
            total = sum(_data_bytes(layout) for layout in layouts)
            task = progress.task(f"split {model_dir.name} into tp={tp}", total=total, unit="bytes")
            for plan in order:
                info = ckpt.tensors[plan.name]
                _stream_tensor(ckpt, info, plan, stored[plan.name], writers, task)
                for w in writers:
                    w.end_tensor(plan.name)
            written = [w.finish() for w in writers]
            shards = [
                ShardInfo(rank, shard_name(rank, tp), f.bytes, f.sha256, len(layouts[rank]))
                for rank, f in enumerate(written)
            ]
            index = _index_json(ckpt, dims.family, tp, target, plans, stored, shards)
            _write_json(staging / INDEX_FILE, index)
            fsync_dir(staging)
            os.replace(staging, out_dir)
            fsync_dir(out_dir.parent)
            task.done(f"{len(shards)} shards")
        except BaseException:
            for w in writers:
                w.close()
            shutil.rmtree(staging, ignore_errors=True)
            raise

    return SplitResult(
        out_dir=out_dir,
        model_dir=model_dir,
        tp=tp,
        family=dims.family,
        dtype=_dtype_label(target),
        tensors=len(plans),
        shards=shards,
        index_file=out_dir / INDEX_FILE,
        total_bytes=sum(s.bytes for s in shards),
        seconds=time.perf_counter() - started,
        peak_rss_bytes=peak_rss_bytes(),
    )


def _data_bytes(layout: list[tuple[str, str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) * DTYPE_SIZES[dtype] for _, dtype, shape in layout)


def _dtype_label(code: str | None) -> str | None:
    return {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}.get(code) if code else None


def _stream_tensor(
    ckpt: Checkpoint,
    info: TensorInfo,
    plan: Partition,
    stored: str,
    writers: list[ShardWriter],
    task: ProgressTask,
) -> None:
    """Copy one tensor into every rank file, a bounded chunk at a time."""
    source = info.dtype

    def emit(rank: int, data: Any) -> None:
        task.advance(writers[rank].write(cast_bytes(data, source, stored)))

    if plan.dim is None:  # replicated: read each chunk once, cast once, write it to every rank
        for start in range(0, info.nbytes, CHUNK_BYTES):
            chunk = cast_bytes(ckpt.read_range(info, start, min(CHUNK_BYTES, info.nbytes - start)), source, stored)
            for w in writers:
                task.advance(w.write(chunk))
        return

    dim = plan.dim
    outer = math.prod(info.shape[:dim])
    inner = math.prod(info.shape[dim + 1 :]) * info.itemsize  # bytes per index along dim
    if outer == 1:
        # Each rank's share is a few contiguous byte ranges of the source: copy them as they are.
        scale = DTYPE_SIZES[stored] / info.itemsize
        for rank_slice in plan.ranks:
            for start, stop in rank_slice.slices:
                end = stop * inner
                for offset in range(start * inner, end, CHUNK_BYTES):
                    emit(rank_slice.rank, ckpt.read_range(info, offset, min(CHUNK_BYTES, end - offset)))
            _write_zeros(writers[rank_slice.rank], int(rank_slice.pad * inner * scale), task)
        return

    import numpy as np

    # Split along a later dimension: view the tensor as [outer, row] and take, for every block of
    # outer rows, each rank's columns; each rank's output still grows front to back.
    row = info.shape[dim] * inner
    rows_per_block = max(1, CHUNK_BYTES // max(row, 1))
    for first in range(0, outer, rows_per_block):
        count = min(rows_per_block, outer - first)
        block = np.frombuffer(ckpt.read_range(info, first * row, count * row), dtype=np.uint8)
        block = block.reshape(count, row)
        for rank_slice in plan.ranks:
            pieces = [block[:, start * inner : stop * inner] for start, stop in rank_slice.slices]
            if rank_slice.pad:
                pieces.append(np.zeros((count, rank_slice.pad * inner), dtype=np.uint8))
            gathered = np.concatenate(pieces, axis=1) if len(pieces) > 1 else np.ascontiguousarray(pieces[0])
            emit(rank_slice.rank, gathered)


def _write_zeros(writer: ShardWriter, count: int, task: ProgressTask) -> None:
    while count > 0:
        n = min(count, CHUNK_BYTES)
        task.advance(writer.write(bytes(n)))
        count -= n


def _index_json(
    ckpt: Checkpoint,
    family: str,
    tp: int,
    target: str | None,
    plans: list[Partition],
    stored: dict[str, str],
    shards: list[ShardInfo],
) -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    for plan in plans:
        info = ckpt.tensors[plan.name]
        tensors[plan.name] = {
            "source_file": info.file,
            "source_dtype": info.dtype,
            "dtype": stored[plan.name],
            **plan.to_json(),
        }
    config = ckpt.config or {}
    return {
        "format": INDEX_FORMAT,
        "format_version": INDEX_VERSION,
        "tp": tp,
        "family": family,
        "dtype": _dtype_label(target),
        "model": {
            key: config.get(key)
            for key in ("model_type", "num_attention_heads", "num_key_value_heads", "n_head", "vocab_size")
            if key in config
        },
        "source": {
            "path": str(ckpt.root.resolve()),
            "format": ckpt.format,
            "files": [{"file": f.file, "bytes": f.bytes, "header_sha256": f.header_sha256} for f in ckpt.files],
        },
        "shards": [s.to_json() for s in shards],
        "tensors": tensors,
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
