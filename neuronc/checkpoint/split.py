"""Split a checkpoint into tensor-parallel rank shards, streaming, with bounded memory.

Each source tensor is read once, in chunks of at most ``CHUNK_BYTES`` (a tensor split along its
first dimension, or replicated, is copied range by range; one split along a later dimension is
read a block of outer rows at a time and each rank's columns gathered from it), and each chunk is
appended to every rank file that needs it. Rank files are written front to back — header first,
from the shapes the partition plan gives — and hashed while written (unless ``hash=False``). Without
hashing, a rank's part that is a contiguous byte range of a source file in the stored dtype (a
replicated tensor, a split along the first dimension) is copied by the kernel (``copy_file_range``)
without passing through this process. The whole output is built in
a hidden staging directory next to ``out_dir``, fsynced, then renamed into place, so a failure at
any point leaves ``out_dir`` as it was (absent, or empty) and removes the parent directories the
split created. The total output size is known before the first byte is written: the split checks
free space first, and a disk that fills anyway is a DiskFullError (exit 5) naming ``out_dir`` and
the space needed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from neuronc.checkpoint._cast import cast_bytes, cast_target, dtype_code
from neuronc.checkpoint._index import INDEX_FILE, build_index, index_text, write_index
from neuronc.checkpoint._safetensors import DTYPE_SIZES, build_header, shape_problem
from neuronc.checkpoint._staging import Staging, on_disk, refuse_nonempty
from neuronc.checkpoint.partition import MAX_TP, Partition, RankSlice, merge_ranges, model_dims, plan_partitions
from neuronc.checkpoint.reader import Checkpoint, TensorInfo, open_checkpoint
from neuronc.checkpoint.writer import ShardWriter, WrittenFile
from neuronc.errors import MISSING_LIBRARY, CheckpointError, InvalidInputError, safe_text
from neuronc.fsutil import plural
from neuronc.jsonfile import JsonFields
from neuronc.progress import NULL_PROGRESS, ProgressSink, ProgressTask
from neuronc.resources import peak_rss_bytes

Layout = list[tuple[str, str, tuple[int, ...]]]

# Bytes read or gathered at a time; a multiple of every element size. Large enough that syscall
# overhead vanishes, small enough to be noise next to the 300 MB budget.
CHUNK_BYTES = 32 * 1024 * 1024

# Threads that gather, cast, hash and write rank data. SHA-256 is the largest CPU cost and each
# rank file is hashed in order, so up to one thread per rank helps on hosts with the cores; the
# rank jobs of one window together hold at most about one window of memory.
WORKERS = min(8, os.cpu_count() or 1)


def shard_name(rank: int, tp: int) -> str:
    """Return the file name of rank ``rank``'s shard."""
    return f"rank-{rank:03d}-of-{tp:03d}.safetensors"


@dataclass(frozen=True)
class ShardInfo(JsonFields):
    """One written rank shard; ``file`` is relative to the split directory."""

    rank: int
    file: str
    bytes: int
    sha256: str | None
    tensors: int


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


