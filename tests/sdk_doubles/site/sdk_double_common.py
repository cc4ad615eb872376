"""Shared helpers of the SDK test doubles (not part of any real SDK)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

SDK_DOUBLE = True
FAIL_ENV = "NEURONC_SDK_DOUBLE_FAIL"


def compile_graph(workdir: Path, name: str, flags: list[str]) -> bytes:
    """Stand in for one neuronx-cc run: write its log and a fake NEFF; fail when asked to."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "log-neuron-cc.txt"
    lines = [f"neuronx-cc (SDK double) compile {name}", f"flags: {' '.join(flags)}"]
    if os.environ.get(FAIL_ENV):
        lines.append(f"ERROR: {os.environ[FAIL_ENV]}")
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines), file=sys.stderr, flush=True)
        raise RuntimeError(f"neuronx-cc failed (SDK double): {os.environ[FAIL_ENV]}")
    lines.append("Compiler status PASS")
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(lines[0], flush=True)
    neff = b"NEFF-SDK-DOUBLE\0" + hashlib.sha256((name + " ".join(flags)).encode()).digest()
    (workdir / "graph.neff").write_bytes(neff)
    return neff


def save_torchscript(path: Path, payload: dict[str, Any]) -> None:
    """Write a small TorchScript module (as model.pt files are) that carries ``payload`` as JSON."""
    import torch

    class _Compiled(torch.nn.Module):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.info = text

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(_Compiled(json.dumps(payload, sort_keys=True))), str(path))


def load_safetensors_dir(path: Path) -> dict[str, Any]:
    """All tensors of a checkpoint directory (tests use tiny checkpoints)."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors checkpoint in {path}")
    tensors: dict[str, Any] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def shard_to(tensors: dict[str, Any], tp: int, out_dir: Path, name: str) -> None:
    """Write one safetensors file per rank, splitting dim 0 where it divides, replicating otherwise."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(tp):
        shard = {}
        for key, t in tensors.items():
            if t.dim() and t.shape[0] % tp == 0:
                shard[key] = t.chunk(tp, dim=0)[rank].contiguous()
            else:
                shard[key] = t.contiguous()
        save_file(shard, str(out_dir / name.format(rank=rank)))
