"""Tensor-parallel partition rules, in the Megatron convention NxD Inference uses.

* q/k/v and gate/up (and MoE w1/w3, OPT fc1, GPT-NeoX dense_h_to_4h) are column-parallel: the
  output dimension is split, by whole heads where the rows are heads.
* o/down (and w2, fc2, dense_4h_to_h) are row-parallel: the input dimension is split; their
  biases are replicated, because they are added once after the all-reduce.
* Embeddings and lm_head are vocab-parallel: rows split evenly after padding the vocabulary up to
  a multiple of tp with zero rows at the end; the padding is recorded.
* Norms, position embeddings, MoE routers and buffers are replicated.
* With grouped-query attention and fewer KV heads than tp, each KV head is replicated onto the
  tp / kv_heads ranks whose query heads use it.
* Fused projections are split per head, not per row: GPT-NeoX ``query_key_value`` is laid out head
  by head (q, k, v of head 0, then head 1 ...), so whole head groups move together; GPT-2
  ``c_attn`` (a Conv1D, stored transposed as [in, out]) and Phi-3 ``qkv_proj`` are [q | k | v]
  blocks, each split by heads; Phi-3 ``gate_up_proj`` is [gate | up], each split evenly.
* Fused MoE experts (transformers 5's Mixtral layout, one tensor per layer with the expert first)
  are split inside each expert like the per-expert tensors: ``gate_up_proj`` [E, gate | up, hidden]
  along dim 1, [gate | up] each evenly; ``down_proj`` [E, hidden, intermediate] along dim 2.

A partition is described as data (``Partition``): for every rank, the ordered source ranges along
one dimension that it holds, plus zero padding at the end. Splitting copies those ranges; reversing
the split puts them back. Nothing here reads tensor bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from neuronc.checkpoint.reader import TensorInfo
from neuronc.errors import CheckpointError, InvalidInputError, safe_text
from neuronc.fsutil import plural
from neuronc.jsonfile import InvalidJsonError, get_field, get_int

Strategy = Literal["replicate", "column", "row", "vocab"]
PartKind = Literal["even", "kv", "vocab"]

# More attention heads than any model has; a config.json claiming more is refused before planning.
MAX_HEADS = 65536
# The largest tensor-parallel degree accepted: a split holds one open rank file per rank, and tp must
# divide the attention heads, which no supported model has more than a few hundred of.
MAX_TP = 1024

SUPPORTED_FAMILIES = ("gpt2", "gpt_neox", "llama", "mistral", "mixtral", "opt", "phi3", "qwen2", "qwen3")


@dataclass(frozen=True)
class Part:
    """A contiguous block of the split dimension, made of ``units`` equal units (heads or rows)."""

    name: str
    units: int
    kind: PartKind = "even"


@dataclass(frozen=True)
class RankSlice:
    """What one rank holds of a split tensor: source ranges [start, stop) in order, then ``pad`` zeros."""

    rank: int
    slices: tuple[tuple[int, int], ...]
    pad: int = 0

    @property
    def length(self) -> int:
        return sum(stop - start for start, stop in self.slices) + self.pad


@dataclass(frozen=True)
class Partition:
    """How one tensor is divided across tp ranks."""

    name: str
    strategy: Strategy
    dim: int | None
    shape: tuple[int, ...]
    tp: int
    unit: int = 1
    parts: tuple[tuple[str, int, int, PartKind], ...] = ()
    ranks: tuple[RankSlice, ...] = field(default=())
    replicas: int = 1
    padding: int = 0

    def rank_shape(self, rank: int) -> tuple[int, ...]:
        """Return the shape of this tensor in rank ``rank``'s shard."""
        if self.dim is None:
            return self.shape
        shape = list(self.shape)
        shape[self.dim] = self.ranks[rank].length
        return tuple(shape)

    def to_json(self) -> dict[str, Any]:
        """Return the index.json form (without dtype and source fields, which the splitter adds)."""
        data: dict[str, Any] = {
            "strategy": self.strategy,
            "dim": self.dim,
            "shape": list(self.shape),
            "unit": self.unit,
            "replicas": self.replicas,
            "padding": self.padding,
        }
        if self.parts:
            data["parts"] = [{"name": n, "start": s, "stop": e, "kind": k} for n, s, e, k in self.parts]
        data["ranks"] = [
            {
                "rank": r,
                "shape": list(self.rank_shape(r)),
                "slices": None if self.dim is None else [list(s) for s in self.ranks[r].slices],
                "pad": 0 if self.dim is None else self.ranks[r].pad,
            }
            for r in range(self.tp)
        ]
        return data


