"""Hostile checkpoints against the reader and `neuronc split`: every case is a clean exit 2 naming the file.

Classes (issue 16): lying safetensors headers; huge, negative and overflowing shapes and offsets (the
rule is the safetensors library's own, checked against the installed library); deep or oversized
JSON and lists where strings belong, in config.json, the index and the headers; FIFOs, devices,
sockets and directories where files belong; links out of the model directory, broken links and
loops; names with control characters and non-UTF-8 bytes. Each case runs through the library
(``split_checkpoint``) and through the CLI in a child process (``python -m neuronc split``), which
must exit with the documented code, one error line and no traceback, write one JSON error document
with ``--json``, and leave nothing behind.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _checkpoints import (
    CONFIG,
    INDEX,
    SHARDS,
    ST,
    assert_clean_failure,
    edit_header,
    llama_tensors,
    raw_header,
    run_split_cli,
    tiny_llama,
    tiny_llama_sharded,
    write_safetensors,
)

from neuronc.checkpoint import check_split, open_checkpoint, split_checkpoint
from neuronc.errors import NeuroncError

K = "model.layers.0.self_attn.k_proj.weight"
O_PROJ = "model.layers.0.self_attn.o_proj.weight"
NORM = "model.norm.weight"


def _set(path: Path, name: str, key: str, value: object) -> None:
    edit_header(path, lambda h: h[name].__setitem__(key, value))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _config(model: Path, text: str) -> None:
    (model / "config.json").write_text(text)


def _index(model: Path, data: object) -> None:
    (model / INDEX).write_text(data if isinstance(data, str) else json.dumps(data))


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


def _link(target: str | Path) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def _link_out(path: Path) -> None:
    """A link to a perfectly good copy of the file, outside the model directory."""
    outside = path.parent.parent / f"outside-{path.name}"
    path.rename(outside)
    path.symlink_to(outside)


def _with(build: Callable[[Path], None], *edits: Callable[[Path], object]) -> Callable[[Path], None]:
    def make(model: Path) -> None:
        build(model)
        for edit in edits:
            edit(model)

    return make


# (id, build the model directory, the file the message must name, what it must say)
CASES: list[tuple[str, Callable[[Path], None], str, str]] = [
    # -- safetensors headers: shapes and offsets --------------------------------------------------
    ("shape-2**70", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [2**70, 0])), ST, "integer with 22 digits"),
    (
        "shape-dim-2**64",
        _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [2**64, 0])),
        ST,
        "is refused by the safetensors library: dimension 0 is 18446744073709551616",
    ),
    (
        "shape-product-overflows",
        _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [2**40, 2**40, 0])),
        ST,
        "the product of its dimensions overflows 64 bits at dimension 1",
    ),
    ("shape-negative", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [-1, 16])), ST, "non-negative integers"),
    ("shape-float", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [8.0, 16])), ST, "non-negative integers"),
    ("shape-bool", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [True, 16])), ST, "non-negative integers"),
    ("shape-string", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", "8,16")), ST, "non-negative integers"),
    ("shape-nested", _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [[8], 16])), ST, "non-negative integers"),
    (
        "shape-lies-about-size",
        _with(tiny_llama, lambda m: _set(m / ST, K, "shape", [0, 2**40, 2**40])),
        ST,
        "span 512 bytes, but F32 [0, 1099511627776, 1099511627776] needs 0",
    ),
    (
        "offsets-2**64",
        _with(tiny_llama, lambda m: _set(m / ST, K, "data_offsets", [0, 2**64])),
        ST,
        "are not [begin, end]",
    ),
    (
        "offsets-negative",
        _with(tiny_llama, lambda m: _set(m / ST, K, "data_offsets", [-512, 0])),
        ST,
        "are not [begin, end]",
    ),
    (
        "offsets-reversed",
        _with(tiny_llama, lambda m: _set(m / ST, K, "data_offsets", [1152, 640])),
        ST,
        "are not [begin, end]",
    ),
    (
        "offsets-far-past-the-end",
        _with(tiny_llama, lambda m: _set(m / ST, K, "data_offsets", [2**63, 2**63 + 512])),
        ST,
        "the header lies about offsets",
    ),
    (
        "header-length-2**63",
        _with(tiny_llama, lambda m: (m / ST).write_bytes(struct.pack("<Q", 2**63) + b"{}")),
        ST,
        "not plausible",
    ),
    ("header-deep", _with(tiny_llama, lambda m: raw_header(m / ST, _deep(100_000).encode())), ST, "nested more than"),
    (
        "header-deep-inside-an-entry",
        _with(tiny_llama, lambda m: _set(m / ST, K, "shape", json.loads(_deep(60)))),
        ST,
        "non-negative integers",
    ),
    ("header-not-utf8", _with(tiny_llama, lambda m: raw_header(m / ST, b'{"\xff": 1}')), ST, "not UTF-8"),
    ("header-nan", _with(tiny_llama, lambda m: raw_header(m / ST, b'{"a": NaN}')), ST, "NaN is not JSON"),
    ("dtype-list", _with(tiny_llama, lambda m: _set(m / ST, K, "dtype", ["F32"])), ST, 'unknown dtype ["F32"]'),
    (
        "metadata-list",
        _with(tiny_llama, lambda m: edit_header(m / ST, lambda h: h.__setitem__("__metadata__", {"f": ["pt"]}))),
        ST,
        "__metadata__ must map strings to strings",
    ),
    (
        "tensor-name-with-control-characters",
        _with(
            tiny_llama,
            lambda m: write_safetensors(m / ST, {**llama_tensors(), "evil\n\x1b[31mname": np.zeros(2, "<f4")}),
        ),
        ST,
        "e.g. 'evil\\x0a\\x1b[31mname'",
    ),
    # -- index.json -----------------------------------------------------------------------------------
    ("index-deep", _with(tiny_llama_sharded, lambda m: _index(m, _deep(100_000))), INDEX, "nested more than"),
    (
        "index-weight-map-is-a-list",
        _with(tiny_llama_sharded, lambda m: _index(m, {"weight_map": [SHARDS[0]]})),
        INDEX,
        "no 'weight_map' object",
    ),
    (
        "index-file-is-a-list",
        _with(tiny_llama_sharded, lambda m: _index(m, {"weight_map": {K: [SHARDS[0]]}})),
        INDEX,
        f"weight_map entry '{K}': must be a string, got a list",
    ),
    (
        "index-file-with-nul",
        _with(tiny_llama_sharded, lambda m: _index(m, {"weight_map": {K: "a\u0000b.safetensors"}})),
        INDEX,
        "is outside the directory (not a plain file name)",
    ),
    (
        "index-file-in-a-subdirectory",
        _with(tiny_llama_sharded, lambda m: _index(m, {"weight_map": {K: f"sub/{SHARDS[0]}"}})),
        INDEX,
        "is outside the directory (not a plain file name)",
    ),
    (
        "index-file-not-utf8-name",
        _with(tiny_llama_sharded, lambda m: _index(m, '{"weight_map": {"t": "\\udcff.safetensors"}}')),
        "\\xdcff.safetensors",
        "missing shard",
    ),
    (
        "index-absurd-integer",
        _with(tiny_llama_sharded, lambda m: _index(m, '{"metadata": {"total_size": 1' + "0" * 30 + "}}")),
        INDEX,
        "integer with 31 digits",
    ),
    (
        "index-duplicate-key",
        _with(tiny_llama_sharded, lambda m: _index(m, '{"weight_map": {}, "weight_map": {}}')),
        INDEX,
        "duplicate key 'weight_map'",
    ),
    # -- config.json ----------------------------------------------------------------------------------
    ("config-deep", _with(tiny_llama, lambda m: _config(m, _deep(100_000))), "config.json", "nested more than"),
    (
        "config-model-type-list",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "model_type": ["llama"]}))),
        "config.json",
        "field 'model_type': must be a string, got a list",
    ),
    (
        "config-heads-absurd",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "num_attention_heads": 10**30}))),
        "config.json",
        "integer with 31 digits",
    ),
    (
        "config-heads-2**63",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "num_attention_heads": 2**63}))),
        "config.json",
        "field 'num_attention_heads' must be between 1 and 65536",
    ),
    (
        "config-heads-true",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "num_attention_heads": True}))),
        "config.json",
        "field 'num_attention_heads': must be an integer, got true",
    ),
    (
        "config-kv-heads-string",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "num_key_value_heads": "2"}))),
        "config.json",
        "field 'num_key_value_heads': must be an integer",
    ),
    ("config-list", _with(tiny_llama, lambda m: _config(m, "[]")), "config.json", "expected a JSON object"),
    (
        "config-too-large",
        _with(tiny_llama, lambda m: _config(m, json.dumps({**CONFIG, "pad": " " * (5 * 1024 * 1024)}))),
        "config.json",
        "the limit is 4.0 MiB",
    ),
    # -- special files --------------------------------------------------------------------------------
    ("fifo-weights", _with(tiny_llama, lambda m: _replace(m / ST, _fifo)), ST, "is a FIFO, not a regular file"),
    (
        "fifo-config",
        _with(tiny_llama, lambda m: _replace(m / "config.json", _fifo)),
        "config.json",
        "is a FIFO, not a regular file",
    ),
    ("fifo-index", _with(tiny_llama_sharded, lambda m: _replace(m / INDEX, _fifo)), INDEX, "is a FIFO"),
    ("fifo-shard", _with(tiny_llama_sharded, lambda m: _replace(m / SHARDS[1], _fifo)), SHARDS[1], "is a FIFO"),
    ("socket-config", _with(tiny_llama, lambda m: _replace(m / "config.json", _socket)), "config.json", "a socket"),
    ("dir-weights", _with(tiny_llama, lambda m: _replace(m / ST, Path.mkdir)), ST, "is a directory, not a regular"),
    (
        "dev-zero-weights",
        _with(tiny_llama, lambda m: _replace(m / ST, _link("/dev/zero"))),
        ST,
        "is a link to /dev/zero, outside",
    ),
    (
        "dev-zero-config",
        _with(tiny_llama, lambda m: _replace(m / "config.json", _link("/dev/zero"))),
        "config.json",
        "is a link to /dev/zero, outside",
    ),
    # -- links ----------------------------------------------------------------------------------------
    ("link-out-weights", _with(tiny_llama, lambda m: _link_out(m / ST)), ST, "outside"),
    ("link-out-config", _with(tiny_llama, lambda m: _link_out(m / "config.json")), "config.json", "outside"),
    ("link-out-index", _with(tiny_llama_sharded, lambda m: _link_out(m / INDEX)), INDEX, "outside"),
    ("link-out-shard", _with(tiny_llama_sharded, lambda m: _link_out(m / SHARDS[0])), SHARDS[0], "outside"),
    (
        "link-out-through-dotdot",
        _with(tiny_llama, lambda m: _link_out(m / ST), lambda m: _replace(m / ST, _link(f"../outside-{ST}"))),
        ST,
        "outside",
    ),
    ("link-loop", _with(tiny_llama, lambda m: _replace(m / ST, _link(ST))), ST, "is a symbolic link loop"),
    (
        "link-loop-of-two",
        _with(tiny_llama, lambda m: _replace(m / ST, _link("other")), lambda m: (m / "other").symlink_to(ST)),
        ST,
        "is a symbolic link loop",
    ),
    ("link-broken", _with(tiny_llama, lambda m: _replace(m / ST, _link("gone"))), ST, "is a broken symbolic link"),
]
CASE_IDS = [c[0] for c in CASES]


def _cli_args(model: Path, target: Path, *extra: str) -> list[str]:
    return [os.fsdecode(model), "--tp", "2", "--out", os.fsdecode(target), *extra]


@pytest.fixture
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    _, build, where, problem = CASES[CASE_IDS.index(request.param)]
    model = tmp_path / "model"
    build(model)
    yield model, where, problem


@pytest.mark.parametrize("hostile", CASE_IDS, indirect=True)
def test_library_refuses_with_an_error_naming_the_file(hostile: tuple[Path, str, str], tmp_path: Path) -> None:
    model, where, problem = hostile
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(NeuroncError) as caught:
        split_checkpoint(model, tmp_path / "out" / "w", 2)
    assert caught.value.exit_code == 2, caught.value
    message = caught.value.message + " " + " ".join(caught.value.details)
    assert problem in message
    assert f"{model}/{where}" in message or (where == "" and str(model) in message)
    assert "\n" not in caught.value.message and "\x1b" not in caught.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no out/, no staging directory


@pytest.mark.parametrize("hostile", CASE_IDS, indirect=True)
def test_cli_exits_2_with_one_line_and_one_json_document(hostile: tuple[Path, str, str], tmp_path: Path) -> None:
    model, where, problem = hostile
    proc = run_split_cli(*_cli_args(model, tmp_path / "out" / "w", "--json"), timeout=60)
    message = assert_clean_failure(proc, 2, problem)
    assert f"{model}/{where}" in message
    assert not (tmp_path / "out").exists()


def test_non_utf8_directory_name_splits_and_fails_cleanly(tmp_path: Path) -> None:
    """A model directory whose name is not UTF-8: split works; an error about it is valid UTF-8 JSON."""
    model = Path(os.fsdecode(bytes(tmp_path) + b"/m\xffodel"))
    tiny_llama(model)
    result = split_checkpoint(model, tmp_path / "out", 2)
    assert result.tensors == len(llama_tensors()) and check_split(tmp_path / "out").ok
    proc = run_split_cli(*_cli_args(model, Path(os.fsdecode(bytes(tmp_path) + b"/o\xfe")), "--json"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.decode("utf-8"))["model_dir"] == os.fsdecode(model)
    (model / "config.json").unlink()
    proc = run_split_cli(*_cli_args(model, tmp_path / "out2", "--json"), timeout=60)
    message = assert_clean_failure(proc, 2, "no config.json")
    assert "m\\xdcffodel" in message
    assert not (tmp_path / "out2").exists()


def test_links_inside_the_tree_are_followed(tmp_path: Path) -> None:
    """A link that stays inside the model directory is read as the file it points at."""
    model = tmp_path / "model"
    tiny_llama(model)
    (model / "blobs").mkdir()
    (model / ST).rename(model / "blobs" / "weights")
    (model / ST).symlink_to("blobs/weights")
    split_checkpoint(model, tmp_path / "out", 2)
    assert check_split(tmp_path / "out").ok


@pytest.mark.parametrize("seed", [1, 7, 11])
def test_damaged_bin_files_are_checkpoint_errors(tmp_path: Path, seed: int) -> None:
    """Seeded damage to a torch.save file (bytes of its pickle, anywhere, truncation): torch.load and the
    zip reader raise a dozen exception types on such bytes (KeyError, NotImplementedError, AssertionError
    ... were found this way); every one must be a CheckpointError naming the file."""
    import random
    import warnings
    import zipfile

    import torch

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    path = model / "pytorch_model.bin"
    torch.save({name: torch.from_numpy(array) for name, array in llama_tensors().items()}, path)
    good = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        pickle = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    start = pickle.header_offset + 30 + len(pickle.filename)
    rng = random.Random(seed)
    refused = 0
    for _ in range(500):
        data, pick = bytearray(good), rng.random()
        if pick < 0.2:
            data = data[: rng.randrange(len(data))]
        for _ in range(0 if pick < 0.2 else rng.randint(1, 6)):
            data[rng.randrange(start, start + pickle.file_size) if pick < 0.7 else rng.randrange(len(data))] = (
                rng.randrange(256)
            )
        path.write_bytes(bytes(data))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about some of what it unpickles
                open_checkpoint(model).close()
        except NeuroncError as exc:
            assert exc.exit_code == 2 and str(path) in exc.message, exc.message
            refused += 1
    assert refused > 300  # most damage is caught; the rest (bytes inside tensor data) reads as other numbers


def test_a_hugging_face_cache_snapshot_may_link_into_its_blobs(tmp_path: Path) -> None:
    """models--org--name/snapshots/<commit>/ files are links to ../../blobs/: inside the repository folder."""
    repo = tmp_path / "hub" / "models--org--tiny"
    source = tmp_path / "source"
    tiny_llama(source)
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", ST):
        (source / name).rename(repo / "blobs" / f"blob-{name}")
        (snapshot / name).symlink_to(f"../../blobs/blob-{name}")
    split_checkpoint(snapshot, tmp_path / "out", 2)
    assert check_split(tmp_path / "out").ok
    # ... but not out of the repository folder.
    (snapshot / ST).unlink()
    (snapshot / ST).symlink_to(tmp_path / "source" / "nothing")
    with pytest.raises(NeuroncError, match="outside"):
        open_checkpoint(snapshot)


def _edge_shape_model(model: Path, name: str, shape: list[int]) -> None:
    """The tiny Llama with one tensor replaced by an empty one of ``shape`` (no bytes, any size claimed)."""
    tiny_llama(model)
    tensors = {k: v for k, v in llama_tensors().items() if k != name}
    write_safetensors(model / ST, tensors)

    def add(header: dict[str, Any]) -> None:
        end = max(entry["data_offsets"][1] for entry in header.values())
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [end, end]}

    edit_header(model / ST, add)


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        (NORM, [0, 2**40, 2**40]),  # replicated
        (O_PROJ, [2**59, 16, 0]),  # split along dim 1 with 2**59 outer rows of nothing
        (K, [0, 2**63]),  # split along dim 0
    ],
    ids=["replicated", "split-after-a-huge-outer-dim", "split-along-an-empty-dim"],
)
def test_empty_tensors_at_the_edge_of_the_format_split_and_check_at_once(
    tmp_path: Path, name: str, shape: list[int]
) -> None:
    """The safetensors library accepts these shapes (0 elements); so does split, writing rank files the
    library reads back, and neither the split nor --check loops or allocates by the claimed dimensions
    (the child runs with its address space capped at 2 GiB)."""
    from safetensors import safe_open

    model = tmp_path / "model"
    _edge_shape_model(model, name, shape)
    with safe_open(model / ST, "np") as f:
        names = f.keys()
    assert name in names
    limit = 2 * 1024**3
    proc = run_split_cli(*_cli_args(model, tmp_path / "w", "--json"), timeout=60, memory_limit=limit)
    assert proc.returncode == 0, proc.stderr.decode()
    for rank in range(2):
        with safe_open(tmp_path / "w" / f"rank-{rank:03d}-of-002.safetensors", "np") as f:
            names = f.keys()
        assert name in names
    proc = run_split_cli("--check", str(tmp_path / "w"), "--json", timeout=60, memory_limit=limit)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["ok"] is True
