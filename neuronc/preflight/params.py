"""Parameter counts and attention shapes from a model's config.json, as transformers instantiates them.

Llama-like families (llama, mistral, qwen2, qwen3, gemma, gemma2, granite, phi3), mixtral, opt, gpt2
and gpt_neox are counted exactly (tests compare with transformers on the meta device); any other
family gives "unknown" rather than a failure. Pure arithmetic: no torch, no file access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp32": 4, "fp16": 2, "bf16": 2, "float64": 8}

LLAMA_LIKE = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "granite",
        "phi3",
    }
)
FAMILIES = (*sorted(LLAMA_LIKE), "mixtral", "opt", "gpt2", "gpt_neox")


@dataclass(frozen=True)
class ModelDims:
    """What the estimate needs from a model's config.json."""

    model_type: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    largest_tensor_params: int
    source_dtype_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "params": self.params,
            "layers": self.layers,
            "hidden_size": self.hidden,
            "attention_heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "largest_tensor_params": self.largest_tensor_params,
            "checkpoint_dtype_bytes": self.source_dtype_bytes,
        }


# ------------------------------------------------------------------------------------------------
# Parameter counts from config.json
# ------------------------------------------------------------------------------------------------


def _int(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _required(config: Mapping[str, Any], *fields: str | tuple[str, ...]) -> tuple[int, ...] | None:
    """The positive ints ``fields`` name (a tuple lists a field's aliases); None if any is missing."""
    values = [_int(config, *((field,) if isinstance(field, str) else field)) for field in fields]
    return None if None in values else tuple(v for v in values if v is not None)


def _dtype_bytes(config: Mapping[str, Any]) -> int:
    """Bytes per value of the checkpoint as stored (HF's default, when unset, is float32)."""
    name = config.get("torch_dtype") or config.get("dtype")
    return DTYPE_BYTES.get(name, 4) if isinstance(name, str) else 4


def model_dims(config: Mapping[str, Any]) -> tuple[ModelDims | None, str | None]:
    """Count parameters and read the attention shape; (None, why) for families we cannot count."""
    text = config.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    model_type = cfg.get("model_type") or config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return None, "config.json has no model_type"
    if model_type in LLAMA_LIKE or model_type == "mixtral":
        counted = _llama_like(cfg, model_type)
    elif model_type == "opt":
        counted = _opt(cfg)
    elif model_type == "gpt2":
        counted = _gpt2(cfg)
    elif model_type == "gpt_neox":
        counted = _gpt_neox(cfg)
    else:
        return None, f"parameter count for model_type '{model_type}' is not implemented (known: {', '.join(FAMILIES)})"
    if counted is None:
        return None, f"config.json for '{model_type}' lacks a field the estimate needs"
    params, layers, hidden, heads, kv_heads, head_dim, vocab, largest = counted
    return (
        ModelDims(model_type, params, layers, hidden, heads, kv_heads, head_dim, vocab, largest, _dtype_bytes(cfg)),
        None,
    )


_Counted = tuple[int, int, int, int, int, int, int, int]
_SHAPE = ("hidden_size", "num_hidden_layers", "num_attention_heads")


def _llama_like(cfg: Mapping[str, Any], model_type: str) -> _Counted | None:
    required = _required(cfg, *_SHAPE, "intermediate_size", "vocab_size")
    if required is None:
        return None
    hidden, layers, heads, inter, vocab = required
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim") or hidden // heads
    q = hidden * heads * head_dim
    kv = 2 * hidden * kv_heads * head_dim
    o = heads * head_dim * hidden
    bias = cfg.get("attention_bias") is True or model_type == "qwen2"
    attn = q + kv + o + ((heads + 2 * kv_heads) * head_dim if bias else 0)
    experts = _int(cfg, "num_local_experts") if model_type == "mixtral" else None
    mlp = 3 * hidden * inter * (experts or 1) + (hidden * experts if experts else 0)
    # gemma2 adds pre/post feed-forward norms; qwen3 normalises q and k per head.
    norms = (4 if model_type == "gemma2" else 2) * hidden + (2 * head_dim if model_type == "qwen3" else 0)
    embed = vocab * hidden
    tied = cfg.get("tie_word_embeddings", model_type in {"gemma", "gemma2"}) is True
    params = embed + layers * (attn + mlp + norms) + hidden + (0 if tied else embed)
    largest = max(embed, hidden * inter, hidden * heads * head_dim)
    return params, layers, hidden, heads, kv_heads, head_dim, vocab, largest


def _opt(cfg: Mapping[str, Any]) -> _Counted | None:
    required = _required(cfg, *_SHAPE, "ffn_dim", "vocab_size", "max_position_embeddings")
    if required is None:
        return None
    hidden, layers, heads, ffn, vocab, positions = required
    proj = _int(cfg, "word_embed_proj_dim") or hidden
    embed = vocab * proj + (positions + 2) * hidden  # OPT's learned positions are offset by 2
    projections = 2 * proj * hidden if proj != hidden else 0
    layer = 4 * (hidden * hidden + hidden) + (hidden * ffn + ffn) + (ffn * hidden + hidden) + 4 * hidden
    final_norm = 2 * hidden if cfg.get("do_layer_norm_before", True) is not False else 0
    params = embed + projections + layers * layer + final_norm  # lm_head is tied to the embedding
    largest = max(vocab * proj, hidden * ffn, (positions + 2) * hidden, proj * hidden)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest


def _gpt2(cfg: Mapping[str, Any]) -> _Counted | None:
    required = _required(
        cfg,
        ("n_embd", "hidden_size"),
        ("n_layer", "num_hidden_layers"),
        ("n_head", "num_attention_heads"),
        "vocab_size",
        ("n_positions", "max_position_embeddings"),
    )
    if required is None:
        return None
    hidden, layers, heads, vocab, positions = required
    inner = _int(cfg, "n_inner") or 4 * hidden
    layer = (
        2 * hidden
        + (hidden * 3 * hidden + 3 * hidden)
        + (hidden * hidden + hidden)
        + 2 * hidden
        + (hidden * inner + inner)
        + (inner * hidden + hidden)
    )
    params = vocab * hidden + positions * hidden + layers * layer + 2 * hidden  # tied lm_head
    largest = max(vocab * hidden, 3 * hidden * hidden, hidden * inner, positions * hidden)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest


def _gpt_neox(cfg: Mapping[str, Any]) -> _Counted | None:
    required = _required(cfg, *_SHAPE, "intermediate_size", "vocab_size")
    if required is None:
        return None
    hidden, layers, heads, inter, vocab = required
    layer = (
        4 * hidden  # two layer norms
        + (hidden * 3 * hidden + 3 * hidden)
        + (hidden * hidden + hidden)
        + (hidden * inter + inter)
        + (inter * hidden + hidden)
    )
    tied = cfg.get("tie_word_embeddings", False) is True
    params = vocab * hidden + layers * layer + 2 * hidden + (0 if tied else vocab * hidden)
    largest = max(vocab * hidden, 3 * hidden * hidden, hidden * inter)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest
