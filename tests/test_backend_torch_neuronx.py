"""torch-neuronx backend: one trace per bucket with compiler args, saved with torch.jit.save."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from sdk_doubles.fixtures import files_under, make_job, make_spec

from neuronc.backends import get_backend
from neuronc.backends.neuron.torch_neuronx import compiler_args, trace_calls
from neuronc.errors import InvalidInputError
from neuronc.profile import load_profile

REPO = Path(__file__).resolve().parent.parent


def test_minilm_profile_traces_each_bucket_with_these_compiler_args() -> None:
    builds = load_profile(REPO / "profiles/minilm-encoder-torch-neuronx.yaml").specs
    assert [b.batch_size for b in builds] == [1, 8]
    spec = builds[1]
    assert compiler_args(spec, {}) == ["--auto-cast=matmult", "--auto-cast-type=bf16", "--target=trn1"]
    plan = get_backend("torch-neuronx").plan(spec)
    assert trace_calls(spec, plan.graphs, {}) == [
        {
            "graph": "enc-b8-s64",
            "example_inputs": {"input_ids": [8, 64], "attention_mask": [8, 64]},
            "compiler_args": ["--auto-cast=matmult", "--auto-cast-type=bf16", "--target=trn1"],
            "file": "enc-b8-s64.pt",
        },
        {
            "graph": "enc-b8-s128",
            "example_inputs": {"input_ids": [8, 128], "attention_mask": [8, 128]},
            "compiler_args": ["--auto-cast=matmult", "--auto-cast-type=bf16", "--target=trn1"],
            "file": "enc-b8-s128.pt",
        },
        {
            "graph": "enc-b8-s256",
            "example_inputs": {"input_ids": [8, 256], "attention_mask": [8, 256]},
            "compiler_args": ["--auto-cast=matmult", "--auto-cast-type=bf16", "--target=trn1"],
            "file": "enc-b8-s256.pt",
        },
    ]
    assert plan.weights_layout.startswith("inlined")


def test_amp_becomes_an_auto_cast_unless_the_flags_choose_one(tmp_path: Path) -> None:
    text = """
    model: {id: org/encoder, task: feature-extraction}
    backend: torch-neuronx
    target: trn2
    amp: fp32
    sequence: {max_length: 128}
    """
    spec = make_spec(text, tmp_path)
    assert compiler_args(spec, {"NEURON_CC_FLAGS": "-O2 --cache_dir=/cache"}) == [
        "-O2",
        "--auto-cast=none",
        "--target=trn2",
    ]


def test_generation_models_trace_the_full_forward_per_context_bucket(tmp_path: Path) -> None:
    spec = make_spec(
        """
        model: {id: org/decoder}
        backend: torch-neuronx
        target: inf2
        sequence: {max_length: 256, context_buckets: [128, 256]}
        """,
        tmp_path,
    )
    plan = get_backend("torch-neuronx").plan(spec)
    assert [g.name for g in plan.graphs] == ["cte-b1-s128", "cte-b1-s256"]
    assert "no KV cache" in plan.notes[0]


def test_bad_options_are_refused(tmp_path: Path) -> None:
    base = """
    model: {id: org/encoder, task: feature-extraction}
    backend: torch-neuronx
    target: inf2
    sequence: {max_length: 128}
    """
    for options, match in (
        ("options: {model_factory: nocolon}", "expected 'module:function', got 'nocolon'"),
        ("options: {inputs: []}", "at least 1 item"),
        ("options: {input: [a]}", "Did you mean 'inputs'"),
    ):
        with pytest.raises(InvalidInputError) as info:
            make_spec(base + options, tmp_path)
        assert match in str(info.value) + " ".join(info.value.details)


def test_encoder_compile_saves_one_loadable_torchscript_per_bucket(
    sdk_doubles: Path,
    tiny_bert: Path,
    tmp_path: Path,
) -> None:
    shutil.copytree(tiny_bert, tmp_path / "bert")
    spec = make_spec(
        """
        model: {id: ./bert, task: feature-extraction}
        backend: torch-neuronx
        target: inf2
        batch_size: 2
        sequence: {max_length: 32, context_buckets: [16, 32]}
        compiler: {flags: ["--optlevel=1"]}
        """,
        tmp_path,
    )
    job = make_job(spec, tmp_path / "bert", tmp_path)
    result = get_backend("torch-neuronx").compile(job)
    assert files_under(job.artifacts_dir) == ["enc-b2-s16.pt", "enc-b2-s32.pt", "torch_neuronx.json"]
    assert [g.artifact for g in result.graphs] == ["artifacts/enc-b2-s16.pt", "artifacts/enc-b2-s32.pt"]
    index = json.loads((job.artifacts_dir / "torch_neuronx.json").read_text())
    assert index["graphs"][1] == {"name": "enc-b2-s32", "file": "enc-b2-s32.pt", "batch": 2, "sequence": 32}
    log = (job.logs_dir / "neuronx-cc/enc-b2-s32/log-neuron-cc.txt").read_text()
    assert "--optlevel=1 --auto-cast=matmult --auto-cast-type=bf16 --target=trn1" in log
    # Flags reach trace as compiler_args only; NEURON_CC_FLAGS keeps just cache-location flags.
    assert "NEURON_CC_FLAGS=\n" in (job.logs_dir / "compile.log").read_text()
    traced = torch.jit.load(str(job.artifacts_dir / "enc-b2-s16.pt"))
    ids = torch.zeros((2, 16), dtype=torch.long)
    hidden = traced(ids, torch.ones_like(ids))[0]
    assert hidden.shape == (2, 16, 16)
    assert result.extra["torch_neuronx"]["cpu_backend"] is True


def test_custom_model_factory(sdk_doubles: Path, tmp_path: Path) -> None:
    (tmp_path / "mymodels.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Scorer(torch.nn.Module):
                def forward(self, tokens):
                    return (tokens.float() * 2).sum(dim=1)

            def build(checkpoint_dir):
                return Scorer()
            """
        )
    )
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt/config.json").write_text("{}")
    spec = make_spec(
        """
        model: {id: ./ckpt, task: text-classification}
        backend: torch-neuronx
        target: trn1
        amp: fp32
        sequence: {max_length: 8}
        options: {model_factory: "mymodels:build", inputs: [tokens]}
        """,
        tmp_path,
    )
    # Only the compile's child process imports the factory module (the job's env reaches it).
    job = make_job(spec, tmp_path / "ckpt", tmp_path, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ['PYTHONPATH']}")
    get_backend("torch-neuronx").compile(job)
    traced = torch.jit.load(str(job.artifacts_dir / "enc-b1-s8.pt"))
    assert traced(torch.ones((1, 8), dtype=torch.long)).item() == 16.0


def test_tp_is_one_core_and_weights_are_inlined() -> None:
    backend = get_backend("torch-neuronx")
    assert backend.rules.supported_tp_degrees("inf2", {}) == frozenset({1})
    assert backend.rules.weights_modes == frozenset({"presharded"})