def split_checkpoint(
    model_dir: Path,
    out_dir: Path,
    tp: int,
    *,
    dtype: str | None = None,
    progress: ProgressSink = NULL_PROGRESS,
    fsync: bool = True,
    hash: bool = True,
) -> SplitResult:
    """Split a Hugging Face checkpoint into ``tp`` rank shards plus ``index.json`` in ``out_dir``.

    Args:
        model_dir: directory with config.json and the weights (safetensors or .bin, sharded or not).
        out_dir: where to publish; must not exist or be empty. Created atomically.
        tp: tensor-parallel degree.
        dtype: cast floating-point tensors to "fp32", "fp16" or "bf16" while streaming.
        progress: receives one bytes task covering every byte written.
        fsync: make every file durable before publishing (the default). A caller that builds the
            split inside its own staging directory and fsyncs that as a whole may pass False.
        hash: compute every shard's SHA-256 while writing it (the default; ``compile`` records and
            adopts them). With False, ``ShardInfo.sha256`` and index.json's ``sha256`` are None, and
            contiguous parts are copied in the kernel instead of through this process.

    Raises:
        CheckpointError: the checkpoint is missing, broken, or has tensors no rule covers.
        InvalidInputError: bad tp or dtype, an unsupported architecture, or a non-empty out_dir.
        EnvironmentIncompatibleError: numpy (or, for .bin checkpoints, torch) is not installed.
    """
    started = time.perf_counter()
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= MAX_TP:
        raise InvalidInputError(f"tp must be an integer between 1 and {MAX_TP}, got {tp!r}")
    target = dtype_code(dtype)
    try:
        import numpy  # noqa: F401  (gathers and casts need it; say so before any work starts)
    except ImportError as exc:
        raise MISSING_LIBRARY.convert(
            exc, "neuronc split needs numpy", hint="pip install numpy (or 'neuronc[cpu]')"
        ) from None
    refuse_nonempty(out_dir)

    with open_checkpoint(model_dir) as ckpt:
        dims = model_dims(ckpt.config, where=safe_text(model_dir, limit=400))
        plans = plan_partitions(dims, ckpt, tp, root=model_dir)
        stored = {p.name: cast_target(ckpt.tensors[p.name].dtype, target) for p in plans}
        # Widest elements first, then source order: every tensor then starts at a multiple of its
        # element size in the shard (the header is padded to 8), which zero-copy loaders like.
        order = sorted(plans, key=lambda p: -DTYPE_SIZES[stored[p.name]])
        layouts = [[(p.name, stored[p.name], p.rank_shape(r)) for p in order] for r in range(tp)]
        metadata = [{"format": "pt", "neuronc.rank": str(rank), "neuronc.tp": str(tp)} for rank in range(tp)]

        def index_for(shards: list[ShardInfo]) -> dict[str, Any]:
            records = [s.to_json() for s in shards]
            return build_index(ckpt, dims.family, tp, _dtype_label(target), plans, stored, records)

        # Every output byte is known now: the rank files' sizes, and index.json's (hashes are 64 digits).
        planned = [
            ShardInfo(rank, shard_name(rank, tp), size, "0" * 64 if hash else None, len(layouts[rank]))
            for rank, size in enumerate(_rank_file_bytes(layouts, metadata))
        ]
        index_bytes = len(index_text(index_for(planned)).encode("utf-8"))
        needed = on_disk([s.bytes for s in planned] + [index_bytes])
        with Staging(out_dir, needed, what=f"a split into {plural(tp, 'rank')}", durable=fsync) as staging:
            writers: list[ShardWriter] = []
            fanout = _Fanout(min(tp, WORKERS))
            try:
                for rank in range(tp):
                    path = staging.path / shard_name(rank, tp)
                    writers.append(ShardWriter(path, layouts[rank], metadata[rank], durable=fsync, hash=hash))
                total = sum(_data_bytes(layout) for layout in layouts)
                task = progress.task(f"split {model_dir.name} into tp={tp}", total=total, unit="bytes")
                for plan in order:
                    _stream_tensor(ckpt, ckpt.tensors[plan.name], plan, stored[plan.name], writers, fanout, task)
                    for w in writers:
                        w.end_tensor(plan.name)
                written = _finish_all(fanout, writers)
            finally:
                fanout.close()  # every job has ended, even after a failure: nothing writes while Staging cleans up
                for w in writers:
                    w.close()
            shards = [replace(s, bytes=f.bytes, sha256=f.sha256) for s, f in zip(planned, written, strict=True)]
            write_index(staging.path / INDEX_FILE, index_for(shards), durable=fsync)
            staging.publish()
            task.done(plural(len(shards), "shard"))

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


def _rank_file_bytes(layouts: list[Layout], metadata: list[dict[str, str]]) -> list[int]:
    """The size of every rank file (header and data), checking every rank shape on the way.

    Raises CheckpointError for a rank shape the safetensors library would refuse to read (it can
    only happen when the source shape itself is at the edge of what the library accepts).
    """
    sizes = []
    for layout, meta in zip(layouts, metadata, strict=True):
        for name, dtype, shape in layout:
            if (problem := shape_problem(dtype, shape)) is not None:
                rank = meta["neuronc.rank"]
                raise CheckpointError(f"tensor '{safe_text(name)}': rank {rank}'s shape {list(shape)}: {problem}")
        header, _ = build_header(layout, meta)
        sizes.append(len(header) + _data_bytes(layout))
    return sizes


