#!/usr/bin/env python3
"""Train neuronc's demo model: a tiny Llama that writes English, learnt from a public-domain book.

    python scripts/train_demo_model.py [--out DIR] [--seed N] [--steps N]

(``python -m neuronc.demo`` runs this script.) Writes into DIR (default: the package data directory
neuronc/data/profiles/models/tiny-llama) the files of a Hugging Face Llama checkpoint:

- ``tokenizer.json`` (+ ``tokenizer_config.json``, ``special_tokens_map.json``): a byte-pair
  encoding of VOCAB_SIZE tokens over printable ASCII, trained offline by the ``tokenizers`` library
  on the corpus, loadable with ``AutoTokenizer.from_pretrained``;
- ``config.json`` / ``generation_config.json``: a 2-layer Llama (see CONFIG), fixed JSON;
- ``model.safetensors``: float32 weights trained for STEPS steps of AdamW on the corpus, windows of
  128 tokens each starting with ``<s>``, as ``neuronc run`` prompts start.

The corpus is scripts/demo-corpus/alice29.txt (Lewis Carroll, Alice's Adventures in Wonderland,
1865; public domain; where it comes from is in the README beside it).

Deterministic: the same seed gives the same bytes. The tokenizer's training is deterministic; the
weights' training runs on one thread and uses no kernel that torch picks by the CPU's vector ISA:
ATen's portable kernels (ATEN_CPU_CAPABILITY=default, not its AVX2/AVX-512 builds), MKL's conditional
numerical reproducibility in its compatible mode (MKL_CBWR=COMPATIBLE: one SSE2 code path whatever
MKL_ENABLE_INSTRUCTIONS allows), and no oneDNN at all (``torch.backends.mkldnn.enabled = False``;
oneDNN chooses AVX-512 or AMX kernels up to ONEDNN_MAX_CPU_ISA), with float32 matmuls at "highest"
precision (no bf16/tf32 shortcuts). The script re-executes itself with those variables set when they
are not (they must be set before torch is imported). tests/test_demo_model.py retrains with the ISA
knobs forced as an AVX2 machine and as an AVX-512/AMX machine would set them, and expects the shipped
bytes both times. The files depend on the versions of torch (setup.sh pins 2.13.0) and tokenizers
that ran it, and on an x86-64 CPU (MKL); ``--check`` says whether this machine reproduces them.

No result may depend on the CPU's maker, and pinning the ISA cannot promise that: an instruction whose
low bits the vendor defines (``rsqrtps``, ``rcpps``: the manuals bound only their error) returns other
bits on Intel than on AMD whatever the settings. torch routes some float ops through MKL's vector math
library (ATen/cpu/vml.h: exp, log, sqrt, sin, cos, tanh ...), whose ``vsSqrt`` starts from ``rsqrtps``
and is not correctly rounded; MKL_CBWR pins BLAS, not those kernels. So the training calls none of them:
AdamW runs fused (``fused=True``: ATen's FusedAdamKernel.cpp, whose square root is Vectorized::sqrt,
the IEEE one) instead of the single-tensor path's ``exp_avg_sq.sqrt()`` (torch.sqrt, MKL's vsSqrt), and
the rotary tables are computed in float64 by Python's math module and rounded once to float32, each
checked to lie far enough from a rounding boundary that the float32 value is the correctly rounded one.
tests/test_demo_model.py compares the optimizer's step with a reference built only from correctly
rounded operations, bit for bit, and checks that a training step calls no op of vml.h's MKL list.

Training uses a small Llama written here in plain torch rather than transformers' LlamaForCausalLM:
transformers' weight initialisation and module internals differ between the 4.57 and 5.x series
neuronc supports, and the bytes must not. The checkpoint uses transformers' key names and layout;
after training, the script loads it with transformers and checks that transformers computes the
same logits (transformers' modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with rotate_half,
LlamaAttention with grouped key/value heads, LlamaMLP).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import string
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "scripts" / "demo-corpus" / "alice29.txt"
DEFAULT_OUT = ROOT / "neuronc" / "data" / "profiles" / "models" / "tiny-llama"

SEED = 20240917
STEPS = 260
BATCH, WINDOW = 32, 128
LEARNING_RATE, WARMUP, WEIGHT_DECAY, DROPOUT = 2e-3, 30, 0.01, 0.1

VOCAB_SIZE = 1024
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
BOS_ID, EOS_ID = 1, 2
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 80, 2, 4, 2, 20, 192

# Variables that make the weights' training reproducible (see the module docstring).
PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "PYTHONHASHSEED": "0",
}

CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "head_dim": HEAD_DIM,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": INTERMEDIATE,
    "max_position_embeddings": 256,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": HEADS,
    "num_hidden_layers": LAYERS,
    "num_key_value_heads": KV_HEADS,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": VOCAB_SIZE,
}
GENERATION_CONFIG: dict[str, object] = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}
TOKENIZER_CONFIG: dict[str, object] = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "model_max_length": 256,
    "model_input_names": ["input_ids", "attention_mask"],
    "clean_up_tokenization_spaces": False,
}
SPECIAL_TOKENS_MAP: dict[str, object] = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


# ------------------------------------------------------------------------------------------------
# Corpus and tokenizer (no torch)
# ------------------------------------------------------------------------------------------------


def corpus_paragraphs(path: Path = CORPUS) -> list[str]:
    """The book as paragraphs: line ends normalised, hard-wrapped lines joined, spaces collapsed."""
    text = path.read_text(encoding="ascii").replace("\r\n", "\n")
    text = "".join(c for c in text if c == "\n" or c.isprintable())  # drops the trailing DOS end-of-file
    paragraphs = (re.sub(r"\s+", " ", block).strip() for block in re.split(r"\n\s*\n", text))
    return [p for p in paragraphs if p]


def corpus_words(path: Path = CORPUS) -> set[str]:
    """Every word of the book, lower-cased (what the tests call English from the corpus)."""
    return {w.lower() for p in corpus_paragraphs(path) for w in re.findall(r"[A-Za-z]+", p)}


def train_tokenizer(paragraphs: Sequence[str]) -> Any:
    """A BPE over printable ASCII (others map to <unk>), Metaspace ("▁" for spaces) as in
    SentencePiece-style Llama tokenizers, trained by the tokenizers library."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    alphabet = [*sorted(set(string.printable) - set(string.whitespace)), "\u2581"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(paragraphs, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    vocab = tokenizer.get_vocab()
    if [vocab[t] for t in SPECIAL_TOKENS] != [0, BOS_ID, EOS_ID]:
        msg = f"special token ids moved: {[vocab[t] for t in SPECIAL_TOKENS]}"
        raise RuntimeError(msg)
    return tokenizer


