"""Bundles written by hand, the way a hostile store would hand them over: files plus a sealed manifest.

Nothing here goes through neuronc's writer: a bundle is data from a store, so the tests build one
from bytes, with whatever values they want in the manifest, and seal it as neuronc does (the seal
is a SHA-256 of the bytes, not a signature: anyone who can write a bundle can write a valid seal).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CC = "2.21.33363.0+82129205"
TOOLCHAINS: dict[str, dict[str, str]] = {
    "nxdi": {"neuronc": "0.1.0", "neuronx-cc": CC, "neuronx-distributed-inference": "0.6.10598"},
    "optimum-neuron": {"neuronc": "0.1.0", "optimum-neuron": "0.4.5", "neuronx-cc": CC},
    "transformers-neuronx": {"neuronc": "0.1.0", "transformers-neuronx": "0.13.1315", "neuronx-cc": CC},
}
ARTIFACTS: dict[str, tuple[str, ...]] = {
    "nxdi": ("artifacts/model.pt", "artifacts/neuron_config.json"),
    "optimum-neuron": ("artifacts/model.pt", "artifacts/neuron_config.json", "artifacts/config.json"),
    "transformers-neuronx": ("artifacts/neff/0123456789abcdef0123.neff", "artifacts/checkpoint/config.json"),
}
TNX_KWARGS: dict[str, Any] = {
    "batch_size": 4,
    "tp_degree": 8,
    "amp": "f16",
    "n_positions": [2048, 4096],
    "context_length_estimate": [512, 1024, 2048],
}


def profile_for(backend: str, **overrides: Any) -> dict[str, Any]:
    """A normalized profile (``BuildSpec.normalized()``'s shape) of a Neuron build."""
    profile: dict[str, Any] = {
        "model": {"id": "meta-llama/Llama-3.1-8B", "revision": None, "task": "text-generation"},
        "backend": backend,
        "target": "inf2",
        "tp_degree": 8,
        "batch_size": 4,
        "amp": "bf16",
        "sequence": {
            "max_length": 4096,
            "max_context_length": 2048,
            "context_buckets": [512, 1024, 2048],
            "token_buckets": [2048, 4096],
        },
        "weights": "presharded",
        "compiler_flags": ["-O1"],
        "options": {},
    }
    profile.update(overrides)
    return profile


def extra_for(backend: str, profile: Mapping[str, Any]) -> dict[str, Any]:
    if backend == "nxdi":
        nc = {"tp_degree": 8, "batch_size": 4, "is_continuous_batching": True, "ctx_batch_size": 1}
        return {"nxdi": {"model_class": "m:NeuronLlamaForCausalLM", "neuron_config": nc, "weights": "presharded"}}
    if backend == "transformers-neuronx":
        return {
            "transformers_neuronx": {
                "model_class": "transformers_neuronx.LlamaForSampling",
                "from_pretrained": dict(TNX_KWARGS),
                "weights": "presharded",
                "neffs": ["0123456789abcdef0123.neff"],
            }
        }
    return {}


def seal(data: dict[str, Any]) -> str:
    """The manifest text with its ``manifest_sha256`` seal, as neuronc writes it."""
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = "0" * 64
    raw = json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()
    return raw.replace(f'"manifest_sha256": "{"0" * 64}"', f'"manifest_sha256": "{digest}"')


def write_bundle(
    dest: Path,
    backend: str = "nxdi",
    *,
    profile: dict[str, Any] | None = None,
    toolchain: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    target: str | None = None,
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """A complete bundle at ``dest`` (files, then manifest.json last) with exactly these manifest values."""
    profile = profile if profile is not None else profile_for(backend)
    contents: dict[str, bytes] = {
        "profile.yaml": b"# profile\n",
        "model/config.json": json.dumps({"model_type": "llama", "num_attention_heads": 32}).encode(),
    }
    for rel in ARTIFACTS.get(backend, ("artifacts/model.pt",)):
        contents[rel] = f"{rel}\n".encode()
    contents.update(files or {})
    entries = []
    for rel, data in sorted(contents.items()):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        role = {"model": "model", "artifacts": "artifact", "weights": "weights"}.get(rel.split("/")[0], "other")
        role = "profile" if rel == "profile.yaml" else role
        entries.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "role": role})
    manifest = {
        "schema_version": "1.1",
        "neuronc_version": "0.1.0",
        "created_at": "2026-01-01T00:00:00+00:00",
        "host": {"hostname": "h", "platform": "linux", "machine": "x86_64", "python": "3.11"},
        "backend": backend,
        "target": target if target is not None else str(profile.get("target", "inf2")),
        "profile": profile,
        "config_hash": "ab" * 32,
        "hashed_fields": [],
        "hashed_inputs": {},
        "toolchain": dict(toolchain if toolchain is not None else TOOLCHAINS.get(backend, {"neuronc": "0.1.0"})),
        "toolchain_key": "cd" * 32,
        "graphs": [],
        "shards": [],
        "weights": None,
        "stages": [],
        "files": entries,
        "extra": dict(extra if extra is not None else extra_for(backend, profile)),
    }
    (dest / "manifest.json").write_text(seal(manifest), encoding="utf-8")
    return dest


def edit_manifest(bundle: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Change a bundle's manifest and seal it again (what anyone with write access to a store can do)."""
    path = bundle / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(seal(data), encoding="utf-8")


def neuronc(
    *args: str | os.PathLike[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m neuronc ARGS`` in a real process, its own store under ``cwd``."""
    full = {**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "neuronc", *map(str, args)],
        capture_output=True,
        env=full,
        cwd=cwd,
        timeout=timeout,
        input=input,
    )


def text(proc: subprocess.CompletedProcess[bytes]) -> str:
    """stdout and stderr, for assertion messages."""
    return (proc.stdout + b"\n" + proc.stderr).decode("utf-8", "replace")
