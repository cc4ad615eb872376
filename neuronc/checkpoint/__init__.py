"""Hugging Face checkpoints: streaming reads, tensor-parallel partition rules, streaming split.

The public API, used by ``neuronc split`` and by the compile pipeline::

    from neuronc.checkpoint import open_checkpoint, split_checkpoint, check_split

    with open_checkpoint(model_dir) as ckpt:          # lists tensors, reads one at a time
        for info in ckpt:
            tensor = ckpt.read_tensor(info.name)
    result = split_checkpoint(model_dir, bundle / "weights", tp=8, dtype="bf16")
    report = check_split(bundle / "weights")          # report.ok, report.mismatches

Nothing here imports torch or numpy at module level; see docs/split.md for the on-disk format.
"""

from __future__ import annotations

from neuronc.checkpoint._index import INDEX_FILE
from neuronc.checkpoint._safetensors import SafetensorsHeader
from neuronc.checkpoint._safetensors import read_header as read_safetensors_header
from neuronc.checkpoint.check import CheckReport, Mismatch, SplitIndex, check_split, open_split
from neuronc.checkpoint.partition import SUPPORTED_FAMILIES, Partition, RankSlice, model_dims, plan_partitions
from neuronc.checkpoint.reader import Checkpoint, SourceFile, TensorInfo, open_checkpoint, open_safetensors_file
from neuronc.checkpoint.split import ShardInfo, SplitResult, shard_name, split_checkpoint

__all__ = [
    "INDEX_FILE",
    "SUPPORTED_FAMILIES",
    "CheckReport",
    "Checkpoint",
    "Mismatch",
    "Partition",
    "RankSlice",
    "SafetensorsHeader",
    "ShardInfo",
    "SourceFile",
    "SplitIndex",
    "SplitResult",
    "TensorInfo",
    "check_split",
    "model_dims",
    "open_checkpoint",
    "open_safetensors_file",
    "open_split",
    "plan_partitions",
    "read_safetensors_header",
    "shard_name",
    "split_checkpoint",
]
