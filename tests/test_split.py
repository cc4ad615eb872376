"""Round trips: every family, tp 1/2/4/8, reassembled bit for bit; sharded and .bin inputs; dtype casts; the CLI.

Models are tiny random Hugging Face models built locally from a config (no Hub access), once per module.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import fuse_mixtral_experts, save_pytorch_bin, saved_tensor_bytes
from click.testing import CliRunner

from neuronc._output import out
from neuronc.checkpoint import (
    check_split,
    open_checkpoint,
    open_split,
    split_checkpoint,
)
from neuronc.cli import app
from neuronc.hfcompat import transformers_major

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TPS = (1, 2, 4, 8)
VOCAB = 61  # not a multiple of 2, 4 or 8: exercises vocab padding on every tp > 1

_COMMON = {"num_hidden_layers": 2, "vocab_size": VOCAB, "max_position_embeddings": 32}


def _configs() -> dict[str, Any]:
    t = transformers
    gqa = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 8, "num_key_value_heads": 2}
    return {
        "llama": t.LlamaConfig(**gqa, **_COMMON),
        "mistral": t.MistralConfig(**gqa, **_COMMON, sliding_window=None),
        "qwen2": t.Qwen2Config(**gqa, **_COMMON),
        # head_dim 16 != hidden / heads: the split must take head sizes from shapes, not from hidden_size.
        "qwen3": t.Qwen3Config(**gqa, head_dim=16, **_COMMON),
        "mixtral": t.MixtralConfig(**gqa, num_local_experts=4, num_experts_per_tok=2, **_COMMON),
        "phi3": t.Phi3Config(**gqa, pad_token_id=0, **_COMMON),
        "opt": t.OPTConfig(hidden_size=64, ffn_dim=96, num_attention_heads=8, word_embed_proj_dim=64, **_COMMON),
        "gpt2": t.GPT2Config(n_embd=64, n_layer=2, n_head=8, n_positions=32, vocab_size=VOCAB),
        "gpt_neox": t.GPTNeoXConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=8, tie_word_embeddings=False, **_COMMON
        ),
    }


FAMILIES = ["gpt2", "gpt_neox", "llama", "mistral", "mixtral", "opt", "phi3", "qwen2", "qwen3"]
# Round-tripped too: Mixtral with its experts fused, as transformers 5 can write it.
LAYOUTS = [*FAMILIES, "mixtral-fused"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, bytes]]]:
    """family -> (checkpoint dir, {tensor name: bytes}) for every required family."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("models")
    built: dict[str, tuple[Path, dict[str, bytes]]] = {}
    for family, config in _configs().items():
        model = transformers.AutoModelForCausalLM.from_config(config)
        path = root / family
        model.save_pretrained(path)
        # What is in the files, read with the safetensors library (not what the model holds in memory:
        # transformers 5 fuses Mixtral's experts and renames GPT-NeoX's lm_head until it saves).
        built[family] = (path, saved_tensor_bytes(path))
    fused = root / "mixtral-fused"
    fuse_mixtral_experts(built["mixtral"][0], fused)
    built["mixtral-fused"] = (fused, saved_tensor_bytes(fused))
    return built


@pytest.mark.parametrize("family", LAYOUTS)
def test_round_trip_is_bit_identical(
    models: dict[str, tuple[Path, dict[str, bytes]]], family: str, tmp_path: Path
) -> None:
    path, expected = models[family]
    for tp in TPS:
        out = tmp_path / f"tp{tp}"
        result = split_checkpoint(path, out, tp)
        assert [s.file for s in result.shards] == [f"rank-{r:03d}-of-{tp:03d}.safetensors" for r in range(tp)]
        assert result.tensors == len(expected)
        with open_split(out) as split:
            assert set(split.tensors) == set(expected)
            for name, data in expected.items():
                assert split.reassemble(name) == data, f"{family} tp={tp}: {name}"
        report = check_split(out)
        assert report.ok, report.mismatches
        assert report.tensors_checked == len(expected)