def json_bytes(data: object) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def text_files(tokenizer: Any) -> dict[str, bytes]:
    """Every file but the weights."""
    return {
        "config.json": json_bytes(CONFIG),
        "generation_config.json": json_bytes(GENERATION_CONFIG),
        "tokenizer_config.json": json_bytes(TOKENIZER_CONFIG),
        "special_tokens_map.json": json_bytes(SPECIAL_TOKENS_MAP),
        "tokenizer.json": (tokenizer.to_str(pretty=False) + "\n").encode("utf-8"),
    }


# ------------------------------------------------------------------------------------------------
# The model and its training (torch)
# ------------------------------------------------------------------------------------------------


def init_weights(generator: Any) -> dict[str, Any]:
    """Llama weights by checkpoint key: normal(0, 0.02) matrices (in key order), unit norms."""
    import torch

    shapes: dict[str, list[int]] = {"model.embed_tokens.weight": [VOCAB_SIZE, HIDDEN]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [HIDDEN]
        shapes[p + "self_attn.q_proj.weight"] = [HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.k_proj.weight"] = [KV_HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.v_proj.weight"] = [KV_HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.o_proj.weight"] = [HIDDEN, HEADS * HEAD_DIM]
        shapes[p + "post_attention_layernorm.weight"] = [HIDDEN]
        shapes[p + "mlp.gate_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[p + "mlp.up_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[p + "mlp.down_proj.weight"] = [HIDDEN, INTERMEDIATE]
    shapes["model.norm.weight"] = [HIDDEN]
    shapes["lm_head.weight"] = [VOCAB_SIZE, HIDDEN]
    weights = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            value = torch.ones(shape)
        else:
            value = torch.randn(shape, generator=generator) * float(str(CONFIG["initializer_range"]))
        weights[name] = value.requires_grad_(True)
    return weights


def correctly_rounded_float32(values: Sequence[float]) -> Any:
    """float64 values, each within a few ulps of the exact result, as the correctly rounded float32 tensor.

    One rounding from float64 is exact unless a value lies so near the midpoint between two float32
    neighbours that its float64 error could carry it across; such a value is refused (none is, for the
    demo's tables), so the result holds on every CPU whatever libm or MKL would have returned.
    """
    import numpy as np
    import torch

    wide = np.asarray(values, dtype=np.float64)
    narrow = wide.astype(np.float32)
    away = np.where(wide > narrow, np.inf, -np.inf).astype(np.float32)
    midpoint = (narrow.astype(np.float64) + np.nextafter(narrow, away).astype(np.float64)) / 2
    if not bool((np.abs(wide - midpoint) > 8 * np.spacing(np.abs(wide))).all()):
        msg = "a rotary table value lies within float64 error of a float32 rounding boundary"
        raise RuntimeError(msg)
    return torch.from_numpy(narrow)


def rotary_tables() -> tuple[Any, Any]:
    """cos and sin [WINDOW, HEAD_DIM] of transformers' LlamaRotaryEmbedding (default rope), correctly rounded.

    transformers computes them with float32 torch ops; torch's cos and sin on CPU are MKL's vsCos and
    vsSin (ATen/cpu/vml.h), so here the angles are float32 as there and their cos and sin are Python's
    (float64), rounded once.
    """
    import torch

    theta = float(str(CONFIG["rope_theta"]))
    inv_freq = correctly_rounded_float32([1.0 / theta ** (i / HEAD_DIM) for i in range(0, HEAD_DIM, 2)])
    freqs = torch.outer(torch.arange(WINDOW).float(), inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1).flatten().tolist()
    cos = correctly_rounded_float32([math.cos(a) for a in angles]).view(WINDOW, HEAD_DIM)
    sin = correctly_rounded_float32([math.sin(a) for a in angles]).view(WINDOW, HEAD_DIM)
    return cos, sin


def make_optimizer(parameters: Sequence[Any]) -> Any:
    """AdamW as the training runs it: fused (its square root is IEEE's; see the module docstring)."""
    import torch

    return torch.optim.AdamW(
        list(parameters), lr=LEARNING_RATE, betas=(0.9, 0.95), weight_decay=WEIGHT_DECAY, fused=True
    )


class TinyLlama:
    """Llama's forward pass over a dict of weights (the semantics of transformers' modeling_llama)."""

    def __init__(self, weights: dict[str, Any]) -> None:
        import torch

        self.w = weights
        self.cos, self.sin = rotary_tables()
        self.mask = torch.full((WINDOW, WINDOW), float("-inf")).triu(1)

    def __call__(self, ids: Any, dropout: Any = None) -> Any:
        """Logits [batch, length, vocab]; ``dropout`` (a seeded generator) drops residual updates."""
        import torch
        import torch.nn.functional as F

        def rms_norm(x: Any, weight: Any) -> Any:
            eps = float(str(CONFIG["rms_norm_eps"]))
            return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

        def rotate_half(x: Any) -> Any:
            first, second = x.chunk(2, dim=-1)
            return torch.cat((-second, first), dim=-1)

        def drop(x: Any) -> Any:
            if dropout is None:
                return x
            keep = (torch.rand(x.shape, generator=dropout) >= DROPOUT).to(x.dtype)
            return x * keep / (1.0 - DROPOUT)

        w = self.w
        batch, length = ids.shape
        cos, sin, mask = self.cos[:length], self.sin[:length], self.mask[:length, :length]
        h = w["model.embed_tokens.weight"][ids]
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            x = rms_norm(h, w[p + "input_layernorm.weight"])
            q = (x @ w[p + "self_attn.q_proj.weight"].T).view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
            k = (x @ w[p + "self_attn.k_proj.weight"].T).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
            v = (x @ w[p + "self_attn.v_proj.weight"].T).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(HEAD_DIM) + mask
            attn = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, length, HEADS * HEAD_DIM)
            h = h + drop(attn @ w[p + "self_attn.o_proj.weight"].T)
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"])
            gate = F.silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)
            h = h + drop(gate @ w[p + "mlp.down_proj.weight"].T)
        return rms_norm(h, w["model.norm.weight"]) @ w["lm_head.weight"].T


def train(weights: dict[str, Any], tokens: Any, steps: int, generator: Any) -> list[float]:
    """AdamW on random windows of the book (each prefixed with <s>); returns the loss per step."""
    import torch
    import torch.nn.functional as F

    model = TinyLlama(weights)
    optimizer = make_optimizer(list(weights.values()))
    bos = torch.full((BATCH, 1), BOS_ID, dtype=torch.long)
    losses = []
    started = time.monotonic()
    for step in range(steps):
        # Linear warm-up, then cosine decay to a tenth of the peak.
        decay = 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = LEARNING_RATE * min(1.0, (step + 1) / WARMUP) * decay
        starts = torch.randint(0, len(tokens) - WINDOW, (BATCH,), generator=generator)
        targets = torch.stack([tokens[s : s + WINDOW] for s in starts.tolist()])
        inputs = torch.cat((bos, targets[:, :-1]), dim=1)
        logits = model(inputs, dropout=generator)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.3f}  {time.monotonic() - started:6.1f}s", flush=True)
    return losses


