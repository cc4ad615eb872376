"""Checkpoint layouts the splitter tests need, from either transformers series, and tiny hand-written ones.

The hand-written ones (``tiny_llama``, ``write_safetensors``, ``edit_header``...) let the hostile-input
tests control every byte of a safetensors file.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronc.hfcompat import transformers_major

# A one-layer Llama small enough to write by hand: 4 heads, 2 KV heads (tp 2 splits it).
CONFIG = {
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 10,
}
SHAPES = {
    "model.embed_tokens.weight": (10, 16),
    "model.layers.0.self_attn.k_proj.weight": (8, 16),
    "model.layers.0.self_attn.v_proj.weight": (8, 16),
    "model.layers.0.self_attn.q_proj.weight": (16, 16),
    "model.layers.0.self_attn.o_proj.weight": (16, 16),
    "model.layers.0.mlp.gate_proj.weight": (32, 16),
    "model.layers.0.mlp.up_proj.weight": (32, 16),
    "model.layers.0.mlp.down_proj.weight": (16, 32),
    "model.layers.0.input_layernorm.weight": (16,),
    "model.layers.0.post_attention_layernorm.weight": (16,),
    "model.norm.weight": (16,),
    "lm_head.weight": (10, 16),
}
REPO_ROOT = Path(__file__).resolve().parent.parent
ST = "model.safetensors"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX = "model.safetensors.index.json"


def llama_tensors(scale: int = 1) -> dict[str, Any]:
    """The tiny Llama's tensors as float32 numpy arrays (seeded: the same every time).

    ``scale`` multiplies every dimension but the vocabulary's (the partition rules still hold: heads
    and rows stay multiples of 4 and 2): 16 makes a 2.3 MB checkpoint for full-disk tests.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    scaled = {
        name: tuple(d if (i == 0 and d == CONFIG["vocab_size"]) else d * scale for i, d in enumerate(shape))
        for name, shape in SHAPES.items()
    }
    return {name: rng.standard_normal(shape).astype("<f4") for name, shape in scaled.items()}


def write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    """A safetensors file written by hand (float32 tensors back to back, in order), so tests control the layout."""
    header: dict[str, Any] = {}
    offset = 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(a.tobytes() for a in tensors.values()))


def split_file(path: Path) -> tuple[dict[str, Any], bytes]:
    """A safetensors file's parsed header and its data section."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def edit_header(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Change a safetensors file's header in place (``edit`` mutates the parsed header); the data stays."""
    header, data = split_file(path)
    edit(header)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def raw_header(path: Path, raw: bytes) -> None:
    """Replace a safetensors file's header with ``raw`` bytes; the data stays."""
    _, data = split_file(path)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def tiny_llama(model: Path, scale: int = 1) -> None:
    """config.json and one model.safetensors (``scale``: see ``llama_tensors``)."""
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(model / ST, llama_tensors(scale))


def tiny_llama_sharded(model: Path) -> None:
    """config.json, two shards and an index, as save_pretrained writes them."""
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    tensors = list(llama_tensors().items())
    weight_map = {}
    for file, part in zip(SHARDS, (tensors[:6], tensors[6:]), strict=True):
        write_safetensors(model / file, dict(part))
        weight_map.update(dict.fromkeys((name for name, _ in part), file))
    (model / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def save_pytorch_bin(model: Any, directory: Path, max_shard_bytes: int | None = None) -> None:
    """Save ``model`` as ``pytorch_model.bin`` (or shards plus ``pytorch_model.bin.index.json``).

    transformers 4.57 writes this itself (``safe_serialization=False``); 5.x writes safetensors only,
    so there the same layout is written here: torch.save of the state dict, shards filled in order.
    """
    import torch

    if transformers_major() == 4:
        kwargs: dict[str, Any] = {"safe_serialization": False}
        if max_shard_bytes is not None:
            kwargs["max_shard_size"] = max_shard_bytes
        model.save_pretrained(directory, **kwargs)
        return
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(directory)
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in model.state_dict().items():
        nbytes = tensor.numel() * tensor.element_size()
        if max_shard_bytes is not None and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor.detach().contiguous().clone()
        size += nbytes
    if len(shards) == 1:
        torch.save(shards[0], directory / "pytorch_model.bin")
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        file = f"pytorch_model-{i:05d}-of-{len(shards):05d}.bin"
        torch.save(shard, directory / file)
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(t.numel() * t.element_size() for shard in shards for t in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def saved_tensor_bytes(directory: Path) -> dict[str, bytes]:
    """Every tensor of a safetensors checkpoint as raw bytes, read with the safetensors library.

    The names are those in the files: transformers 5 renames some tensors in memory (fused MoE
    experts, GPT-NeoX's lm_head) and converts them back when saving.
    """
    import torch
    from safetensors.torch import load_file

    result: dict[str, bytes] = {}
    for path in sorted(directory.glob("*.safetensors")):
        for name, tensor in load_file(path).items():
            result[name] = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return result


def fuse_mixtral_experts(src: Path, dst: Path) -> None:
    """Rewrite a per-expert Mixtral checkpoint in transformers 5's fused layout.

    ``block_sparse_moe.experts.E.w1/w3/w2`` become ``mlp.experts.gate_up_proj`` [E, w1 | w3, hidden]
    and ``mlp.experts.down_proj`` [E, hidden, intermediate]; the router becomes ``mlp.gate``. This is
    what ``save_pretrained(save_original_format=False)`` writes in 5.x (a test checks that there).
    """
    import re
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = load_file(src / "model.safetensors")
    out: dict[str, Any] = {}
    experts: dict[str, dict[int, dict[str, Any]]] = {}
    for name, tensor in tensors.items():
        m = re.fullmatch(r"(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight", name)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = tensor
        else:
            out[name.replace(".block_sparse_moe.gate.", ".mlp.gate.")] = tensor
    for layer, by_expert in experts.items():
        order = sorted(by_expert)
        out[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([by_expert[e]["w1"], by_expert[e]["w3"]]) for e in order]
        )
        out[f"{layer}.mlp.experts.down_proj"] = torch.stack([by_expert[e]["w2"] for e in order])
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})


def run_split_cli(
    *args: str, timeout: float = 120, memory_limit: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m neuronc split ARGS`` in a child process, as a user runs it (optionally with its address
    space capped at ``memory_limit`` bytes, so that an allocation sized by a hostile claim fails loudly)."""

    def limit() -> None:  # pragma: no cover - runs in the child
        import resource

        assert memory_limit is not None
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    return subprocess.run(
        [sys.executable, "-m", "neuronc", "split", *args],
        capture_output=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        preexec_fn=limit if memory_limit is not None else None,
        check=False,
    )


def assert_clean_failure(proc: subprocess.CompletedProcess[bytes], code: int, *needles: str) -> str:
    """A failed CLI run that ended as documented: exit ``code``, no traceback, one UTF-8 error naming
    ``needles``; in ``--json`` mode stdout is exactly one JSON error object with that exit code.
    Returns the error message (one line)."""
    stderr = proc.stderr.decode("utf-8")  # raises if a name's bytes leaked into the output undecoded
    stdout = proc.stdout.decode("utf-8")
    assert proc.returncode == code, (proc.returncode, stderr, stdout)
    assert "Traceback" not in stderr + stdout, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    message = errors[0].removeprefix("error: ")
    if stdout.strip():
        document = json.loads(stdout)
        assert document["exit_code"] == code and document["message"] == message, document
    for needle in needles:
        assert needle in stderr.replace("\n", " "), (needle, stderr)
    return message
