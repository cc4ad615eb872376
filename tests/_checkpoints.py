"""Checkpoint layouts the splitter tests need, from either transformers series."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neuronc.hfcompat import transformers_major


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
