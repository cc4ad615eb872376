"""Semantics, not just bytes: a tensor-parallel forward pass computed from the rank shards matches Hugging Face.

Each rank computes only its column- and row-parallel parts from its own shard (loaded with the safetensors
library, not with neuronc); row-parallel partial outputs are summed as an all-reduce would; vocab-parallel
embeddings mask out-of-range ids and sum; vocab-parallel logits are gathered and the padding dropped. The
result must equal the unsharded model's logits within 1e-4 in fp32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import fuse_mixtral_experts

from neuronc.checkpoint import split_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional

VOCAB = 61
SEQ = 12
TOL = 1e-4


class Shards:
    """The rank shards and index.json of one split, read with the safetensors library."""

    def __init__(self, split_dir: Path) -> None:
        from safetensors.torch import load_file

        self.index = json.loads((split_dir / "index.json").read_text())
        self.ranks = [load_file(split_dir / s["file"]) for s in self.index["shards"]]
        self.tp = len(self.ranks)

    def get(self, rank: int, name: str) -> Any:
        return self.ranks[rank][name].float()

    def embed(self, name: str, ids: Any) -> Any:
        """Vocab-parallel embedding: rank r owns rows [r * per, (r + 1) * per) of the padded vocabulary."""
        total = 0
        for r in range(self.tp):
            weight = self.get(r, name)
            per = weight.shape[0]
            slices = self.index["tensors"][name]["ranks"][r]["slices"]
            assert not slices or slices[0][0] == r * per  # the Megatron layout the masking below relies on
            local = ids - r * per
            outside = (local < 0) | (local >= per)
            part = weight[local.clamp(0, per - 1)]
            part[outside] = 0.0
            total = total + part
        return total

    def logits(self, name: str, hidden: Any) -> Any:
        """Vocab-parallel lm_head: gather every rank's logits, drop the padded vocabulary."""
        return torch.cat([hidden @ self.get(r, name).T for r in range(self.tp)], dim=-1)[:, :VOCAB]


