"""The shipped demo model: a tiny Llama and its tokenizer, generated deterministically and offline.

``python -m neuronc.demo [--out DIR] [--check]`` writes (or checks) ``profiles/models/tiny-llama``:

- ``config.json`` / ``generation_config.json``: a 2-layer Llama, hidden 64, 4 heads over 2 KV heads
  (GQA), vocabulary 512, written as fixed JSON (no transformers version stamped in it);
- ``model.safetensors``: weights drawn from Python's ``random.Random(SEED)`` (a generator whose
  stream is stable across platforms and Python versions) and written by a small safetensors writer
  here, so the bytes do not depend on torch, numpy or the safetensors package;
- ``tokenizer.json`` (+ ``tokenizer_config.json``, ``special_tokens_map.json``): a BPE over
  printable ASCII trained by the ``tokenizers`` library on the text embedded below, loadable with
  ``AutoTokenizer.from_pretrained``. Training is deterministic; the serialised JSON is stable for a
  given ``tokenizers`` version (the test that regenerates the files checks it).

The weights are random, so the model speaks gibberish: it exists to exercise the whole pipeline
(compile, bundle, run, verify against Hugging Face) in seconds on any machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import string
import struct
import sys
import tempfile
from array import array
from collections.abc import Sequence
from pathlib import Path

SEED = 20240917
DEFAULT_DIR = Path("profiles/models/tiny-llama")
VOCAB_SIZE = 512
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
BOS_ID, EOS_ID = 1, 2

CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
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

# Training text for the tokenizer (written for this project; no third-party text).
CORPUS = """\
A compiler turns a model into something a machine can run without thinking twice.
Ahead of time, every shape is fixed: the batch, the prompt bucket, the length of the cache.
The context encoding graph reads the whole prompt at once and fills the key value cache.
The token generation graph takes one token at a time and writes one position per step.
Buckets trade memory for speed: a short prompt runs in a small bucket, a long one in a large bucket.
When the prompt is longer than the largest bucket, the runtime says so and stops.
A bundle holds the compiled graphs, the weights, the tokenizer and a manifest written last.
The manifest lists every file with its size and hash, so a copy can be checked before it is used.
Two builds are the same when their inputs are the same: the model, the shapes, the types, the tools.
A store keeps bundles by key; the second compile of the same profile is a lookup, not a build.
On a quiet morning the harbour was grey and still, and the boats waited for the tide.
The baker opened the shop at six, and the smell of bread drifted down the narrow street.
Rain fell on the roofs of the old town while the children counted the drops on the window.
In the garden the bees moved from flower to flower, and the cat slept in the warm sun.
The train left the station on time, crossed the river, and climbed slowly into the hills.
She wrote a letter to her brother, folded it twice, and walked to the post office before noon.
Numbers help: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve.
Questions help too: what, where, when, why, who, which, how much, how many, how long?
The quick brown fox jumps over the lazy dog, and the lazy dog does not seem to mind at all.
Hello, world! This is a tiny model with random weights; it speaks nonsense, but it speaks quickly.
"""


def generate(out_dir: Path) -> dict[str, str]:
    """Write the demo model into ``out_dir``; return {file name: sha256}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": _json_bytes(CONFIG),
        "generation_config.json": _json_bytes(GENERATION_CONFIG),
        "tokenizer_config.json": _json_bytes(TOKENIZER_CONFIG),
        "special_tokens_map.json": _json_bytes(SPECIAL_TOKENS_MAP),
        "tokenizer.json": _tokenizer_json(),
        "model.safetensors": _safetensors_bytes(_weights()),
    }
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def check(out_dir: Path) -> list[str]:
    """Regenerate into a temporary directory; return the files that differ from ``out_dir``."""
    with tempfile.TemporaryDirectory() as tmp:
        expected = generate(Path(tmp))
    differing = []
    for name, digest in expected.items():
        path = out_dir / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            differing.append(name)
    return differing


def _json_bytes(data: object) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------


def _weights() -> dict[str, tuple[list[int], array[float]]]:
    """Llama weights by checkpoint key: (shape, float32 values). Uniform draws, deterministic."""
    rng = random.Random(SEED)
    hidden = int(str(CONFIG["hidden_size"]))
    inter = int(str(CONFIG["intermediate_size"]))
    heads = int(str(CONFIG["num_attention_heads"]))
    kv_heads = int(str(CONFIG["num_key_value_heads"]))
    head_dim = int(str(CONFIG["head_dim"]))
    layers = int(str(CONFIG["num_hidden_layers"]))

    def uniform(shape: list[int], bound: float) -> tuple[list[int], array[float]]:
        count = math.prod(shape)
        return shape, array("f", (bound * (2.0 * rng.random() - 1.0) for _ in range(count)))

    def ones(shape: list[int]) -> tuple[list[int], array[float]]:
        return shape, array("f", [1.0] * math.prod(shape))

    def linear(out_features: int, in_features: int) -> tuple[list[int], array[float]]:
        return uniform([out_features, in_features], 1.0 / math.sqrt(in_features))

    weights: dict[str, tuple[list[int], array[float]]] = {
        "model.embed_tokens.weight": uniform([VOCAB_SIZE, hidden], math.sqrt(3.0)),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = ones([hidden])
        weights[p + "self_attn.q_proj.weight"] = linear(heads * head_dim, hidden)
        weights[p + "self_attn.k_proj.weight"] = linear(kv_heads * head_dim, hidden)
        weights[p + "self_attn.v_proj.weight"] = linear(kv_heads * head_dim, hidden)
        weights[p + "self_attn.o_proj.weight"] = linear(hidden, heads * head_dim)
        weights[p + "post_attention_layernorm.weight"] = ones([hidden])
        weights[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
        weights[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        weights[p + "mlp.down_proj.weight"] = linear(hidden, inter)
    weights["model.norm.weight"] = ones([hidden])
    weights["lm_head.weight"] = linear(VOCAB_SIZE, hidden)
    return weights


def _safetensors_bytes(tensors: dict[str, tuple[list[int], array[float]]]) -> bytes:
    """A safetensors file (F32, little-endian, sorted keys, header padded to 8 bytes)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        if sys.byteorder != "little":
            values = array("f", values)
            values.byteswap()
        data = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


# ------------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------------


def _tokenizer_json() -> bytes:
    from tokenizers import (  # type: ignore[import-untyped, unused-ignore]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    # Printable ASCII only (others map to <unk>): whatever a random model samples decodes to
    # readable text. Metaspace ("▁" for spaces) as in SentencePiece-style Llama tokenizers.
    alphabet = [*sorted(set(string.printable) - set(string.whitespace)), "\u2581"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", BOS_ID)],
    )
    vocab = tokenizer.get_vocab()
    if [vocab[t] for t in SPECIAL_TOKENS] != [0, BOS_ID, EOS_ID]:
        msg = f"special token ids moved: {[vocab[t] for t in SPECIAL_TOKENS]}"
        raise RuntimeError(msg)
    text: str = tokenizer.to_str(pretty=True)
    return (text + "\n").encode("utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuronc.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help=f"output directory (default {DEFAULT_DIR})")
    parser.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = parser.parse_args(argv)
    if args.check:
        differing = check(args.out)
        if differing:
            sys.stderr.write(f"{args.out}: out of date: {', '.join(differing)}\n")
            return 1
        sys.stderr.write(f"{args.out}: up to date\n")
        return 0
    for name, digest in generate(args.out).items():
        sys.stdout.write(f"{digest[:16]}  {args.out / name}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