@dataclass(frozen=True)
class ModelDims:
    """The config values the rules need."""

    family: str
    num_heads: int
    num_kv_heads: int


# -- rules ------------------------------------------------------------------------------------------

PartsFn = Callable[[ModelDims, int], list[Part]]


def _rows(dims: ModelDims, length: int) -> list[Part]:
    return [Part("rows", length)]


def _q_heads(dims: ModelDims, length: int) -> list[Part]:
    return [Part("heads", dims.num_heads)]


def _kv_heads(dims: ModelDims, length: int) -> list[Part]:
    return [Part("kv_heads", dims.num_kv_heads, "kv")]


def _fused_qkv(dims: ModelDims, length: int) -> list[Part]:
    return [Part("q", dims.num_heads), Part("k", dims.num_kv_heads, "kv"), Part("v", dims.num_kv_heads, "kv")]


def _gate_up(dims: ModelDims, length: int) -> list[Part]:
    half = length // 2
    return [Part("gate", half), Part("up", half)] if 2 * half == length else [Part("gate_up", -1)]


def _vocab(dims: ModelDims, length: int) -> list[Part]:
    return [Part("vocab", length, "vocab")]


@dataclass(frozen=True)
class Rule:
    """A name pattern (matched at the end of the tensor name, on a dot boundary) and what to do."""

    pattern: str
    strategy: Strategy
    dim: int | None = None
    parts: PartsFn | None = None

    def matches(self, name: str) -> bool:
        return re.search(rf"(?:^|\.){self.pattern}$", name) is not None


def _replicate(pattern: str) -> Rule:
    return Rule(pattern, "replicate")


_VOCAB = [Rule(r"lm_head\.weight", "vocab", 0, _vocab)]