def _attend(q: Any, k: Any, v: Any) -> Any:
    """Causal attention for one rank: q [T, Hq, d], k/v [T, Hk, d] with Hk dividing Hq."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1), float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(SEQ, -1)


def _rope(x: Any, rotary: int, base: float) -> Any:
    """Rotary embedding on the first ``rotary`` dims of x [T, H, d] (rotate-half form, as HF)."""
    inv = 1.0 / (base ** (torch.arange(0, rotary, 2, dtype=torch.int64).float() / rotary))
    freqs = torch.arange(SEQ).float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    xr, rest = x[..., :rotary], x[..., rotary:]
    half = rotary // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    return torch.cat([xr * cos + rotated * sin, rest], dim=-1)


def _rms(x: Any, w: Any, eps: float) -> Any:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _ln(s: Shards, prefix: str, x: Any, eps: float, rank: int = 0) -> Any:
    return F.layer_norm(x, x.shape[-1:], s.get(rank, f"{prefix}.weight"), s.get(rank, f"{prefix}.bias"), eps)


def _rope_theta(cfg: Any) -> float:
    # transformers 4.57 has config.rope_theta; 5.x moved it into config.rope_parameters.
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta") or getattr(cfg, "rope_theta", None) or 10000.0)


def _rotary_pct(cfg: Any) -> float:
    # GPT-NeoX: rotary_pct in 4.57, rope_parameters["partial_rotary_factor"] in 5.x.
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("partial_rotary_factor") or cfg.rotary_pct)


def _moe(s: Shards, cfg: Any, p: str, x: Any) -> Any:
    """Mixtral's sparse MoE from fused expert shards: the router is replicated; every rank holds a
    column slice of each expert's gate and up and the matching row slice of its down (all-reduced)."""
    logits = x @ s.get(0, f"{p}.mlp.gate.weight").T
    weights, chosen = logits.softmax(-1).topk(cfg.num_experts_per_tok, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(cfg.num_local_experts):
        expert = 0
        for r in range(s.tp):
            gate, up = (x @ s.get(r, f"{p}.mlp.experts.gate_up_proj")[e].T).chunk(2, dim=-1)
            expert = expert + (F.silu(gate) * up) @ s.get(r, f"{p}.mlp.experts.down_proj")[e].T
        share = (weights * (chosen == e)).sum(-1, keepdim=True)  # 0 for tokens not routed to e
        out = out + share * expert
    return out


# -- per-family forward passes ---------------------------------------------------------------------


def _llama_like(s: Shards, cfg: Any, ids: Any, *, fused: bool, moe: bool = False) -> Any:
    """Llama, Phi-3 (fused qkv_proj / gate_up_proj) and Mixtral (fused experts) decoders from rank shards."""
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // heads
    eps, base = cfg.rms_norm_eps, _rope_theta(cfg)
    h = s.embed("model.embed_tokens.weight", ids)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}"
        attn = 0
        for r in range(s.tp):
            x = _rms(h, s.get(r, f"{p}.input_layernorm.weight"), eps)
            hr, kr = heads // s.tp, max(kv // s.tp, 1)
            if fused:
                q, k, v = (x @ s.get(r, f"{p}.self_attn.qkv_proj.weight").T).split([hr * hd, kr * hd, kr * hd], -1)
            else:
                q, k, v = (x @ s.get(r, f"{p}.self_attn.{n}_proj.weight").T for n in "qkv")
            q, k, v = q.view(SEQ, -1, hd), k.view(SEQ, -1, hd), v.view(SEQ, -1, hd)
            assert (q.shape[1], k.shape[1]) == (hr, kr)
            out = _attend(_rope(q, hd, base), _rope(k, hd, base), v)
            attn = attn + out @ s.get(r, f"{p}.self_attn.o_proj.weight").T  # row-parallel: all-reduce
        h = h + attn
        if moe:
            h = h + _moe(s, cfg, p, _rms(h, s.get(0, f"{p}.post_attention_layernorm.weight"), eps))
            continue
        mlp = 0
        for r in range(s.tp):
            x = _rms(h, s.get(r, f"{p}.post_attention_layernorm.weight"), eps)
            if fused:
                gate, up = (x @ s.get(r, f"{p}.mlp.gate_up_proj.weight").T).chunk(2, dim=-1)
            else:
                gate, up = x @ s.get(r, f"{p}.mlp.gate_proj.weight").T, x @ s.get(r, f"{p}.mlp.up_proj.weight").T
            mlp = mlp + (F.silu(gate) * up) @ s.get(r, f"{p}.mlp.down_proj.weight").T
        h = h + mlp
    h = _rms(h, s.get(0, "model.norm.weight"), eps)
    return s.logits("lm_head.weight", h)


def _opt(s: Shards, cfg: Any, ids: Any) -> Any:
    hd = cfg.hidden_size // cfg.num_attention_heads
    d = "model.decoder"
    h = s.embed(f"{d}.embed_tokens.weight", ids) + s.get(0, f"{d}.embed_positions.weight")[torch.arange(SEQ) + 2]
    for i in range(cfg.num_hidden_layers):
        p = f"{d}.layers.{i}"
        attn = s.get(0, f"{p}.self_attn.out_proj.bias")  # row-parallel bias: added once, after the all-reduce
        for r in range(s.tp):
            x = _ln(s, f"{p}.self_attn_layer_norm", h, 1e-5, r)
            q, k, v = (
                (x @ s.get(r, f"{p}.self_attn.{n}_proj.weight").T + s.get(r, f"{p}.self_attn.{n}_proj.bias")).view(
                    SEQ, -1, hd
                )
                for n in "qkv"
            )
            attn = attn + _attend(q, k, v) @ s.get(r, f"{p}.self_attn.out_proj.weight").T
        h = h + attn
        mlp = s.get(0, f"{p}.fc2.bias")
        for r in range(s.tp):
            x = _ln(s, f"{p}.final_layer_norm", h, 1e-5, r)
            inner = F.relu(x @ s.get(r, f"{p}.fc1.weight").T + s.get(r, f"{p}.fc1.bias"))
            mlp = mlp + inner @ s.get(r, f"{p}.fc2.weight").T
        h = h + mlp
    h = _ln(s, f"{d}.final_layer_norm", h, 1e-5)
    return s.logits(f"{d}.embed_tokens.weight", h)  # lm_head is tied to the embedding


