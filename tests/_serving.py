"""Bundles for the deploy tests: each shipped Neuron profile compiled through the SDK doubles.

The profile's shapes (tp, batch, amp, sequence, buckets, weights, options) are kept; only the
model is replaced by a tiny local Llama with enough heads for any tp degree and enough positions
for any shipped sequence length. The compile is the real ``neuronc compile`` pipeline; the Neuron
SDK underneath is the doubles (tests/sdk_doubles), which write the files the real one writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SERVED_BACKENDS = ("nxdi", "optimum-neuron", "transformers-neuronx")


def shipped_profiles() -> list[Path]:
    """Every shipped profile whose backend a serving stack loads (LLM backends, not the encoder or CPU)."""
    found = []
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("backend") in SERVED_BACKENDS:
            found.append(path)
    return found


def write_wide_llama(directory: Path) -> Path:
    """A 1-layer Llama with 24 heads (24 KV heads, head dim 2): every tp in 1, 2, 4, 8, 12, 24 divides it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=48,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=24,
        num_key_value_heads=24,
        vocab_size=64,
        max_position_embeddings=32768,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(str(directory), safe_serialization=True)
    # A tokenizer the serving side can load (vLLM, TorchServe handler, GuideLLM all read model/).
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(60)} | {"<unk>": 60, "<s>": 61, "</s>": 62, "<pad>": 63}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "<unk>",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "model_max_length": 32768,
            }
        )
    )
    return directory


def profile_for_tiny_model(shipped: Path, workdir: Path, model_dir: Path, **overrides: Any) -> Path:
    """A copy of ``shipped`` pointing at ``model_dir`` (its shapes unchanged unless overridden)."""
    data = yaml.safe_load(shipped.read_text())
    data["model"] = {"id": str(model_dir)}
    data.pop("matrix", None)
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = workdir / shipped.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# A vLLM-ready NxDI build: `serving: vllm` compiles it the way vllm-neuron loads precompiled
# artifacts (continuous batching, context batch 1, vllm-neuron's on-device sampling).
VLLM_READY_OPTIONS: dict[str, Any] = {"logical_nc_config": 1, "serving": "vllm"}


@contextlib.contextmanager
def doubles_on_path(workdir: Path) -> Iterator[None]:
    """The SDK doubles importable here and in child processes (as the sdk_doubles fixture, for any scope)."""
    from sdk_doubles import SITE, forget_doubles, subprocess_env, write_dist_info

    dist = write_dist_info(workdir / "sdk-dists")
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path[:0] = [str(SITE), str(dist)]
    os.environ["PYTHONPATH"] = subprocess_env(dist)["PYTHONPATH"]
    forget_doubles()
    try:
        yield
    finally:
        forget_doubles()
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env


def compile_shipped(workdir: Path) -> dict[str, Path]:
    """Every shipped LLM profile compiled (through ``neuronc compile``) with the tiny model; nxdi twice:
    as shipped, and vLLM-ready (``<stem>+vllm``). Keys are profile stems."""
    from click.testing import CliRunner

    from neuronc._output import out
    from neuronc.cli import app

    model = write_wide_llama(workdir / "wide-llama")
    bundles: dict[str, Path] = {}
    with doubles_on_path(workdir):
        for shipped in shipped_profiles():
            variants = {shipped.stem: {}}
            if yaml.safe_load(shipped.read_text())["backend"] == "nxdi":
                variants[shipped.stem + "+vllm"] = {"options": VLLM_READY_OPTIONS}
            for name, overrides in variants.items():
                folder = workdir / name
                folder.mkdir()
                profile = profile_for_tiny_model(shipped, folder, model, **overrides)
                out.reset()
                result = CliRunner().invoke(app, ["compile", str(profile), "--json", "--store", str(workdir / "store")])
                assert result.exit_code == 0, result.output
                bundles[name] = Path(json.loads(result.stdout)["builds"][0]["bundle"])
    return bundles