_LLAMA_ATTENTION = [
    Rule(r"embed_tokens\.weight", "vocab", 0, _vocab),
    Rule(r"self_attn\.q_proj\.(?:weight|bias)", "column", 0, _q_heads),
    Rule(r"self_attn\.[kv]_proj\.(?:weight|bias)", "column", 0, _kv_heads),
    Rule(r"self_attn\.o_proj\.weight", "row", 1, _q_heads),
    _replicate(r"self_attn\.o_proj\.bias"),
    _replicate(r"(?:input_layernorm|post_attention_layernorm|norm|q_norm|k_norm)\.weight"),
    _replicate(r"rotary_emb\.inv_freq"),
]
_LLAMA_MLP = [
    Rule(r"mlp\.(?:gate_proj|up_proj)\.weight", "column", 0, _rows),
    Rule(r"mlp\.down_proj\.weight", "row", 1, _rows),
]
_MIXTRAL_MOE = [
    _replicate(r"block_sparse_moe\.gate\.weight"),
    Rule(r"block_sparse_moe\.experts\.\d+\.w[13]\.weight", "column", 0, _rows),
    Rule(r"block_sparse_moe\.experts\.\d+\.w2\.weight", "row", 1, _rows),
    # transformers 5 keeps the experts fused in memory, and save_pretrained(save_original_format=False)
    # (or a save while offloaded) writes them so: mlp.experts.gate_up_proj [experts, gate | up, hidden]
    # and mlp.experts.down_proj [experts, hidden, intermediate], router mlp.gate. Dimension 0 is the
    # expert, so splitting dim 1 (gate and up each evenly) or dim 2 cuts every expert the way the
    # per-expert w1/w3 and w2 rules above do.
    _replicate(r"mlp\.gate\.weight"),
    Rule(r"mlp\.experts\.gate_up_proj", "column", 1, _gate_up),
    Rule(r"mlp\.experts\.down_proj", "row", 2, _rows),
]
_PHI3 = [
    Rule(r"embed_tokens\.weight", "vocab", 0, _vocab),
    Rule(r"self_attn\.qkv_proj\.weight", "column", 0, _fused_qkv),
    Rule(r"self_attn\.o_proj\.weight", "row", 1, _q_heads),
    Rule(r"mlp\.gate_up_proj\.weight", "column", 0, _gate_up),
    Rule(r"mlp\.down_proj\.weight", "row", 1, _rows),
    _replicate(r"(?:input_layernorm|post_attention_layernorm|norm)\.weight"),
    _replicate(r"rotary_emb\.inv_freq"),
]
_OPT = [
    Rule(r"embed_tokens\.weight", "vocab", 0, _vocab),
    _replicate(r"embed_positions\.weight"),
    _replicate(r"project_(?:in|out)\.weight"),
    Rule(r"self_attn\.[qkv]_proj\.(?:weight|bias)", "column", 0, _q_heads),
    Rule(r"self_attn\.out_proj\.weight", "row", 1, _q_heads),
    _replicate(r"self_attn\.out_proj\.bias"),
    Rule(r"fc1\.(?:weight|bias)", "column", 0, _rows),
    Rule(r"fc2\.weight", "row", 1, _rows),
    _replicate(r"fc2\.bias"),
    _replicate(r"(?:self_attn_layer_norm|final_layer_norm|layer_norm)\.(?:weight|bias)"),
]
# GPT-2 uses Conv1D, whose weight is stored [in, out]: column-parallel splits dim 1, row-parallel dim 0.
_GPT2 = [
    Rule(r"wte\.weight", "vocab", 0, _vocab),
    _replicate(r"wpe\.weight"),
    Rule(r"attn\.c_attn\.weight", "column", 1, _fused_qkv),
    Rule(r"attn\.c_attn\.bias", "column", 0, _fused_qkv),
    Rule(r"attn\.c_proj\.weight", "row", 0, _q_heads),
    _replicate(r"attn\.c_proj\.bias"),
    Rule(r"mlp\.c_fc\.weight", "column", 1, _rows),
    Rule(r"mlp\.c_fc\.bias", "column", 0, _rows),
    Rule(r"mlp\.c_proj\.weight", "row", 0, _rows),
    _replicate(r"mlp\.c_proj\.bias"),
    _replicate(r"ln_[12f]\.(?:weight|bias)"),
    _replicate(r"attn\.(?:bias|masked_bias)"),
]
# GPT-NeoX's query_key_value is head-major (q, k, v of head 0, then head 1 ...): one unit per head.
_GPT_NEOX = [
    Rule(r"embed_in\.weight", "vocab", 0, _vocab),
    Rule(r"embed_out\.weight", "vocab", 0, _vocab),
    Rule(r"attention\.query_key_value\.(?:weight|bias)", "column", 0, _q_heads),
    Rule(r"attention\.dense\.weight", "row", 1, _q_heads),
    _replicate(r"attention\.dense\.bias"),
    Rule(r"mlp\.dense_h_to_4h\.(?:weight|bias)", "column", 0, _rows),
    Rule(r"mlp\.dense_4h_to_h\.weight", "row", 1, _rows),
    _replicate(r"mlp\.dense_4h_to_h\.bias"),
    _replicate(r"(?:input_layernorm|post_attention_layernorm|final_layer_norm)\.(?:weight|bias)"),
    _replicate(r"attention\.(?:rotary_emb\.inv_freq|bias|masked_bias)"),
]

RULES: dict[str, list[Rule]] = {
    "llama": _LLAMA_ATTENTION + _LLAMA_MLP + _VOCAB,
    "mistral": _LLAMA_ATTENTION + _LLAMA_MLP + _VOCAB,
    "qwen2": _LLAMA_ATTENTION + _LLAMA_MLP + _VOCAB,
    "qwen3": _LLAMA_ATTENTION + _LLAMA_MLP + _VOCAB,
    "mixtral": _LLAMA_ATTENTION + _MIXTRAL_MOE + _VOCAB,
    "phi3": _PHI3 + _VOCAB,
    "opt": _OPT + _VOCAB,
    "gpt2": _GPT2 + _VOCAB,
    "gpt_neox": _GPT_NEOX + _VOCAB,
}


# -- planning -------------------------------------------------------------------------------------


def model_dims(config: dict[str, Any] | None, *, where: str) -> ModelDims:
    """Read the family and head counts from a Hugging Face config.json, field by field.

    Raises:
        CheckpointError: config.json is missing, or its head counts are missing or not positive
            integers (at most ``MAX_HEADS``).
        InvalidInputError: the architecture is not one neuronc can split.
    """
    if config is None:
        raise CheckpointError(f"{where}: no config.json; neuronc needs it to know the architecture")
    file = f"{where}/config.json"
    try:
        family = get_field(config, "model_type", str, file, required=False)
        if family not in RULES:
            shown = repr(safe_text(family)) if family is not None else "None (config.json has no model_type)"
            msg = f"{where}: cannot split architecture {shown}"
            raise InvalidInputError(msg, hint=f"supported families: {', '.join(SUPPORTED_FAMILIES)}")
        heads_field = "n_head" if family == "gpt2" else "num_attention_heads"
        heads = get_int(config, heads_field, file, minimum=1, maximum=MAX_HEADS)
        kv = heads
        if config.get("num_key_value_heads") is not None:  # absent or null: as many as the query heads
            kv = get_int(config, "num_key_value_heads", file, minimum=1, maximum=MAX_HEADS)
    except InvalidJsonError as exc:
        raise CheckpointError(exc.message) from None
    assert heads is not None and kv is not None
    if heads % kv:
        msg = f"{file}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}"
        raise CheckpointError(msg)
    return ModelDims(family=family, num_heads=heads, num_kv_heads=kv)


def plan_partitions(
    dims: ModelDims, tensors: Iterable[TensorInfo], tp: int, *, root: Path | None = None
) -> list[Partition]:
    """Return one Partition per tensor, in the order given.

    ``root`` (the checkpoint directory) only makes error messages name the file a tensor is in.

    Raises:
        InvalidInputError: tp does not divide the heads or rows a rule splits.
        CheckpointError: a tensor matches no rule, or its shape disagrees with config.json.
    """
    if not 1 <= tp <= MAX_TP:
        raise InvalidInputError(f"tp must be between 1 and {MAX_TP}, got {tp}")
    h, k = dims.num_heads, dims.num_kv_heads
    if h % tp:
        msg = f"tp={tp} does not divide the {h} attention heads of this {dims.family} model"
        raise InvalidInputError(msg, hint=_tp_hint(dims))
    if k % tp and tp % k:
        msg = f"tp={tp} and the {k} KV heads of this {dims.family} model: neither divides the other"
        raise InvalidInputError(msg, hint=_tp_hint(dims))
    rules = RULES[dims.family]
    plans: list[Partition] = []
    unknown: list[str] = []
    unknown_file = ""
    for info in tensors:
        rule = next((r for r in rules if r.matches(info.name)), None)
        if rule is None:
            unknown.append(info.name)
            unknown_file = unknown_file or _where(root, info)
            continue
        try:
            plans.append(_plan_one(rule, info, dims, tp))
        except CheckpointError as exc:
            raise CheckpointError(f"{_where(root, info)}{exc.message}", hint=exc.hint) from None
    if unknown:
        verb = "matches" if len(unknown) == 1 else "match"
        msg = f"{unknown_file}{plural(len(unknown), 'tensor')} {verb} no {dims.family} partition rule"
        msg += f", e.g. '{safe_text(unknown[0])}'"
        details = [safe_text(n) for n in unknown[:20]]
        raise CheckpointError(msg, details=details, hint="is config.json's model_type right?")
    return plans