def _gpt_neox(s: Shards, cfg: Any, ids: Any) -> Any:
    hd = cfg.hidden_size // cfg.num_attention_heads
    rotary = int(hd * _rotary_pct(cfg))
    eps = cfg.layer_norm_eps
    h = s.embed("gpt_neox.embed_in.weight", ids)
    for i in range(cfg.num_hidden_layers):
        p = f"gpt_neox.layers.{i}"
        attn = s.get(0, f"{p}.attention.dense.bias")
        mlp = s.get(0, f"{p}.mlp.dense_4h_to_h.bias")
        for r in range(s.tp):
            x = _ln(s, f"{p}.input_layernorm", h, eps, r)
            qkv = x @ s.get(r, f"{p}.attention.query_key_value.weight").T + s.get(
                r, f"{p}.attention.query_key_value.bias"
            )
            q, k, v = qkv.view(SEQ, -1, 3 * hd).chunk(3, dim=-1)  # head-major fused layout
            out = _attend(_rope(q, rotary, _rope_theta(cfg)), _rope(k, rotary, _rope_theta(cfg)), v)
            attn = attn + out @ s.get(r, f"{p}.attention.dense.weight").T
            y = _ln(s, f"{p}.post_attention_layernorm", h, eps, r)
            inner = F.gelu(y @ s.get(r, f"{p}.mlp.dense_h_to_4h.weight").T + s.get(r, f"{p}.mlp.dense_h_to_4h.bias"))
            mlp = mlp + inner @ s.get(r, f"{p}.mlp.dense_4h_to_h.weight").T
        h = h + attn + mlp  # parallel residual
    h = _ln(s, "gpt_neox.final_layer_norm", h, eps)
    return s.logits("embed_out.weight", h)


def _gpt2(s: Shards, cfg: Any, ids: Any) -> Any:
    hd = cfg.n_embd // cfg.n_head
    eps = cfg.layer_norm_epsilon
    h = s.embed("transformer.wte.weight", ids) + s.get(0, "transformer.wpe.weight")[:SEQ]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}"
        attn = s.get(0, f"{p}.attn.c_proj.bias")
        for r in range(s.tp):
            x = _ln(s, f"{p}.ln_1", h, eps, r)
            # Conv1D: y = x @ W + b with W stored [in, out]; this rank's columns are [q_r | k_r | v_r].
            qkv = x @ s.get(r, f"{p}.attn.c_attn.weight") + s.get(r, f"{p}.attn.c_attn.bias")
            q, k, v = (t.reshape(SEQ, -1, hd) for t in qkv.chunk(3, dim=-1))
            attn = attn + _attend(q, k, v) @ s.get(r, f"{p}.attn.c_proj.weight")
        h = h + attn
        mlp = s.get(0, f"{p}.mlp.c_proj.bias")
        for r in range(s.tp):
            x = _ln(s, f"{p}.ln_2", h, eps, r)
            inner = F.gelu(x @ s.get(r, f"{p}.mlp.c_fc.weight") + s.get(r, f"{p}.mlp.c_fc.bias"), approximate="tanh")
            mlp = mlp + inner @ s.get(r, f"{p}.mlp.c_proj.weight")
        h = h + mlp
    h = _ln(s, "transformer.ln_f", h, eps)
    return s.logits("transformer.wte.weight", h)


# -- the cases -------------------------------------------------------------------------------------

_SMALL = {"num_hidden_layers": 2, "vocab_size": VOCAB, "max_position_embeddings": 32}


