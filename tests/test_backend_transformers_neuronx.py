"""transformers-neuronx backend: from_pretrained mapping, split checkpoint, compile and reload via the doubles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from sdk_doubles.fixtures import files_under, make_job, make_spec

from neuronc.backends import get_backend
from neuronc.backends.neuron.transformers_neuronx import (
    from_pretrained_kwargs,
    model_class_for,
    sanitize_file_name,
    write_split_checkpoint,
)
from neuronc.errors import InvalidInputError
from neuronc.profile import load_profile

REPO = Path(__file__).resolve().parent.parent


def test_torchserve_llama2_13b_profile_maps_to_these_kwargs() -> None:
    (spec,) = load_profile(REPO / "profiles/llama2-13b-tnx-inf2-tp12.yaml").specs
    assert from_pretrained_kwargs(spec) == {
        "batch_size": 4,
        "tp_degree": 12,
        "amp": "bf16",
        "n_positions": [1024, 2048],
        "context_length_estimate": [512, 1024, 2048],
    }
    plan = get_backend("transformers-neuronx").plan(spec)
    assert [g.name for g in plan.graphs] == [
        "cte-b4-s512",
        "cte-b4-s1024",
        "cte-b4-s2048",
        "tkg-b4-s1024",
        "tkg-b4-s2048",
    ]


def test_opt_6_7b_profile_maps_to_these_kwargs() -> None:
    (spec,) = load_profile(REPO / "profiles/opt-6.7b-tnx-inf2-tp2.yaml").specs
    assert from_pretrained_kwargs(spec) == {
        "batch_size": 1,
        "tp_degree": 2,
        "amp": "f16",
        "n_positions": [2048],
        "context_length_estimate": [128, 512, 2048],
    }


def test_model_classes() -> None:
    assert model_class_for("llama") == "LlamaForSampling"
    assert model_class_for("opt") == "OPTForSampling"
    assert model_class_for("gpt2") == "GPT2ForSamplingWithContextBroadcasting"
    with pytest.raises(InvalidInputError, match="qwen3"):
        model_class_for("qwen3")


def test_sanitized_tensor_file_names() -> None:
    assert sanitize_file_name("model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert sanitize_file_name(" a b/c:d ") == "a_bcd"
    with pytest.raises(InvalidInputError):
        sanitize_file_name("..")


def test_split_checkpoint_streams_every_tensor_cast_to_the_amp_dtype(tiny_llama: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    table = write_split_checkpoint(tiny_llama, tmp_path, "float16")
    original = load_file(str(tiny_llama / "model.safetensors"))
    assert set(table) == set(original)
    on_disk = json.loads((tmp_path / "pytorch_model.bin/key_to_filename.json").read_text())
    assert on_disk == table
    for index, (key, name) in enumerate(table.items()):
        assert name == f"p{index}.{key}"
        tensor = torch.load(tmp_path / "pytorch_model.bin" / name, weights_only=True)
        assert tensor.dtype == torch.float16
        torch.testing.assert_close(tensor, original[key].to(torch.float16))


@pytest.mark.parametrize("weights", ["presharded", "on-load", "reference"])
def test_compile_saves_neffs_and_the_bundle_reloads_with_the_snippet_kwargs(
    sdk_doubles: Path,
    tiny_opt: Path,
    tmp_path: Path,
    weights: str,
) -> None:
    shutil.copytree(tiny_opt, tmp_path / "opt")
    spec = make_spec(
        f"""
        model: {{id: ./opt}}
        backend: transformers-neuronx
        target: inf2
        tp_degree: 2
        amp: fp16
        sequence: {{max_length: 256, context_buckets: [64, 128], token_buckets: [128, 256]}}
        weights: {weights}
        """,
        tmp_path,
    )
    job = make_job(spec, tmp_path / "opt", tmp_path)
    result = get_backend("transformers-neuronx").compile(job)
    files = files_under(job.artifacts_dir)
    neffs = [f for f in files if f.startswith("neff/")]
    assert len(neffs) == 4  # two context and two token kernels
    assert all(len(Path(f).stem) == 20 for f in neffs)
    if weights == "presharded":
        assert "checkpoint/pytorch_model.bin/key_to_filename.json" in files
        assert "checkpoint/config.json" in files
    elif weights == "on-load":
        assert "checkpoint/model.safetensors" in files
    else:
        assert not any(f.startswith("checkpoint/") for f in files)
    info = result.extra["transformers_neuronx"]
    assert info["from_pretrained"]["amp"] == "f16"
    assert {g.artifact for g in result.graphs} == {"artifacts/neff"}

    # Reload as the snippet says: same kwargs, load(neff dir), to_neuron() finds every NEFF.
    import transformers_neuronx

    source = job.artifacts_dir / "checkpoint" if weights != "reference" else tmp_path / "opt"
    model = transformers_neuronx.OPTForSampling.from_pretrained(str(source), **info["from_pretrained"])
    model.load(str(job.artifacts_dir / "neff"))
    model.to_neuron()
    # Other kwargs hash to other NEFFs: the reload fails the way the real library does.
    other = transformers_neuronx.OPTForSampling.from_pretrained(
        str(source), **{**info["from_pretrained"], "batch_size": 2}
    )
    other.load(str(job.artifacts_dir / "neff"))
    with pytest.raises(FileNotFoundError, match="Could not find a matching NEFF"):
        other.to_neuron()


def test_neuron_config_option_reaches_the_model_and_the_snippet(
    sdk_doubles: Path,
    tiny_llama: Path,
    tmp_path: Path,
) -> None:
    shutil.copytree(tiny_llama, tmp_path / "llama")
    spec = make_spec(
        """
        model: {id: ./llama}
        backend: transformers-neuronx
        target: trn1
        tp_degree: 2
        sequence: {max_length: 256}
        weights: on-load
        options: {neuron_config: {fuse_qkv: true}}
        """,
        tmp_path,
    )
    result = get_backend("transformers-neuronx").compile(make_job(spec, tmp_path / "llama", tmp_path))
    snippet = result.extra["load_snippet"]
    assert "from transformers_neuronx import LlamaForSampling, NeuronConfig" in snippet
    assert "neuron_config=NeuronConfig(**{'fuse_qkv': True})" in snippet
    compile(snippet, "<snippet>", "exec")


def test_profile_fields_cannot_be_overridden_through_options(tiny_llama: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_llama, tmp_path / "llama")
    with pytest.raises(InvalidInputError) as info:
        make_spec(
            """
            model: {id: ./llama}
            backend: transformers-neuronx
            target: inf2
            tp_degree: 2
            sequence: {max_length: 256}
            options: {from_pretrained: {amp: f32}}
            """,
            tmp_path,
        )
    assert "amp" in "\n".join(info.value.details)


def test_any_tp_up_to_the_core_count_and_no_trn2() -> None:
    backend = get_backend("transformers-neuronx")
    assert 12 in (backend.rules.supported_tp_degrees("inf2", {}) or ())
    assert 25 not in (backend.rules.supported_tp_degrees("inf2", {}) or ())
    assert "trn2" not in backend.targets


def test_profile_flags_reach_neuronx_cc_through_neuron_cc_flags_with_cpu_compile_off_device(
    sdk_doubles: Path,
    tiny_llama: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shutil.copytree(tiny_llama, tmp_path / "llama")
    spec = make_spec(
        """
        model: {id: ./llama}
        backend: transformers-neuronx
        target: inf2
        tp_degree: 2
        sequence: {max_length: 256}
        weights: on-load
        compiler: {flags: ["--enable-saturate-infinity"]}
        """,
        tmp_path,
    )
    monkeypatch.setenv("NEURON_CC_FLAGS", "-O2 --cache_dir=/tmp/cache")
    job = make_job(spec, tmp_path / "llama", tmp_path)
    result = get_backend("transformers-neuronx").compile(job)
    assert result.extra["neuron_env"]["NEURON_CC_FLAGS"] == "--enable-saturate-infinity -O2 --cache_dir=/tmp/cache"
    logs = list((job.logs_dir / "neuronx-cc").rglob("log-neuron-cc.txt"))
    # No Neuron device here: cpu_compile() compiled every kernel, with the profile's flags.
    assert len(logs) == 2
    assert all("--enable-saturate-infinity -O2" in log.read_text() for log in logs)


def test_options_are_checked_at_validate_time(tmp_path: Path) -> None:
    base = (
        "model: {id: org/m}\nbackend: transformers-neuronx\ntarget: inf2\ntp_degree: 2\nsequence: {max_length: 256}\n"
    )
    with pytest.raises(InvalidInputError) as info:
        make_spec(base + "options: {neuron_config: {fuse_qvk: true}}\n", tmp_path)
    assert "unknown key 'fuse_qvk'. Did you mean 'fuse_qkv'?" in info.value.details[0]
    with pytest.raises(InvalidInputError) as info:
        make_spec(base + "options: {from_pretrained: {n_positions: 512}}\n", tmp_path)
    assert (
        "options.from_pretrained.n_positions: set by neuronc from the profile's sequence.token_buckets"
        in (info.value.details[0])
    )


@pytest.mark.parametrize("model_type", ["gptj", "gpt_neox"])
def test_classes_that_cannot_save_their_kernels_are_refused(tiny_llama: Path, tmp_path: Path, model_type: str) -> None:
    shutil.copytree(tiny_llama, tmp_path / "model")
    config = json.loads((tmp_path / "model/config.json").read_text())
    (tmp_path / "model/config.json").write_text(json.dumps({**config, "model_type": model_type}))
    base = (
        "model: {id: ./model}\nbackend: transformers-neuronx\ntarget: inf2\ntp_degree: 2\nsequence: {max_length: 256}\n"
    )
    with pytest.raises(InvalidInputError) as info:
        make_spec(base, tmp_path)
    assert "has no save()/load()" in info.value.details[0]