def _where(root: Path | None, info: TensorInfo) -> str:
    return f"{safe_text(root / info.file if root is not None else info.file, limit=400)}: "


def _plan_one(rule: Rule, info: TensorInfo, dims: ModelDims, tp: int) -> Partition:
    shape, shown = info.shape, safe_text(info.name)
    if rule.strategy == "replicate" or rule.dim is None or rule.parts is None:
        return Partition(info.name, "replicate", None, shape, tp, replicas=tp)
    dim = rule.dim
    if len(shape) <= dim:
        msg = f"tensor '{shown}' has shape {list(shape)}; a {rule.strategy}-parallel split needs dim {dim}"
        raise CheckpointError(msg)
    length = shape[dim]
    parts = rule.parts(dims, length)
    total_units = sum(p.units for p in parts)
    if total_units <= 0 or length % total_units:
        msg = (
            f"tensor '{shown}' has {length} along dim {dim}, not a multiple of "
            f"{'+'.join(f'{p.units} {p.name}' for p in parts)} from config.json"
        )
        raise CheckpointError(msg)
    unit = length // total_units

    per_rank: list[list[tuple[int, int]]] = [[] for _ in range(tp)]
    pads = [0] * tp
    replicas = 1
    padding = 0
    part_records: list[tuple[str, int, int, PartKind]] = []
    base = 0
    for part in parts:
        part_records.append((part.name, base, base + part.units * unit, part.kind))
        if part.kind == "vocab":
            per = -(-part.units // tp)
            padding = per * tp - part.units
            for r in range(tp):
                start, stop = min(r * per, part.units), min((r + 1) * per, part.units)
                if stop > start:
                    per_rank[r].append((base + start * unit, base + stop * unit))
                pads[r] = per - (stop - start)
        elif part.kind == "kv" and part.units < tp:
            if tp % part.units:
                msg = f"tp={tp} is not a multiple of the {part.units} KV heads of '{shown}'"
                raise InvalidInputError(msg, hint=_tp_hint(dims))
            replicas = tp // part.units
            for r in range(tp):
                head = r // replicas
                per_rank[r].append((base + head * unit, base + (head + 1) * unit))
        else:
            if part.units % tp:
                what = "heads" if part.name != "rows" else "rows"
                msg = f"tp={tp} does not divide the {part.units} {what} of '{shown}' ({part.name})"
                raise InvalidInputError(msg, hint=_tp_hint(dims))
            per = part.units // tp
            for r in range(tp):
                per_rank[r].append((base + r * per * unit, base + (r + 1) * per * unit))
        base += part.units * unit

    ranks = tuple(RankSlice(r, _merge(per_rank[r]), pads[r] * unit) for r in range(tp))
    return Partition(
        name=info.name,
        strategy=rule.strategy,
        dim=dim,
        shape=shape,
        tp=tp,
        unit=unit,
        parts=tuple(part_records) if len(parts) > 1 else (),
        ranks=ranks,
        replicas=replicas,
        padding=padding * unit,
    )


def _merge(slices: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Join adjacent ranges, so a plain column split is one range per rank."""
    merged: list[tuple[int, int]] = []
    for start, stop in slices:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return tuple(merged)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint ranges covering the same indices as ``ranges`` (overlapping or touching ones joined)."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _tp_hint(dims: ModelDims) -> str:
    h, k = dims.num_heads, dims.num_kv_heads
    ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if h % t == 0 and (k % t == 0 or t % k == 0)]
    return f"with {h} attention heads and {k} KV heads, tp can be one of {ok} (if it also divides the MLP)"