def _case(name: str) -> tuple[Any, Any]:
    t = transformers
    if name == "llama":
        cfg = t.LlamaConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=8, num_key_value_heads=2, **_SMALL
        )
        return cfg, lambda s, ids: _llama_like(s, cfg, ids, fused=False)
    if name == "phi3":
        cfg = t.Phi3Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=8, num_key_value_heads=2, pad_token_id=0, **_SMALL
        )
        return cfg, lambda s, ids: _llama_like(s, cfg, ids, fused=True)
    if name == "mixtral":
        cfg = t.MixtralConfig(
            hidden_size=64,
            intermediate_size=96,
            num_attention_heads=8,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            **_SMALL,
        )
        return cfg, lambda s, ids: _llama_like(s, cfg, ids, fused=False, moe=True)
    if name == "opt":
        cfg = t.OPTConfig(hidden_size=64, ffn_dim=96, num_attention_heads=8, word_embed_proj_dim=64, **_SMALL)
        return cfg, lambda s, ids: _opt(s, cfg, ids)
    if name == "gpt_neox":
        cfg = t.GPTNeoXConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=8, tie_word_embeddings=False, **_SMALL
        )
        return cfg, lambda s, ids: _gpt_neox(s, cfg, ids)
    cfg = t.GPT2Config(n_embd=64, n_layer=2, n_head=8, n_positions=32, vocab_size=VOCAB)
    return cfg, lambda s, ids: _gpt2(s, cfg, ids)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    """name -> (checkpoint dir, HF logits for the test ids, forward-from-shards function)."""
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (SEQ,))
    ids[:3] = torch.tensor([VOCAB - 1, VOCAB - 2, 0])  # ids on the last (padded) vocabulary shard too
    root = tmp_path_factory.mktemp("tp-forward")
    result = {}
    for name in ("llama", "phi3", "mixtral", "opt", "gpt_neox", "gpt2"):
        cfg, forward = _case(name)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():
            # Scale weights up a little so that a misplaced slice moves the logits by far more than 1e-4.
            for param in model.parameters():
                param.mul_(3.0)
            logits = model(ids[None]).logits[0]
        model.save_pretrained(root / name)
        if name == "mixtral":  # the experts in transformers 5's fused layout
            fuse_mixtral_experts(root / name, root / "mixtral-fused")
            name = "mixtral-fused"
        result[name] = (root / name, (ids, logits), forward)
    return result


@pytest.mark.parametrize(
    ("name", "tp"),
    [
        ("llama", 2),  # 2 KV heads, tp 2: one KV head per rank
        ("llama", 4),  # GQA with fewer KV heads than tp: each KV head on 2 ranks
        ("llama", 8),  # each KV head on 4 ranks, one query head per rank
        ("phi3", 4),
        ("mixtral-fused", 2),  # fused experts: each rank holds a slice of every expert
        ("mixtral-fused", 4),
        ("opt", 4),
        ("opt", 8),
        ("gpt_neox", 4),
        ("gpt_neox", 8),
        ("gpt2", 4),
    ],
)
def test_tp_forward_from_shards_matches_hf_logits(
    built: dict[str, tuple[Path, Any, Any]], name: str, tp: int, tmp_path: Path
) -> None:
    path, (ids, expected), forward = built[name]
    split_checkpoint(path, tmp_path / "w", tp)
    shards = Shards(tmp_path / "w")
    with torch.no_grad():
        logits = forward(shards, ids)
    assert logits.shape == expected.shape
    assert expected.abs().max() > 0.05  # the comparison is not between two near-zero tensors
    diff = (logits - expected).abs().max().item()
    assert diff < TOL, f"{name} tp={tp}: max |diff| = {diff}"


def test_a_wrong_split_is_caught_by_the_forward_check(built: dict[str, tuple[Path, Any, Any]], tmp_path: Path) -> None:
    """The semantic test has teeth: swapping two ranks' query heads moves the logits well past the tolerance."""
    from safetensors.torch import load_file, save_file

    path, (ids, expected), forward = built["llama"]
    split_checkpoint(path, tmp_path / "w", 4)
    a, b = tmp_path / "w" / "rank-000-of-004.safetensors", tmp_path / "w" / "rank-001-of-004.safetensors"
    sa, sb = load_file(a), load_file(b)
    name = "model.layers.0.self_attn.q_proj.weight"
    sa[name], sb[name] = sb[name].clone(), sa[name].clone()
    save_file(sa, a)
    save_file(sb, b)
    with torch.no_grad():
        logits = forward(Shards(tmp_path / "w"), ids)
    assert (logits - expected).abs().max().item() > 100 * TOL
