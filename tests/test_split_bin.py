"""pytorch_model.bin inputs are read from the file at located offsets, like safetensors; torch reads what cannot be placed.

Files are written by the real torch.save / save_pretrained; nothing is mocked.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import save_pytorch_bin

from neuronc.checkpoint import check_split, open_checkpoint, open_split, split_checkpoint
from neuronc.checkpoint._torchzip import locate_tensors

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _raw(tensor: Any) -> bytes:
    return bytes(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _file_bytes(path: Path, offset: int, nbytes: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(nbytes)


@pytest.fixture(scope="module")
def llama_bin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=8,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=61,
        max_position_embeddings=32,
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    src = tmp_path_factory.mktemp("bin") / "llama"
    save_pytorch_bin(model, src)
    assert (src / "pytorch_model.bin").is_file()
    return src, {k: v.clone() for k, v in model.state_dict().items()}


def test_every_tensor_of_a_saved_model_is_placed_in_the_file(llama_bin: tuple[Path, dict[str, Any]]) -> None:
    src, state = llama_bin
    with open_checkpoint(src) as ckpt:
        assert ckpt.format == "pytorch"
        for info in ckpt:
            assert info.offset is not None, info.name
            assert ckpt.source_fd(info) is not None
            expected = _raw(state[info.name])
            assert _file_bytes(src / info.file, info.offset, info.nbytes) == expected, info.name
            assert ckpt.read_bytes(info.name) == expected, info.name


@pytest.mark.parametrize("hash", [False, True], ids=["kernel-copy", "hashed"])
def test_bin_split_round_trips(llama_bin: tuple[Path, dict[str, Any]], tmp_path: Path, hash: bool) -> None:
    src, state = llama_bin
    split_checkpoint(src, tmp_path / "w", 4, hash=hash)
    with open_split(tmp_path / "w") as split:
        for name in split.tensors:
            assert split.reassemble(name) == _raw(state[name]), name
    assert check_split(tmp_path / "w").ok


def test_strided_tensors_and_views_are_read_correctly(tmp_path: Path) -> None:
    """A transposed tensor cannot be placed (torch reads it); a contiguous view into a larger storage can."""
    base = torch.arange(48, dtype=torch.float32)
    state = {
        "whole": base,
        "view": base[8:20],  # same storage, starts 32 bytes in
        "transposed": torch.arange(12, dtype=torch.int64).reshape(3, 4).T,
        "empty": torch.zeros(0, dtype=torch.float16),
        "bf16": torch.randn(5, 7).to(torch.bfloat16),
    }
    (tmp_path / "m").mkdir()
    path = tmp_path / "m" / "pytorch_model.bin"
    torch.save(state, path)
    with open_checkpoint(tmp_path / "m") as ckpt:
        offsets = {info.name: info.offset for info in ckpt}
        assert offsets["transposed"] is None
        assert offsets["empty"] == 0
        assert offsets["view"] == offsets["whole"] + 8 * 4  # type: ignore[operator]
        for name, tensor in state.items():
            assert ckpt.read_bytes(name) == _raw(tensor), name
            assert torch.equal(ckpt.read_tensor(name), tensor.contiguous()), name


def test_legacy_format_is_read_through_torch(tmp_path: Path) -> None:
    state = {"a": torch.randn(4, 4), "b": torch.arange(6, dtype=torch.int32)}
    (tmp_path / "m").mkdir()
    torch.save(state, tmp_path / "m" / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    with open_checkpoint(tmp_path / "m") as ckpt:
        assert all(info.offset is None for info in ckpt)
        for name, tensor in state.items():
            assert ckpt.read_bytes(name) == _raw(tensor)


def test_big_endian_file_is_not_placed(tmp_path: Path) -> None:
    """A file whose byteorder record says "big" holds swapped bytes: reading it raw would be wrong."""
    path = tmp_path / "pytorch_model.bin"
    torch.save({"a": torch.arange(8, dtype=torch.int32), "b": torch.ones(3)}, path)
    rewritten = io.BytesIO()
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            data = b"big" if info.filename.endswith("/byteorder") else old.read(info)
            new.writestr(info, data)
    path.write_bytes(rewritten.getvalue())
    state = torch.load(path, mmap=True, weights_only=True)
    assert locate_tensors(path, state) == {}


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "in-memory"])
def test_located_offsets_always_hold_the_tensor_bytes(llama_bin: tuple[Path, dict[str, Any]], mmap: bool) -> None:
    """Whatever torch.load did with the storages, an offset is only given where the file holds those bytes."""
    src, _ = llama_bin
    path = src / "pytorch_model.bin"
    loaded = torch.load(path, mmap=mmap, weights_only=True)
    offsets = locate_tensors(path, loaded)
    if mmap:
        assert set(offsets) == set(loaded)
    for name, offset in offsets.items():
        expected = _raw(loaded[name])
        assert _file_bytes(path, offset, len(expected)) == expected, name


def test_split_of_a_bin_reads_no_tensor_through_torch(
    llama_bin: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once placed, the reader never loads the state dict again: the bytes come from the file by offset."""
    from neuronc.checkpoint import reader

    src, _ = llama_bin
    loads: list[Path] = []
    real = reader.load_bin

    def counting(path: Path, *, display: str) -> dict[str, Any]:
        loads.append(path)
        return real(path, display=display)

    monkeypatch.setattr(reader, "load_bin", counting)
    split_checkpoint(src, tmp_path / "w", 2, hash=False)
    assert loads == [src / "pytorch_model.bin"]  # once, while opening; no second load to read bytes
    assert check_split(tmp_path / "w").ok
