"""Helpers for compile-pipeline tests: a tiny Llama checkpoint written by hand, and profiles for it."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import yaml

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 8, 2, 1, 4, 16, 32

CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "intermediate_size": FFN,
    "num_hidden_layers": 1,
    "vocab_size": VOCAB,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def _tensors() -> dict[str, list[int]]:
    layer = "model.layers.0"
    return {
        "model.embed_tokens.weight": [VOCAB, HIDDEN],
        f"{layer}.self_attn.q_proj.weight": [HEADS * HEAD_DIM, HIDDEN],
        f"{layer}.self_attn.k_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
        f"{layer}.self_attn.v_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
        f"{layer}.self_attn.o_proj.weight": [HIDDEN, HEADS * HEAD_DIM],
        f"{layer}.mlp.gate_proj.weight": [FFN, HIDDEN],
        f"{layer}.mlp.up_proj.weight": [FFN, HIDDEN],
        f"{layer}.mlp.down_proj.weight": [HIDDEN, FFN],
        f"{layer}.input_layernorm.weight": [HIDDEN],
        f"{layer}.post_attention_layernorm.weight": [HIDDEN],
        "model.norm.weight": [HIDDEN],
        "lm_head.weight": [VOCAB, HIDDEN],
    }


def write_tiny_llama(directory: Path, *, seed: int = 0) -> Path:
    """A 1-layer Llama (hidden 8) in safetensors, with config and tokenizer files; ~6 KB."""
    directory.mkdir(parents=True, exist_ok=True)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for index, (name, shape) in enumerate(_tensors().items()):
        count = 1
        for dim in shape:
            count *= dim
        data = struct.pack(f"<{count}f", *(((i * 7 + index * 13 + seed) % 17 - 8) / 16 for i in range(count)))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (directory / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (directory / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}\n')
    (directory / "tokenizer_config.json").write_text('{"model_max_length": 256}\n')
    (directory / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": {}}}\n')
    (directory / "special_tokens_map.json").write_text('{"eos_token": "</s>"}\n')
    (directory / "README.md").write_text("not copied into bundles\n")
    (directory / "pytorch_model.bin.unused").write_text("not copied either\n")
    return directory


def write_profile(
    path: Path,
    *,
    model: str = "model",
    backend: str = "pipeline",
    context_buckets: list[int] | None = None,
    options: dict[str, Any] | None = None,
    matrix: dict[str, list[Any]] | None = None,
    weights: str = "presharded",
    target: str = "cpu",
) -> Path:
    """A profile for the tiny model next to it (``model`` relative to the profile's directory)."""
    data: dict[str, Any] = {
        "name": path.stem,
        "model": {"id": model},
        "backend": backend,
        "target": target,
        "amp": "fp32",
        "sequence": {"max_length": 64, "context_buckets": context_buckets or [16, 32], "token_buckets": [64]},
        "weights": weights,
    }
    if options:
        data["options"] = options
    if matrix:
        data["matrix"] = matrix
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fake_hub_cache(hf_home: Path, repo: str, commit: str, model: Path, *, ref: str = "main") -> Path:
    """Put ``model``'s files in a Hugging Face cache under ``hf_home`` as huggingface_hub lays one out:
    blobs named by hash, a snapshot of symlinks to them, and ``refs/<ref>`` pointing at ``commit``.

    Called again with another commit, it adds that snapshot and moves the ref, as a download after
    the repo's ``main`` moved does (the earlier snapshot stays)."""
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in model.iterdir():
        data = path.read_bytes()
        digest = hashlib.sha256(data) if path.suffix == ".safetensors" else hashlib.sha1(data)
        blob = root / "blobs" / digest.hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.name
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blob, snapshot))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    return root
