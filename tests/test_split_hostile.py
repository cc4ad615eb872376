"""Hostile checkpoints: each broken input is rejected with exit 2 and a message naming the file and the problem.

No traceback, and nothing left behind: neither --out nor a hidden staging directory next to it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _checkpoints import (
    CONFIG,
    SHAPES,
    ST,
    edit_header,
    llama_tensors,
    raw_header,
    tiny_llama,
    tiny_llama_sharded,
    write_safetensors,
)
from click.testing import CliRunner

from neuronc._output import out
from neuronc.checkpoint import split_checkpoint
from neuronc.cli import app


def _set(path: Path, name: str, key: str, value: object) -> None:
    edit_header(path, lambda h: h[name].__setitem__(key, value))


class Evil:
    """Not a tensor: unpickling it needs the full pickle machinery."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("this would run on load",))


def _seq(*steps: object) -> None:
    """Lets a one-line case build a directory in several steps (the steps ran as arguments)."""


def _bin(model: Path, payload: Callable[[], object]) -> None:
    import torch

    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    torch.save(payload(), model / "pytorch_model.bin")


def _bin_state() -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(array) for name, array in llama_tensors().items()}


K, V = "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"
FIRST, LAST = "model.embed_tokens.weight", "lm_head.weight"

# (id, build the broken model dir, the file the message must name, the problem it must state)
CASES: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("truncated", lambda m: _seq(tiny_llama(m), (m / ST).write_bytes((m / ST).read_bytes()[:-10])), ST, "truncated"),
    ("too-short", lambda m: _seq(tiny_llama(m), (m / ST).write_bytes(b"\x01\x02\x03")), ST, "too short"),
    (
        "header-past-eof",
        lambda m: _seq(tiny_llama(m), (m / ST).write_bytes(struct.pack("<Q", 10**6) + b"{}")),
        ST,
        "the header claims 1000000 bytes",
    ),
    (
        "header-length-absurd",
        lambda m: _seq(tiny_llama(m), (m / ST).write_bytes(struct.pack("<Q", 2**50) + b"{}")),
        ST,
        "not plausible",
    ),
    ("header-not-json", lambda m: _seq(tiny_llama(m), raw_header(m / ST, b"{not json")), ST, "not valid JSON"),
    ("header-not-object", lambda m: _seq(tiny_llama(m), raw_header(m / ST, b"[1, 2]")), ST, "not a JSON object"),
    (
        "duplicate-key",
        lambda m: _seq(tiny_llama(m), raw_header(m / ST, b'{"a": {}, "a": {}}')),
        ST,
        "duplicate key 'a'",
    ),
    ("unknown-dtype", lambda m: _seq(tiny_llama(m), _set(m / ST, K, "dtype", "Q4")), ST, "unknown dtype 'Q4'"),
    (
        "missing-keys",
        lambda m: _seq(tiny_llama(m), edit_header(m / ST, lambda h: h[K].pop("data_offsets"))),
        ST,
        "exactly dtype, shape and data_offsets",
    ),
    ("negative-dim", lambda m: _seq(tiny_llama(m), _set(m / ST, K, "shape", [-8, 16])), ST, "non-negative integers"),
    (
        "offsets-disagree-with-shape",
        lambda m: _seq(tiny_llama(m), _set(m / ST, K, "shape", [9, 16])),
        ST,
        "span 512 bytes, but F32 [9, 16] needs 576",
    ),
    (
        "overlap",
        lambda m: _seq(
            tiny_llama(m), edit_header(m / ST, lambda h: h[V].__setitem__("data_offsets", h[K]["data_offsets"]))
        ),
        ST,
        "overlap",
    ),
    (
        "offsets-past-end",
        lambda m: _seq(
            tiny_llama(m),
            edit_header(
                m / ST, lambda h: h[LAST].__setitem__("data_offsets", [o + 4096 for o in h[LAST]["data_offsets"]])
            ),
        ),
        ST,
        "the header lies about offsets",
    ),
    (
        "trailing-bytes",
        lambda m: _seq(tiny_llama(m), (m / ST).write_bytes((m / ST).read_bytes() + b"\0" * 16)),
        ST,
        "16 unaccounted bytes after the last tensor",
    ),
    (
        "metadata-not-strings",
        lambda m: _seq(tiny_llama(m), edit_header(m / ST, lambda h: h.__setitem__("__metadata__", {"a": 1}))),
        ST,
        "__metadata__ must map strings to strings",
    ),
    (
        "missing-shard",
        lambda m: _seq(tiny_llama_sharded(m), (m / "model-00002-of-00002.safetensors").unlink()),
        "model-00002-of-00002.safetensors",
        "missing shard",
    ),
    (
        "truncated-shard",
        lambda m: _seq(
            tiny_llama_sharded(m),
            (m / "model-00002-of-00002.safetensors").write_bytes(
                (m / "model-00002-of-00002.safetensors").read_bytes()[:100]
            ),
        ),
        "model-00002-of-00002.safetensors",
        "truncated",
    ),
    (
        "index-without-weight-map",
        lambda m: _seq(tiny_llama_sharded(m), (m / "model.safetensors.index.json").write_text('{"metadata": {}}')),
        "model.safetensors.index.json",
        "no 'weight_map'",
    ),
    (
        "index-not-json",
        lambda m: _seq(tiny_llama_sharded(m), (m / "model.safetensors.index.json").write_text("{")),
        "model.safetensors.index.json",
        "not valid JSON",
    ),
    (
        "index-path-traversal",
        lambda m: _seq(
            tiny_llama_sharded(m),
            (m / "model.safetensors.index.json").write_text(
                json.dumps({"weight_map": {FIRST: "../model.safetensors"}})
            ),
        ),
        "model.safetensors.index.json",
        "is outside the directory",
    ),
    (
        "index-lies-about-placement",
        lambda m: _seq(
            tiny_llama_sharded(m),
            (m / "model.safetensors.index.json").write_text(
                json.dumps({"weight_map": {LAST: "model-00001-of-00002.safetensors"}})
            ),
        ),
        "model-00001-of-00002.safetensors",
        "has no tensor 'lm_head.weight'",
    ),
    (
        "bin-needs-unpickling",
        lambda m: _bin(m, lambda: {**_bin_state(), "extra": Evil()}),
        "pytorch_model.bin",
        "refused: loading it would need full unpickling",
    ),
    (
        "bin-truncated",
        lambda m: _seq(
            _bin(m, _bin_state),
            (m / "pytorch_model.bin").write_bytes((m / "pytorch_model.bin").read_bytes()[:300]),
        ),
        "pytorch_model.bin",
        "not a readable PyTorch checkpoint",
    ),
    (
        "bin-not-a-state-dict",
        lambda m: _bin(m, lambda: {"model": _bin_state()}),
        "pytorch_model.bin",
        "not a flat state dict of tensors",
    ),
    (
        "no-weights",
        lambda m: _seq(m.mkdir(), (m / "config.json").write_text(json.dumps(CONFIG))),
        "",
        "no checkpoint found",
    ),
    ("no-config", lambda m: _seq(tiny_llama(m), (m / "config.json").unlink()), "", "no config.json"),
    (
        "config-not-json",
        lambda m: _seq(tiny_llama(m), (m / "config.json").write_text("{")),
        "config.json",
        "not valid JSON",
    ),
    (
        "unknown-architecture",
        lambda m: _seq(tiny_llama(m), (m / "config.json").write_text(json.dumps({**CONFIG, "model_type": "bert"}))),
        "",
        "cannot split architecture 'bert'",
    ),
    (
        "tensor-without-rule",
        lambda m: _seq(
            m.mkdir(),
            (m / "config.json").write_text(json.dumps(CONFIG)),
            write_safetensors(
                m / ST, {**llama_tensors(), "model.layers.0.mlp.extra_proj.weight": np.zeros((4, 4), "<f4")}
            ),
        ),
        ST,
        "1 tensor matches no llama partition rule, e.g. 'model.layers.0.mlp.extra_proj.weight'",
    ),
    (
        "shape-disagrees-with-config",
        lambda m: _seq(
            tiny_llama(m),
            (m / "config.json").write_text(json.dumps({**CONFIG, "num_attention_heads": 3, "num_key_value_heads": 1})),
        ),
        ST,
        "not a multiple of 3 heads from config.json",
    ),
]