def safetensors_bytes(weights: dict[str, Any]) -> bytes:
    from safetensors.torch import save

    tensors = {name: value.detach().contiguous() for name, value in sorted(weights.items())}
    data: bytes = save(tensors, metadata={"format": "pt"})
    return data


def check_with_transformers(out_dir: Path, weights: dict[str, Any], tokens: Any) -> float:
    """Max |logit difference| between this script's model and transformers' on one window."""
    import torch
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    ids = torch.cat((torch.tensor([BOS_ID]), tokens[: WINDOW - 1]))[None]
    with torch.inference_mode():
        ours = TinyLlama({k: v.detach() for k, v in weights.items()})(ids)
        theirs = reference(ids).logits
    return float((ours - theirs).abs().max())


# ------------------------------------------------------------------------------------------------


def build(out_dir: Path, *, seed: int = SEED, steps: int = STEPS, corpus: Path = CORPUS) -> dict[str, str]:
    """Train and write every file into ``out_dir``; return {file name: sha256}."""
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    # No kernel chosen by the CPU's ISA (see the module docstring): oneDNN off, exact fp32 matmuls.
    torch.backends.mkldnn.enabled = False
    torch.set_float32_matmul_precision("highest")
    paragraphs = corpus_paragraphs(corpus)
    tokenizer = train_tokenizer(paragraphs)
    files = text_files(tokenizer)
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(paragraphs, add_special_tokens=False):
        ids.extend(encoding.ids)
    tokens = torch.tensor(ids, dtype=torch.long)
    print(f"corpus: {len(paragraphs)} paragraphs, {len(ids)} tokens; seed {seed}, {steps} steps", flush=True)
    generator = torch.Generator().manual_seed(seed)
    weights = init_weights(generator)
    if steps:
        train(weights, tokens, steps, generator)
    files["model.safetensors"] = safetensors_bytes(weights)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
    try:
        diff = check_with_transformers(out_dir, weights, tokens)
    except ImportError:
        print("transformers is not installed: skipped the check against its LlamaForCausalLM")
    else:
        print(f"transformers' LlamaForCausalLM on the written checkpoint: max |logit difference| {diff:.2e}")
        if diff > 1e-4:
            msg = f"transformers computes different logits from the trained model (max difference {diff})"
            raise RuntimeError(msg)
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def compare(expected: Path, actual: Path) -> list[str]:
    """Files of ``expected`` missing from ``actual`` or different there."""
    return [
        path.name
        for path in sorted(expected.iterdir())
        if not (actual / path.name).is_file() or (actual / path.name).read_bytes() != path.read_bytes()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed of initialisation, batches, dropout ({SEED})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS}; 0: untrained)")
    parser.add_argument(
        "--check", action="store_true", help="train into a temporary directory and compare with --out instead"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if any(os.environ.get(k) != v for k, v in PINNED_ENV.items()):
        # Re-execute with the reproducibility settings: they only work if set before torch loads.
        env = {**os.environ, **PINNED_ENV}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    if not args.check:
        for name, digest in build(args.out, seed=args.seed, steps=args.steps).items():
            print(f"{digest[:16]}  {args.out / name}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), seed=args.seed, steps=args.steps)
        differing = compare(Path(tmp), args.out)
    if differing:
        print(f"{args.out}: out of date: {', '.join(differing)}", file=sys.stderr)
        return 1
    print(f"{args.out}: up to date", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
