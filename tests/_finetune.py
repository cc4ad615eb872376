"""A fine-tune of the demo model: its tensors' values changed, their names, shapes and dtypes kept."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def perturb_checkpoint(model_dir: Path, seed: int) -> None:
    """Rewrite ``model.safetensors`` in place with other values (what a second training run writes):
    small noise on every tensor, and the output head's rows reversed (so greedy tokens change)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    generator = torch.Generator().manual_seed(seed)
    changed = {}
    for name, tensor in tensors.items():
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * 0.02
        value = tensor.float() + noise * tensor.float().std().clamp(min=1e-3)
        if name == "lm_head.weight":
            value = value.flip(0)
        changed[name] = value.to(tensor.dtype).contiguous()
    save_file(changed, str(path), metadata={"format": "pt"})


def demo_copy(dest: Path, *, seed: int | None = None) -> Path:
    """The demo profile and model copied into ``dest`` (the model fine-tuned with ``seed``); the profile."""
    shutil.copytree(ROOT / "profiles" / "models" / "tiny-llama", dest / "models" / "tiny-llama")
    profile = dest / "tiny-llama-cpu.yaml"
    shutil.copy(ROOT / "profiles" / "tiny-llama-cpu.yaml", profile)
    if seed is not None:
        perturb_checkpoint(dest / "models" / "tiny-llama", seed)
    return profile