def _finish_all(fanout: _Fanout, writers: list[ShardWriter]) -> list[WrittenFile]:
    """fsync every shard (in parallel: each waits on the disk, not the CPU) and collect sizes and hashes."""
    results: dict[int, WrittenFile] = {}

    def finish(rank: int) -> int:
        results[rank] = writers[rank].finish()
        return 0

    fanout.run([partial(finish, rank) for rank in range(len(writers))])
    return [results[rank] for rank in range(len(writers))]


def _data_bytes(layout: list[tuple[str, str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) * DTYPE_SIZES[dtype] for _, dtype, shape in layout)


def _dtype_label(code: str | None) -> str | None:
    return {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}.get(code) if code else None


class _Fanout:
    """Run one job per rank on a few threads and wait for all of them.

    The jobs (numpy gathers and casts, SHA-256 updates, ``os.write``) release the GIL, so ranks are
    hashed and written in parallel. Each rank has at most one job in flight, and every job finishes
    before the next window is read, so each rank file still grows strictly in order and the shared
    read buffer is never overwritten while in use.
    """

    def __init__(self, workers: int) -> None:
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="neuronc-split") if workers > 1 else None
        )

    def run(self, jobs: list[Callable[[], int]]) -> int:
        if self._pool is None or len(jobs) < 2:
            return sum(job() for job in jobs)
        futures = [self._pool.submit(job) for job in jobs]
        wait(futures)  # all of them, even after a failure: no thread may still write when we clean up
        return sum(f.result() for f in futures)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _stream_tensor(
    ckpt: Checkpoint,
    info: TensorInfo,
    plan: Partition,
    stored: str,
    writers: list[ShardWriter],
    fanout: _Fanout,
    task: ProgressTask,
) -> None:
    """Copy one tensor into every rank file, reading the source once, a bounded window at a time."""
    if info.nbytes == 0:
        return  # every rank's part is empty too (a zero dimension stays zero); nothing to loop over
    source = info.dtype
    located = None if writers[0].hashing or stored != source else ckpt.source_fd(info)
    if located is not None and (plan.dim is None or math.prod(info.shape[: plan.dim]) == 1):
        _copy_tensor(ckpt, info, plan, located, writers, fanout, task)
        return
    if plan.dim is None:  # replicated: read each window once, cast once, write it to every rank
        for start in range(0, info.nbytes, CHUNK_BYTES):
            chunk = cast_bytes(ckpt.read_range(info, start, min(CHUNK_BYTES, info.nbytes - start)), source, stored)
            task.advance(fanout.run([partial(w.write, chunk) for w in writers]))
        return

    dim = plan.dim
    outer = math.prod(info.shape[:dim])
    inner = math.prod(info.shape[dim + 1 :]) * info.itemsize  # bytes per index along dim
    if outer == 1:
        _stream_ranges(ckpt, info, plan, stored, inner, writers, fanout, task)
        return

    import numpy as np

    # Split along a later dimension: view the tensor as [outer, row]; for each block of outer rows,
    # each rank gathers its columns (and zero padding) and appends them.
    row = info.shape[dim] * inner
    rows_per_block = max(1, CHUNK_BYTES // max(row, 1))

    def gather(rank_slice: RankSlice, block: Any) -> Callable[[], int]:
        def job() -> int:
            pieces = [block[:, start * inner : stop * inner] for start, stop in rank_slice.slices]
            if rank_slice.pad:
                pieces.append(np.zeros((block.shape[0], rank_slice.pad * inner), dtype=np.uint8))
            gathered = np.concatenate(pieces, axis=1) if len(pieces) > 1 else np.ascontiguousarray(pieces[0])
            return writers[rank_slice.rank].write(cast_bytes(gathered, source, stored))

        return job

    for first in range(0, outer, rows_per_block):
        count = min(rows_per_block, outer - first)
        block = np.frombuffer(ckpt.read_range(info, first * row, count * row), dtype=np.uint8).reshape(count, row)
        task.advance(fanout.run([gather(rank_slice, block) for rank_slice in plan.ranks]))


def _copy_tensor(
    ckpt: Checkpoint,
    info: TensorInfo,
    plan: Partition,
    located: tuple[int, int],
    writers: list[ShardWriter],
    fanout: _Fanout,
    task: ProgressTask,
) -> None:
    """The kernel-copy path: every rank's part is a few byte ranges of the source file, no cast.

    Each rank's job copies its ranges (ascending, as in ``_stream_ranges``) from the source file to
    its shard with ``copy_file_range``, then appends its zero padding. The source is read by the
    kernel once per rank that holds a range (a replicated tensor ``tp`` times), which costs less
    than one pass through this process.
    """
    fd, base = located
    display = ckpt.display(info)
    if plan.dim is None:
        shares = [([(0, info.nbytes)], 0) for _ in writers]
    else:
        inner = math.prod(info.shape[plan.dim + 1 :]) * info.itemsize
        shares = [([], 0)] * len(writers)
        for r in plan.ranks:
            shares[r.rank] = ([(start * inner, stop * inner) for start, stop in r.slices], r.pad * inner)
        for rank_ranges, _ in shares:
            assert all(a[1] <= b[0] for a, b in pairwise(rank_ranges)), plan.name

    def job(writer: ShardWriter, ranges: list[tuple[int, int]], pad: int) -> int:
        copied = sum(writer.copy_from(fd, base + a, b - a, display=display) for a, b in ranges)
        return copied + (_write_zeros(writer, pad) if pad else 0)

    task.advance(fanout.run([partial(job, writers[rank], *share) for rank, share in enumerate(shares)]))


def _stream_ranges(
    ckpt: Checkpoint,
    info: TensorInfo,
    plan: Partition,
    stored: str,
    inner: int,
    writers: list[ShardWriter],
    fanout: _Fanout,
    task: ProgressTask,
) -> None:
    """A split along the first non-trivial dimension: each rank's share is a few byte ranges of the source.

    The source is swept once, window by window; each rank appends the parts of its ranges that fall
    in the window. That is in order for every rank, because a rank's ranges are ascending and
    disjoint (they are for every rule; ranks may share ranges, as replicated KV heads do).
    """
    source = info.dtype
    ranges = [[(start * inner, stop * inner) for start, stop in r.slices] for r in plan.ranks]
    for rank_ranges in ranges:
        assert all(a[1] <= b[0] for a, b in pairwise(rank_ranges)), plan.name
    for lo, hi in merge_ranges({edge for rank_ranges in ranges for edge in rank_ranges}):
        for w0 in range(lo, hi, CHUNK_BYTES):
            w1 = min(w0 + CHUNK_BYTES, hi)
            window = ckpt.read_range(info, w0, w1 - w0)
            jobs = []
            for rank, rank_ranges in enumerate(ranges):
                parts = [(max(a, w0) - w0, min(b, w1) - w0) for a, b in rank_ranges if a < w1 and b > w0]
                if parts:
                    jobs.append(_segments_job(writers[rank], window, parts, source, stored))
            task.advance(fanout.run(jobs))
    scale = DTYPE_SIZES[stored] / info.itemsize
    pads = [(writers[r.rank], int(r.pad * inner * scale)) for r in plan.ranks if r.pad]
    task.advance(fanout.run([partial(_write_zeros, writer, count) for writer, count in pads]))


def _segments_job(
    writer: ShardWriter, window: Any, parts: list[tuple[int, int]], source: str, stored: str
) -> Callable[[], int]:
    return lambda: sum(writer.write(cast_bytes(window[a:b], source, stored)) for a, b in parts)


def _write_zeros(writer: ShardWriter, count: int) -> int:
    written = 0
    while written < count:
        written += writer.write(bytes(min(count - written, CHUNK_BYTES)))
    return written
