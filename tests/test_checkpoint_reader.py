"""Units of neuronc.checkpoint: header parsing and building, the streaming writer, the reader, casts, partition plans."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronc.checkpoint import (
    TensorInfo,
    check_split,
    model_dims,
    open_checkpoint,
    open_safetensors_file,
    open_split,
    plan_partitions,
    split_checkpoint,
)
from neuronc.checkpoint._cast import cast_bytes, dtype_code
from neuronc.checkpoint._safetensors import build_header, read_header
from neuronc.checkpoint.writer import ShardWriter
from neuronc.errors import CheckpointError, InvalidInputError

torch = pytest.importorskip("torch")


# -- casts: bit for bit what torch does ----------------------------------------------------------------


def _special_f32() -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    specials = np.array(
        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 6e-8, 3.4e38, 1.401298e-45],
        dtype=np.float32,
    ).view(np.uint32)
    ties = (np.arange(0, 2**16, dtype=np.uint32) << 16) | 0x8000  # exactly halfway between two bf16 values
    return np.concatenate([bits, specials, ties, ties | 0x10000]).view(np.float32)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("F32", "BF16"),
        ("F32", "F16"),
        ("BF16", "F32"),
        ("F16", "F32"),
        ("BF16", "F16"),
        ("F16", "BF16"),
        ("F64", "BF16"),
    ],
)
def test_cast_matches_torch_bit_for_bit(source: str, target: str) -> None:
    torch_dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
    values = torch.from_numpy(_special_f32().copy())
    if source == "F64":
        values = values.double() * 1.0000001  # values that need two roundings on the way down
    values = values.to(torch_dtypes[source])
    raw = values.contiguous().view(torch.uint8).numpy().tobytes()
    expected = values.to(torch_dtypes[target]).contiguous().view(torch.uint8).numpy().tobytes()
    got = bytes(memoryview(cast_bytes(raw, source, target)).cast("B"))
    # Finite values and infinities: identical bits. NaN payloads are not stable even inside torch
    # (its scalar and vector paths differ), so NaN only has to stay NaN.
    expected_t = torch.frombuffer(bytearray(expected), dtype=torch_dtypes[target])
    got_t = torch.frombuffer(bytearray(got), dtype=torch_dtypes[target])
    nan = expected_t.isnan()
    assert torch.equal(nan, got_t.isnan())
    assert int(nan.sum()) > 1000  # the random bit patterns do include NaNs
    width = {"F32": torch.int32, "BF16": torch.int16, "F16": torch.int16}[target]
    assert torch.equal(expected_t.view(width)[~nan], got_t.view(width)[~nan])


def test_dtype_names() -> None:
    assert [dtype_code(n) for n in ("fp32", "BF16", "float16", None)] == ["F32", "BF16", "F16", None]
    with pytest.raises(InvalidInputError, match="unknown dtype 'int8'"):
        dtype_code("int8")


# -- header and writer ----------------------------------------------------------------------------------


def test_written_file_reads_back_with_the_safetensors_library(tmp_path: Path) -> None:
    from safetensors import safe_open

    arrays = {
        "scalar": np.array(3.5, dtype="<f4"),
        "empty": np.zeros((0, 4), dtype="<f4"),
        "odd": np.arange(3, dtype="<i2"),  # 6 bytes: the next tensor starts unaligned, which the format allows
        "matrix": np.arange(12, dtype="<f8").reshape(3, 4),
    }
    layout = [
        (name, {"<f4": "F32", "<i2": "I16", "<f8": "F64"}[a.dtype.str], tuple(a.shape)) for name, a in arrays.items()
    ]
    writer = ShardWriter(tmp_path / "x.safetensors", layout, {"format": "pt"})
    for name, array in arrays.items():
        writer.write(array.tobytes())
        writer.end_tensor(name)
    written = writer.finish()
    assert written.bytes == (tmp_path / "x.safetensors").stat().st_size
    header = read_header(tmp_path / "x.safetensors")
    assert header.data_start % 8 == 0
    assert header.metadata == {"format": "pt"}
    with safe_open(tmp_path / "x.safetensors", framework="np") as f:
        for name, array in arrays.items():
            np.testing.assert_array_equal(f.get_tensor(name), array)
    with open_safetensors_file(tmp_path / "x.safetensors") as ckpt:
        assert list(ckpt.tensors) == list(arrays)
        assert ckpt.read_numpy("matrix").tolist() == arrays["matrix"].tolist()
        assert ckpt.read_tensor("scalar").item() == 3.5
        assert ckpt.read_tensor("empty").shape == (0, 4)


def test_writer_refuses_bytes_that_do_not_match_the_header(tmp_path: Path) -> None:
    writer = ShardWriter(tmp_path / "x.safetensors", [("a", "F32", (2,)), ("b", "F32", (2,))])
    writer.write(b"\0" * 4)
    with pytest.raises(AssertionError, match="tensor 'a' ends at"):
        writer.end_tensor("a")
    writer.write(b"\0" * 4)
    with pytest.raises(AssertionError, match="header promised"):
        writer.finish()
    writer.close()


def test_build_header_pads_to_eight_bytes() -> None:
    for n in range(1, 10):
        raw, offsets = build_header([(f"t{i}", "BF16", (i + 1,)) for i in range(n)])
        (length,) = struct.unpack("<Q", raw[:8])
        assert len(raw) == 8 + length and len(raw) % 8 == 0
        assert offsets[f"t{n - 1}"][1] == sum(2 * (i + 1) for i in range(n))


# -- reader ---------------------------------------------------------------------------------------------


def test_reader_lists_tensors_and_reads_one_at_a_time(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = {"b": torch.randn(3, 5).to(torch.bfloat16), "a": torch.arange(7, dtype=torch.int64)}
    tmp_path.joinpath("config.json").write_text("{}")
    save_file(state, tmp_path / "model.safetensors")
    with open_checkpoint(tmp_path) as ckpt:
        assert ckpt.format == "safetensors" and ckpt.config == {}
        assert {t.name: (t.dtype, t.shape, t.file) for t in ckpt} == {
            "a": ("I64", (7,), "model.safetensors"),
            "b": ("BF16", (3, 5), "model.safetensors"),
        }
        assert torch.equal(ckpt.read_tensor("b"), state["b"])
        assert ckpt.read_bytes("a") == state["a"].numpy().tobytes()
        assert ckpt.read_numpy("b").dtype == np.uint16  # raw bf16 bits
        assert len(ckpt.files) == 1 and ckpt.files[0].header_sha256
        with pytest.raises(KeyError, match="no tensor named 'c'"):
            ckpt.info("c")


# -- partition plans ------------------------------------------------------------------------------------


def _info(name: str, shape: tuple[int, ...]) -> TensorInfo:
    return TensorInfo(name, "F32", shape, "model.safetensors", 0, 4 * int(np.prod(shape)))


LLAMA = {"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 2}


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (1, [[(0, 32)]]),
        (2, [[(0, 16)], [(16, 32)]]),  # kv heads >= tp: one KV head each
        (4, [[(0, 16)], [(0, 16)], [(16, 32)], [(16, 32)]]),  # each KV head on the 2 ranks that use it
    ],
)
def test_kv_heads_follow_the_query_heads_that_use_them(tp: int, expected: list[list[tuple[int, int]]]) -> None:
    dims = model_dims(LLAMA, where="m")
    [plan] = plan_partitions(dims, [_info("model.layers.0.self_attn.v_proj.weight", (32, 64))], tp)
    assert [list(r.slices) for r in plan.ranks] == expected
    assert plan.replicas == max(1, tp // 2)
    # Query heads: rank r holds heads [r * 8 / tp, (r + 1) * 8 / tp), whose KV head is head // 4.
    [q] = plan_partitions(dims, [_info("model.layers.0.self_attn.q_proj.weight", (128, 64))], tp)
    for r, rank in enumerate(q.ranks):
        first_q_head = rank.slices[0][0] // 16
        assert plan.ranks[r].slices[0][0] // 16 == first_q_head // 4


def test_vocab_smaller_than_tp_leaves_whole_ranks_of_padding(tmp_path: Path) -> None:
    """Vocab 5 on 8 ranks: ranks 5-7 hold nothing but one padding row each; reassembly drops them."""
    from safetensors.numpy import save_file

    config = {"model_type": "gpt2", "n_head": 8, "n_embd": 16, "vocab_size": 5}
    tmp_path.joinpath("m").mkdir()
    tmp_path.joinpath("m", "config.json").write_text(json.dumps(config))
    wte = np.random.default_rng(0).standard_normal((5, 16)).astype("<f4")
    save_file({"wte.weight": wte, "ln_f.weight": np.ones(16, "<f4")}, tmp_path / "m" / "model.safetensors")
    split_checkpoint(tmp_path / "m", tmp_path / "w", 8)
    with open_split(tmp_path / "w") as split:
        entry = split.tensors["wte.weight"]
        assert entry["padding"] == 3
        assert [(r["slices"], r["pad"]) for r in entry["ranks"]][4:] == [([[4, 5]], 0), ([], 1), ([], 1), ([], 1)]
        assert split.reassemble("wte.weight") == wte.tobytes()
        assert not split.rank_checkpoint(6).read_numpy("wte.weight").any()
    assert check_split(tmp_path / "w").ok


def test_rows_that_tp_does_not_divide_are_refused() -> None:
    dims = model_dims(LLAMA, where="m")
    with pytest.raises(InvalidInputError, match=r"tp=4 does not divide the 90 rows"):
        plan_partitions(dims, [_info("model.layers.0.mlp.gate_proj.weight", (90, 64))], 4)
    with pytest.raises(CheckpointError, match="has shape \\[64\\]; a row-parallel split needs dim 1"):
        plan_partitions(dims, [_info("model.layers.0.mlp.down_proj.weight", (64,))], 2)


# -- small chunks: every streaming path crosses chunk boundaries ---------------------------------------


def test_tiny_chunks_exercise_every_streaming_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import neuronc.checkpoint.check as check_module
    import neuronc.checkpoint.split as split_module

    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=8,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=61,
    )
    torch.manual_seed(2)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / "m")
    # 200 bytes is less than one row of every matrix here (1 row per block); 1000 holds 2-3 rows, so the last
    # block of 64 rows is partial. Both are multiples of every element size and split byte ranges mid-row.
    for chunk, dtype in ((200, None), (1000, None), (1000, "bf16")):
        monkeypatch.setattr(split_module, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(check_module, "CHUNK_BYTES", chunk)
        out = tmp_path / f"w-{chunk}-{dtype}"
        split_checkpoint(tmp_path / "m", out, 4, dtype=dtype)
        target = torch.bfloat16 if dtype else torch.float32
        with open_split(out) as split:
            for name, tensor in model.state_dict().items():
                assert (
                    split.reassemble(name)
                    == tensor.to(target).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                )
        assert check_split(out).ok