@pytest.mark.parametrize(("build", "where", "problem"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_checkpoint_exits_2_naming_file_and_problem(
    runner: CliRunner, tmp_path: Path, build: Callable[[Path], None], where: str, problem: str
) -> None:
    model = tmp_path / "model"
    build(model)
    target = tmp_path / "out" / "weights"
    out.reset()
    result = runner.invoke(
        app, ["split", str(model), "--tp", "2" if "3 heads" not in problem else "1", "--out", str(target)]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    message = result.output.replace("\n", " ")
    assert problem in message
    assert str(model / where) in message
    assert not target.exists()
    leftovers = list((tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else []
    assert leftovers == []


def test_hostile_errors_in_json_mode_are_machine_readable(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "model"
    tiny_llama(model)
    _set(model / ST, K, "dtype", "Q4")
    out.reset()
    result = runner.invoke(app, ["split", str(model), "--tp", "2", "--out", str(tmp_path / "w"), "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert (error["error"], error["exit_code"]) == ("checkpoint_invalid", 2)
    assert str(model / ST) in error["message"]


def test_unknown_architecture_lists_the_supported_ones(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "model"
    tiny_llama(model)
    (model / "config.json").write_text(json.dumps({**CONFIG, "model_type": "bert"}))
    out.reset()
    result = runner.invoke(app, ["split", str(model), "--tp", "2", "--out", str(tmp_path / "w")])
    assert result.exit_code == 2
    assert "gpt2, gpt_neox, llama, mistral, mixtral, opt, phi3, qwen2, qwen3" in result.output


def test_interrupted_split_leaves_nothing_behind(tmp_path: Path) -> None:
    """A failure in the middle of streaming (here: Ctrl-C from the progress callback) removes the staging directory."""
    model = tmp_path / "model"
    tiny_llama_sharded(model)

    class Interrupting:
        def __init__(self) -> None:
            self.seen = 0.0

        def advance(self, amount: float = 1) -> None:
            self.seen += amount
            if self.seen > 4096:
                raise KeyboardInterrupt

        def update(self, *, completed: float | None = None, description: str | None = None) -> None:
            pass

        def done(self, status: str | None = None) -> None:
            pass

    class Sink:
        def task(self, description: str, total: float | None = None, unit: str = "") -> Interrupting:
            return Interrupting()

    (tmp_path / "out").mkdir()
    with pytest.raises(KeyboardInterrupt):
        split_checkpoint(model, tmp_path / "out" / "w", 2, progress=Sink())
    assert list((tmp_path / "out").iterdir()) == []
    # The same input splits cleanly afterwards.
    assert split_checkpoint(model, tmp_path / "out" / "w", 2).tensors == len(SHAPES)


def test_sharded_input_built_here_splits(tmp_path: Path) -> None:
    """Sanity check of the corpus's base: unbroken, it splits and checks clean."""
    from neuronc.checkpoint import check_split

    for build in (tiny_llama, tiny_llama_sharded):
        model = tmp_path / build.__name__
        build(model)
        split_checkpoint(model, tmp_path / f"{build.__name__}-w", 2)
        assert check_split(tmp_path / f"{build.__name__}-w").ok


def test_an_index_larger_than_jsons_default_limit_but_within_its_own_splits(tmp_path: Path) -> None:
    """model.safetensors.index.json may be up to 64 MiB (the reader's limit), not the 16 MiB default."""
    model = tmp_path / "model"
    tiny_llama_sharded(model)
    index_path = model / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["padding"] = "x" * (17 * 1024 * 1024)  # an index this size has ~250k tensors
    index_path.write_text(json.dumps(index))
    assert split_checkpoint(model, tmp_path / "w", 2).tensors == len(SHAPES)