def test_shards_load_with_the_safetensors_library_and_reassemble_from_the_index(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    """An independent reader (safetensors + torch.cat) following only index.json gets the originals back."""
    from safetensors.torch import load_file

    path, expected = models["phi3"]
    split_checkpoint(path, tmp_path / "w", 4)
    index = json.loads((tmp_path / "w" / "index.json").read_text())
    shards = [load_file(tmp_path / "w" / s["file"]) for s in index["shards"]]
    for name, entry in index["tensors"].items():
        if entry["dim"] is None:
            whole = shards[0][name]
            assert all(torch.equal(s[name], whole) for s in shards)
        else:
            dim = entry["dim"]
            pieces: dict[int, Any] = {}
            for r, rank_entry in enumerate(entry["ranks"]):
                position = 0
                for start, stop in rank_entry["slices"]:
                    pieces[start] = shards[r][name].narrow(dim, position, stop - start)
                    position += stop - start
            whole = torch.cat([pieces[k] for k in sorted(pieces)], dim=dim)
        assert whole.contiguous().view(-1).view(torch.uint8).numpy().tobytes() == expected[name], name


def _entry(split_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((split_dir / "index.json").read_text())["tensors"][name]


def test_index_records_strategy_slices_replication_and_padding(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, _ = models["llama"]
    split_checkpoint(path, tmp_path / "w", 8)
    d = tmp_path / "w"
    q = _entry(d, "model.layers.0.self_attn.q_proj.weight")
    assert (q["strategy"], q["dim"], q["unit"]) == ("column", 0, 8)
    assert [r["slices"] for r in q["ranks"]] == [[[8 * r, 8 * r + 8]] for r in range(8)]
    # 2 KV heads on 8 ranks: each KV head is replicated onto the 4 ranks whose query heads use it.
    k = _entry(d, "model.layers.0.self_attn.k_proj.weight")
    assert k["replicas"] == 4
    assert [r["slices"] for r in k["ranks"]] == [[[0, 8]]] * 4 + [[[8, 16]]] * 4
    o = _entry(d, "model.layers.0.self_attn.o_proj.weight")
    assert (o["strategy"], o["dim"], o["ranks"][3]["shape"]) == ("row", 1, [64, 8])
    down = _entry(d, "model.layers.1.mlp.down_proj.weight")
    assert (down["strategy"], down["dim"], down["ranks"][0]["shape"]) == ("row", 1, [64, 12])
    emb = _entry(d, "model.embed_tokens.weight")
    assert (emb["strategy"], emb["padding"]) == ("vocab", 3)  # 61 -> 64
    assert [r["pad"] for r in emb["ranks"]] == [0] * 7 + [3]
    assert emb["ranks"][7] == {"rank": 7, "shape": [8, 64], "slices": [[56, 61]], "pad": 3}
    norm = _entry(d, "model.norm.weight")
    assert (norm["strategy"], norm["dim"], norm["replicas"]) == ("replicate", None, 8)


def test_fused_projections_split_per_head(models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path) -> None:
    for family, tp in (("gpt2", 2), ("phi3", 2), ("gpt_neox", 2)):
        split_checkpoint(models[family][0], tmp_path / family, tp)
    # GPT-2 c_attn is Conv1D [in, out] = [64, q|k|v]: split along dim 1, per head, in each of q, k and v.
    c_attn = _entry(tmp_path / "gpt2", "transformer.h.0.attn.c_attn.weight")
    assert (c_attn["dim"], c_attn["unit"]) == (1, 8)
    assert c_attn["ranks"][1]["slices"] == [[32, 64], [96, 128], [160, 192]]
    assert [p["name"] for p in c_attn["parts"]] == ["q", "k", "v"]
    assert _entry(tmp_path / "gpt2", "transformer.h.0.attn.c_proj.weight")["dim"] == 0  # row-parallel on Conv1D
    # Phi-3 qkv_proj is [q (8 heads) | k (2) | v (2)] x 8; with tp 2 each rank takes 4 q heads and 1 k, 1 v head.
    qkv = _entry(tmp_path / "phi3", "model.layers.0.self_attn.qkv_proj.weight")
    assert qkv["ranks"][1]["slices"] == [[32, 64], [72, 80], [88, 96]]
    gate_up = _entry(tmp_path / "phi3", "model.layers.0.mlp.gate_up_proj.weight")
    assert gate_up["ranks"][0]["slices"] == [[0, 48], [96, 144]]
    # GPT-NeoX query_key_value is head-major: a head's q, k and v (3 x 8 rows) stay together.
    neox = _entry(tmp_path / "gpt_neox", "gpt_neox.layers.0.attention.query_key_value.weight")
    assert (neox["unit"], neox["ranks"][1]["slices"]) == (24, [[96, 192]])


def test_mixtral_experts_split_per_expert_and_router_replicated(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    split_checkpoint(models["mixtral"][0], tmp_path / "w", 4)
    d = tmp_path / "w"
    assert _entry(d, "model.layers.0.block_sparse_moe.gate.weight")["strategy"] == "replicate"
    for e in range(4):
        assert _entry(d, f"model.layers.0.block_sparse_moe.experts.{e}.w1.weight")["ranks"][0]["shape"] == [24, 64]
        assert _entry(d, f"model.layers.0.block_sparse_moe.experts.{e}.w2.weight")["ranks"][0]["shape"] == [64, 24]


def test_fused_mixtral_experts_split_inside_each_expert(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    split_checkpoint(models["mixtral-fused"][0], tmp_path / "w", 4)
    d = tmp_path / "w"
    assert _entry(d, "model.layers.0.mlp.gate.weight")["strategy"] == "replicate"
    # gate_up_proj [4 experts, 96 gate | 96 up, 64]: each rank holds 24 gate and 24 up rows of every expert.
    gate_up = _entry(d, "model.layers.0.mlp.experts.gate_up_proj")
    assert (gate_up["strategy"], gate_up["dim"], gate_up["ranks"][1]["shape"]) == ("column", 1, [4, 48, 64])
    assert gate_up["ranks"][1]["slices"] == [[24, 48], [120, 144]]
    assert [p["name"] for p in gate_up["parts"]] == ["gate", "up"]
    down = _entry(d, "model.layers.0.mlp.experts.down_proj")
    assert (down["strategy"], down["dim"], down["ranks"][1]["shape"]) == ("row", 2, [4, 64, 24])
    assert down["ranks"][1]["slices"] == [[24, 48]]


@pytest.mark.skipif(transformers_major() == 4, reason="transformers 4.57 has no fused-expert layout")
def test_fused_layout_is_what_transformers_5_writes(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(models["mixtral"][0])
    model.save_pretrained(tmp_path / "fused", save_original_format=False)
    assert saved_tensor_bytes(tmp_path / "fused") == models["mixtral-fused"][1]


# -- other input layouts -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(1)
    return transformers.AutoModelForCausalLM.from_config(_configs()["llama"])


@pytest.mark.parametrize(
    ("kwargs", "files"),
    [
        ({"max_shard_size": "60KB"}, "model.safetensors.index.json"),
        ({"bin": True}, "pytorch_model.bin"),
        ({"bin": True, "max_shard_size": 60_000}, "pytorch_model.bin.index.json"),
    ],
)
def test_sharded_and_bin_inputs(llama_model: Any, tmp_path: Path, kwargs: dict[str, Any], files: str) -> None:
    src = tmp_path / "src"
    if kwargs.pop("bin", False):
        save_pytorch_bin(llama_model, src, kwargs.get("max_shard_size"))
    else:
        llama_model.save_pretrained(src, **kwargs)
    assert (src / files).is_file()
    with open_checkpoint(src) as ckpt:
        assert ckpt.format == ("safetensors" if "safetensors" in files else "pytorch")
        if "index" in files:
            assert len(ckpt.files) > 1
        q = ckpt.read_tensor("model.layers.0.self_attn.q_proj.weight")
        assert torch.equal(q, llama_model.state_dict()["model.layers.0.self_attn.q_proj.weight"])
    split_checkpoint(src, tmp_path / "w", 4)
    expected = {
        n: t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() for n, t in llama_model.state_dict().items()
    }
    with open_split(tmp_path / "w") as split:
        for name in split.tensors:
            assert split.reassemble(name) == expected[name], name
    assert check_split(tmp_path / "w").ok


@pytest.mark.parametrize(("dtype", "torch_dtype"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_dtype_cast_while_streaming_matches_torch(
    llama_model: Any, tmp_path: Path, dtype: str, torch_dtype: str
) -> None:
    src = tmp_path / "src"
    llama_model.save_pretrained(src)
    result = split_checkpoint(src, tmp_path / "w", 2, dtype=dtype)
    assert result.dtype == dtype
    target = getattr(torch, torch_dtype)
    with open_split(tmp_path / "w") as split:
        assert split.data["dtype"] == dtype
        for name, tensor in llama_model.state_dict().items():
            entry = split.tensors[name]
            assert (entry["source_dtype"], entry["dtype"]) == ("F32", {"bf16": "BF16", "fp16": "F16"}[dtype])
            cast = tensor.to(target).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            assert split.reassemble(name) == cast, name
    assert check_split(tmp_path / "w").ok
    # Half the bytes of the fp32 split, up to headers and padding.
    full = split_checkpoint(src, tmp_path / "w32", 2)
    assert math.isclose(result.total_bytes, full.total_bytes / 2, rel_tol=0.05)


def test_bf16_source_cast_up_to_fp32(llama_model: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    llama_model.to(torch.bfloat16).save_pretrained(src)
    llama_model.to(torch.float32)
    split_checkpoint(src, tmp_path / "w", 2, dtype="fp32")
    with open_checkpoint(src) as ckpt, open_split(tmp_path / "w") as split:
        for name in ckpt.tensors:
            expected = (
                ckpt.read_tensor(name).to(torch.float32).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            )
            assert split.reassemble(name) == expected
    assert check_split(tmp_path / "w").ok


# -- CLI ---------------------------------------------------------------------------------------------


def _invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()  # the output object caches consoles bound to the previous invocation's streams
    return runner.invoke(app, args, catch_exceptions=False)


def test_cli_split_and_check_json(
    runner: CliRunner, models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, expected = models["opt"]
    out = tmp_path / "weights"
    result = _invoke(runner, ["split", str(path), "--tp", "4", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["tp"], data["family"], data["tensors"], data["dtype"]) == (4, "opt", len(expected), None)
    assert [s["rank"] for s in data["shards"]] == [0, 1, 2, 3]
    for shard in data["shards"]:
        assert (out / shard["file"]).stat().st_size == shard["bytes"]
        assert shard["sha256"] is None  # the CLI hashes only with --hash
    assert json.loads((out / "index.json").read_text())["shards"][0]["sha256"] is None
    assert data["total_bytes"] == sum(s["bytes"] for s in data["shards"])
    assert data["peak_rss_bytes"] > 0

    checked = _invoke(runner, ["split", "--check", str(out), "--json"])
    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.stdout)
    assert report["ok"] is True
    assert (report["tensors_checked"], report["shards_checked"], report["mismatches"]) == (len(expected), 4, [])

    hashed = tmp_path / "hashed"
    result = _invoke(runner, ["split", str(path), "--tp", "4", "--out", str(hashed), "--hash", "--json"])
    assert result.exit_code == 0, result.output
    import hashlib

    for shard in json.loads(result.stdout)["shards"]:
        assert shard["sha256"] == hashlib.sha256((hashed / shard["file"]).read_bytes()).hexdigest()
        assert (hashed / shard["file"]).read_bytes() == (out / shard["file"]).read_bytes()
    checked = _invoke(runner, ["split", "--check", str(hashed), "--json"])
    assert checked.exit_code == 0, checked.output


def test_cli_human_output(runner: CliRunner, models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path) -> None:
    path, _ = models["gpt2"]
    result = _invoke(runner, ["split", str(path), "--tp", "2", "--out", str(tmp_path / "w"), "--dtype", "bf16"])
    assert result.exit_code == 0, result.output
    assert "rank-001-of-002.safetensors" in result.stdout
    assert "into tp=2 as bf16" in result.output
    checked = _invoke(runner, ["split", "--check", str(tmp_path / "w")])
    assert checked.exit_code == 0
    assert "match" in checked.output and "bit for bit" in checked.output


def _corrupt_one_byte(path: Path, offset_from_end: int = 1) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def test_check_detects_a_flipped_byte_in_a_shard(
    runner: CliRunner, models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, _ = models["llama"]
    out = tmp_path / "w"
    split_checkpoint(path, out, 2)
    _corrupt_one_byte(out / "rank-001-of-002.safetensors")
    result = _invoke(runner, ["split", "--check", str(out), "--json"])
    assert result.exit_code == 4
    error = json.loads(result.stdout)
    assert error["error"] == "verification_failed"
    assert any("SHA-256 differs" in d for d in error["details"])
    assert any("differs from the source" in d and "rank 1" in d for d in error["details"])


def test_check_detects_a_changed_source(models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    path, _ = models["llama"]
    out = tmp_path / "w"
    split_checkpoint(path, out, 4)
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "config.json").write_bytes((path / "config.json").read_bytes())
    state = load_file(path / "model.safetensors")
    state["model.layers.1.mlp.down_proj.weight"][5, 70 % 96] += 1.0
    save_file(state, changed / "model.safetensors", metadata={"format": "pt"})
    report = check_split(out, changed)
    assert not report.ok
    [problem] = report.mismatches
    assert (problem.tensor, problem.rank) == ("model.layers.1.mlp.down_proj.weight", 2)  # column 70 is on rank 2
    assert "differs from the source" in problem.problem
    assert check_split(out, path).ok


def test_cli_argument_errors_exit_2(
    runner: CliRunner, models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, _ = models["llama"]
    cases: list[tuple[list[str], str]] = [
        (["split", str(path), "--tp", "3", "--out", str(tmp_path / "a")], "tp=3 does not divide"),
        (["split", str(path), "--tp", "2", "--out", str(tmp_path / "b"), "--dtype", "int4"], "unknown dtype"),
        (["split", str(path), "--tp", "2"], "needs MODEL (a directory or a repo id), --tp and --out"),
        (["split", "--check", str(tmp_path)], "no index.json"),
        (["split", "--check", str(tmp_path), "--tp", "2"], "--check takes only the split directory"),
        (["split", "--check", str(tmp_path), "--hash"], "--check takes only the split directory"),
    ]
    for args, message in cases:
        result = _invoke(runner, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_refuses_non_empty_out_and_accepts_an_empty_one(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    from neuronc.errors import InvalidInputError

    path, _ = models["gpt_neox"]
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="not an empty directory"):
        split_checkpoint(path, full, 2)
    assert (full / "keep.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    split_checkpoint(path, empty, 2)
    assert (empty / "index.json").is_file()


def test_progress_sees_every_written_byte(models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path) -> None:
    seen: dict[str, Any] = {"advanced": 0.0}

    class Task:
        def advance(self, amount: float = 1) -> None:
            seen["advanced"] += amount

        def update(self, *, completed: float | None = None, description: str | None = None) -> None:
            pass

        def done(self, status: str | None = None) -> None:
            seen["done"] = status

    class Sink:
        def task(self, description: str, total: float | None = None, unit: str = "") -> Task:
            seen.update(total=total, unit=unit)
            return Task()

    result = split_checkpoint(models["qwen2"][0], tmp_path / "w", 4, progress=Sink())
    assert seen["unit"] == "bytes"
    assert seen["advanced"] == seen["total"]
    headers = sum(8 + int.from_bytes((tmp_path / "w" / s.file).read_bytes()[:8], "little") for s in result.shards)
    assert seen["total"] == result.total_bytes - headers
    assert seen["done"] == "4 shards"


def test_without_fsync_the_output_is_the_same(models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path) -> None:
    path, _ = models["mixtral"]
    durable = split_checkpoint(path, tmp_path / "a", 4)
    fast = split_checkpoint(path, tmp_path / "b", 4, fsync=False)
    assert [s.sha256 for s in durable.shards] == [s.sha256 for s in fast.shards]
    assert (tmp_path / "a" / "index.json").read_text() == (tmp_path / "b" / "index.json").read_text()


# -- the kernel-copy path (hash=False) ----------------------------------------------------------------


def _shard_bytes(split_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(split_dir.glob("rank-*.safetensors"))}


def _index_without_hashes(split_dir: Path) -> dict[str, Any]:
    index = json.loads((split_dir / "index.json").read_text())
    for shard in index["shards"]:
        shard["sha256"] = None
    return index


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "mixtral", "qwen2"])
def test_unhashed_split_is_byte_identical_to_the_hashed_one(
    models: dict[str, tuple[Path, dict[str, bytes]]], family: str, tmp_path: Path
) -> None:
    """hash=False copies contiguous parts in the kernel; the shards must not change by a byte."""
    import hashlib

    path, _ = models[family]
    for tp in TPS:
        hashed = split_checkpoint(path, tmp_path / f"h{tp}", tp)
        plain = split_checkpoint(path, tmp_path / f"p{tp}", tp, hash=False)
        assert all(s.sha256 is None for s in plain.shards)
        assert _shard_bytes(tmp_path / f"p{tp}") == _shard_bytes(tmp_path / f"h{tp}"), f"{family} tp={tp}"
        assert [hashlib.sha256(b).hexdigest() for b in _shard_bytes(tmp_path / f"p{tp}").values()] == [
            s.sha256 for s in hashed.shards
        ]
        assert _index_without_hashes(tmp_path / f"h{tp}") == json.loads(
            (tmp_path / f"p{tp}" / "index.json").read_text()
        )
        report = check_split(tmp_path / f"p{tp}")
        assert report.ok, report.mismatches


def _counting_copy(monkeypatch: pytest.MonkeyPatch) -> list[int]:

    real = os.copy_file_range
    calls: list[int] = []

    def counting(src: int, dst: int, count: int, offset_src: int | None = None, *args: Any) -> int:
        calls.append(count)
        return real(src, dst, count, offset_src, *args)

    monkeypatch.setattr(os, "copy_file_range", counting)
    return calls


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="no copy_file_range here")
def test_kernel_copy_is_used_only_without_hashing_or_casting(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = models["llama"]
    calls = _counting_copy(monkeypatch)
    split_checkpoint(path, tmp_path / "a", 2, hash=False)
    assert calls  # replicated norms, row splits of q/k/v/gate/up and the vocab-parallel embeddings
    calls.clear()
    split_checkpoint(path, tmp_path / "b", 2)
    split_checkpoint(path, tmp_path / "c", 2, hash=False, dtype="bf16")  # fp32 source: every tensor is cast
    assert calls == []


@pytest.mark.parametrize("how", ["exdev", "enosys", "eopnotsupp", "short", "zero", "absent", "fails-midway"])
def test_kernel_copy_falls_back_to_buffered_copies(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """copy_file_range missing, refusing (EXDEV, ENOSYS, EOPNOTSUPP), stopping short or failing after
    some bytes: the rest goes through pread + write and the shards are the same."""
    import errno

    path, _ = models["qwen2"]
    split_checkpoint(path, tmp_path / "ref", 4)
    real = os.copy_file_range
    state = {"calls": 0}

    def fake(src: int, dst: int, count: int, offset_src: int | None = None, *args: Any) -> int:
        state["calls"] += 1
        if how in ("exdev", "enosys", "eopnotsupp"):
            raise OSError(getattr(errno, how.upper()), os.strerror(getattr(errno, how.upper())))
        if how == "short":
            return int(real(src, dst, min(count, 6), offset_src, *args))
        if how == "zero":
            return 0
        if state["calls"] > 3:  # fails-midway
            raise OSError(errno.EXDEV, "cross-device")
        return int(real(src, dst, max(1, count // 3), offset_src, *args))

    if how == "absent":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    else:
        monkeypatch.setattr(os, "copy_file_range", fake)
    split_checkpoint(path, tmp_path / "out", 4, hash=False)
    assert _shard_bytes(tmp_path / "out") == _shard_bytes(tmp_path / "ref")
    assert check_split(tmp_path / "out").ok
    if how != "absent":
        assert state["calls"] > 0


def test_a_real_copy_error_is_an_environment_error_and_leaves_no_output(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from neuronc.errors import EnvironmentIncompatibleError

    def broken(*args: Any) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "copy_file_range", broken)
    with pytest.raises(EnvironmentIncompatibleError, match=r"out: cannot write the split: Input/output"):
        split_checkpoint(models["llama"][0], tmp_path / "nested" / "out", 2, hash=False)
    assert list(tmp_path.iterdir()) == []  # nor the parent directory the split created


def test_source_that_shrinks_during_a_kernel_copy_is_a_checkpoint_error(tmp_path: Path) -> None:
    """copy_file_range stops at the end of a file that shrank; the buffered fallback names the file."""
    from neuronc.checkpoint.writer import ShardWriter
    from neuronc.errors import CheckpointError

    source = tmp_path / "src.bin"
    source.write_bytes(bytes(range(256)) * 40)
    writer = ShardWriter(tmp_path / "out.safetensors", [("t", "U8", (20000,))], hash=False)
    fd = os.open(source, os.O_RDONLY)
    try:
        assert writer.copy_from(fd, 100, 5000, display=str(source)) == 5000
        with pytest.raises(CheckpointError, match=r"src\.bin: unexpected end of file"):
            writer.copy_from(fd, 5100, 15000, display=str(source))
    finally:
        os.close(fd)
        writer.close()


def test_copy_from_refuses_a_hashing_writer(tmp_path: Path) -> None:
    from neuronc.checkpoint.writer import ShardWriter

    writer = ShardWriter(tmp_path / "out.safetensors", [("t", "U8", (4,))])
    try:
        with pytest.raises(AssertionError, match="hashing writer"):
            writer.copy_from(0, 0, 4, display="x")
    finally:
        writer.close()


def test_check_of_an_unhashed_split_still_finds_a_flipped_byte_and_a_stray_tensor(
    models: dict[str, tuple[Path, dict[str, bytes]]], tmp_path: Path
) -> None:
    from safetensors.torch import load_file, save_file

    path, _ = models["llama"]
    out = tmp_path / "w"
    split_checkpoint(path, out, 2, hash=False)
    _corrupt_one_byte(out / "rank-001-of-002.safetensors")
    report = check_split(out)
    assert not report.ok
    assert any(m.rank == 1 and "differs from the source" in m.problem for m in report.mismatches)
    assert not any("SHA-256" in m.problem for m in report.mismatches)

    stray = tmp_path / "s"
    split_checkpoint(path, stray, 2, hash=False)
    shard = stray / "rank-000-of-002.safetensors"
    state = load_file(shard)
    state["extra.weight"] = torch.zeros(3)
    save_file(state, shard, metadata={"format": "pt"})
    index = json.loads((stray / "index.json").read_text())
    index["shards"][0]["bytes"] = shard.stat().st_size  # pass the size check: only the tensor set betrays it
    (stray / "index.json").write_text(json.dumps(index))
    report = check_split(stray)
    assert [(m.tensor, m.rank) for m in report.mismatches] == [("extra.weight", 0)]
    assert "does not list" in report.mismatches[0].problem
