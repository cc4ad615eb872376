"""index.json of a split: written by the splitter, read back (untrusted) by ``--check`` and ``open_split``.

The format is documented in docs/split.md. Reading it is defensive: it comes from a directory anyone
may have edited, so it is parsed with bounded size and nesting (``neuronc.jsonfile``), the top level
is type-checked field by field when it is loaded (exit 2 naming the field), and each tensor entry is
checked before it is used (``entry_problem``): the checker then never indexes, loops or allocates
on a claim it has not checked, and a dimension an entry claims never sizes an allocation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from neuronc.checkpoint._safetensors import DTYPE_SIZES, USIZE_MAX, shape_problem
from neuronc.checkpoint._tree import ModelTree, plain_name_problem
from neuronc.checkpoint.partition import MAX_TP, Partition, merge_ranges
from neuronc.checkpoint.reader import Checkpoint
from neuronc.errors import InvalidInputError, safe_text
from neuronc.fsutil import plural, read_bytes_limited
from neuronc.jsonfile import InvalidJsonError, expect_object, expect_type, get_field, get_int, parse_json

INDEX_FILE = "index.json"
INDEX_FORMAT = "neuronc-tp-split"
INDEX_VERSION = 1

# A split's index.json has one line per tensor with every rank's part: a few hundred bytes per tensor
# and rank, so a few MB for the largest supported models at tp 64. This bounds what --check parses.
MAX_INDEX_BYTES = 256 * 1024 * 1024

_SHA256_HEX = frozenset("0123456789abcdef")
_MODEL_KEYS = ("model_type", "num_attention_heads", "num_key_value_heads", "n_head", "vocab_size")


# -- writing ----------------------------------------------------------------------------------------


def build_index(
    ckpt: Checkpoint,
    family: str,
    tp: int,
    dtype_label: str | None,
    plans: list[Partition],
    stored: dict[str, str],
    shards: list[dict[str, Any]],
) -> dict[str, Any]:
    """The index.json document of a finished split."""
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
        "dtype": dtype_label,
        # Only the scalars (config.json is untrusted: a nested object there is not copied along).
        "model": {k: config[k] for k in _MODEL_KEYS if isinstance(config.get(k), str | int | None) and k in config},
        "source": {
            "path": str(ckpt.root.resolve()),
            "format": ckpt.format,
            "files": [{"file": f.file, "bytes": f.bytes, "header_sha256": f.header_sha256} for f in ckpt.files],
        },
        "shards": shards,
        "tensors": tensors,
    }


def index_text(index: dict[str, Any]) -> str:
    """Render index.json: indented, with one line per tensor, so ``grep q_proj index.json`` reads well."""
    head = {k: v for k, v in index.items() if k != "tensors"}
    lines = [f"    {json.dumps(name)}: {json.dumps(entry)}" for name, entry in index["tensors"].items()]
    text = json.dumps(head, indent=2)[: -len("\n}")]
    return text + ',\n  "tensors": {\n' + ",\n".join(lines) + "\n  }\n}\n"


def write_index(path: Path, index: dict[str, Any], *, durable: bool) -> None:
    """Write index.json into the (staging) split directory; OSError (a full disk) propagates."""
    with path.open("w", encoding="utf-8") as f:
        f.write(index_text(index))
        f.flush()
        if durable:
            os.fsync(f.fileno())


# -- reading ----------------------------------------------------------------------------------------


def load_index(split_dir: Path) -> dict[str, Any]:
    """Read and check the top level of a split's index.json: format, tp, shards, tensors, source.

    Raises:
        InvalidInputError: no index.json, one neuronc did not write, or a field of the wrong type
            or out of range (InvalidJsonError, exit 2, naming the file and the field).
    """
    tree = ModelTree(split_dir)
    shown = tree.display(INDEX_FILE)
    if not tree.has(INDEX_FILE):
        raise InvalidInputError(f"{safe_text(split_dir)}: no {INDEX_FILE}; not a split written by neuronc split")
    try:
        raw = read_bytes_limited(tree.path(INDEX_FILE), MAX_INDEX_BYTES, what=INDEX_FILE)
    except OSError as exc:
        raise InvalidInputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    data = expect_object(parse_json(raw, where=shown, max_bytes=MAX_INDEX_BYTES, unique_keys=True), shown)
    if data.get("format") != INDEX_FORMAT:
        raise InvalidInputError(f"{shown}: not a neuronc split index (format is not {INDEX_FORMAT!r})")
    if data.get("format_version") != INDEX_VERSION:
        version = safe_text(json.dumps(data.get("format_version")), limit=40)
        raise InvalidInputError(f"{shown}: format_version {version} is not {INDEX_VERSION}", hint="upgrade neuronc")
    tp = get_int(data, "tp", shown, minimum=1, maximum=MAX_TP)
    shards = get_field(data, "shards", list, shown)
    if len(shards) != tp:
        raise InvalidInputError(f"{shown}: 'tp' and 'shards' disagree (tp {tp}, {plural(len(shards), 'shard')})")
    for rank, shard in enumerate(shards):
        _check_shard(shard, rank, f"{shown}: shards[{rank}]")
    get_field(data, "tensors", dict, shown)
    source = get_field(data, "source", dict, shown, required=False, default={})
    get_field(source, "path", str, f"{shown}: source", required=False)
    return data


def _check_shard(shard: object, rank: int, where: str) -> None:
    shard = expect_object(shard, where)
    if get_int(shard, "rank", where, minimum=0, maximum=MAX_TP) != rank:
        raise InvalidJsonError(f"{where}: field 'rank' must be {rank}, its position in the list")
    file = get_field(shard, "file", str, where)
    if (problem := plain_name_problem(file)) is not None:
        raise InvalidJsonError(f"{where}: shard file {safe_text(file)!r} {problem}")
    get_int(shard, "bytes", where, minimum=0, maximum=USIZE_MAX)
    sha256 = get_field(shard, "sha256", (str, type(None)), where, required=False)
    if sha256 is not None and (len(sha256) != 64 or not set(sha256) <= _SHA256_HEX):
        raise InvalidJsonError(f"{where}: field 'sha256' is not 64 lowercase hex digits")


def entry_problem(entry: object, tp: int) -> str | None:
    """What is wrong with one tensor's entry (None when it can be used as the docs describe it).

    Checks types and ranges field by field, that every rank's shape is the tensor's shape with only
    the split dimension changed, that each rank's slices are ascending, disjoint, inside the
    dimension and add up (with the padding) to its shape, and that together they cover the
    dimension. Works on intervals: nothing here is sized by a dimension.
    """
    try:
        return _entry_problem(entry, tp)
    except InvalidJsonError as exc:
        return f"index.json entry is malformed: {exc.message}"


def _entry_problem(entry: object, tp: int) -> str | None:
    entry = expect_object(entry, "entry")
    for key in ("source_dtype", "dtype"):
        code = get_field(entry, key, str, "entry")
        if code not in DTYPE_SIZES:
            return f"index.json entry is malformed: {key} {safe_text(code, limit=40)!r} is not a safetensors dtype"
    shape = _shape(get_field(entry, "shape", list, "entry"), "entry: field 'shape'")
    dim = get_field(entry, "dim", (int, type(None)), "entry")
    if dim is not None and not 0 <= dim < len(shape):
        return f"index.json entry is malformed: dim {dim} is not a dimension of shape {shape}"
    if problem := shape_problem(entry["dtype"], shape):
        return f"index.json entry is malformed: shape {shape} is refused by the safetensors library: {problem}"
    ranks = get_field(entry, "ranks", list, "entry")
    if len(ranks) != tp:
        return f"index.json lists {len(ranks)} ranks for tp={tp}"
    covered: list[tuple[int, int]] = []
    for position, rank_entry in enumerate(ranks):
        where = f"entry: ranks[{position}]"
        rank_entry = expect_object(rank_entry, where)
        if get_int(rank_entry, "rank", where, minimum=0, maximum=MAX_TP) != position:
            return f"index.json lists ranks {[r.get('rank') if isinstance(r, dict) else None for r in ranks]}"
        rank_shape = _shape(get_field(rank_entry, "shape", list, where), f"{where}: field 'shape'")
        others = [d for i, d in enumerate(rank_shape) if i != dim]
        if len(rank_shape) != len(shape) or others != [d for i, d in enumerate(shape) if i != dim]:
            return f"rank {position}: shape {rank_shape} does not match {shape} outside dim {dim}"
        if dim is None:
            continue
        problem = _slices_problem(rank_entry, position, shape[dim], rank_shape[dim], dim, covered)
        if problem is not None:
            return problem
    if dim is not None:
        return _coverage_problem(covered, shape[dim], dim)
    return None


def _shape(value: list[Any], where: str) -> list[int]:
    for d in value:
        expect_type(d, int, where)
        if not 0 <= d <= USIZE_MAX:
            raise InvalidJsonError(f"{where}: dimension {d} is outside 0..2**64-1")
    return value


def _slices_problem(
    rank_entry: dict[str, Any], rank: int, length: int, held: int, dim: int, covered: list[tuple[int, int]]
) -> str | None:
    where = f"entry: ranks[{rank}]"
    slices = get_field(rank_entry, "slices", list, where)
    pad = get_int(rank_entry, "pad", where, minimum=0, maximum=USIZE_MAX)
    assert pad is not None
    total, previous = pad, 0
    for pair in slices:
        expect_type(pair, list, f"{where}: field 'slices'")
        if len(pair) != 2:
            raise InvalidJsonError(f"{where}: field 'slices': each slice must be [start, stop]")
        start, stop = (expect_type(v, int, f"{where}: field 'slices'") for v in pair)
        if not 0 <= start <= stop <= length:  # empty slices only where the dimension is 0
            return f"rank {rank}: slice [{start}, {stop}) is outside dim {dim} of size {length}"
        if start < previous:
            return f"rank {rank}: slice [{start}, {stop}) is not after the one before it"
        previous = stop
        total += stop - start
        covered.append((start, stop))
    if total != held:
        return f"rank {rank}: slices and padding add up to {total}, not {held}"
    if held > length:
        return f"rank {rank}: holds {held} of dim {dim}, more than its {length}"
    return None


def _coverage_problem(covered: list[tuple[int, int]], length: int, dim: int) -> str | None:
    """The first index of [0, length) that no slice covers, from the sorted intervals."""
    merged = merge_ranges(covered)
    reached = merged[0][1] if merged and merged[0][0] == 0 else 0
    if reached < length:
        return f"index {reached} of dim {dim} is in no rank's slices"
    return None
