"""optimum-neuron backend: get_neuron_config arguments, NxDNeuronConfig fields, plan, export through the doubles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sdk_doubles.fixtures import files_under, make_job, make_spec

from neuronc.backends import get_backend
from neuronc.backends.neuron.optimum_fields import NXD_NEURON_CONFIG_PARAMETERS, OptimumNeuronConfig
from neuronc.backends.neuron.optimum_neuron import (
    export_command,
    get_neuron_config_arguments,
    neuron_config_kwargs,
    reproduce_snippet,
)
from neuronc.errors import ProfileError
from neuronc.profile import load_profile

REPO = Path(__file__).resolve().parent.parent

PROFILE = """
model: {{id: {model}}}
backend: optimum-neuron
target: inf2
tp_degree: 2
batch_size: 4
amp: bf16
sequence: {{max_length: 256, max_context_length: 128}}
weights: {weights}
"""


def test_tgi_profile_maps_to_these_arguments_and_neuron_config() -> None:
    (spec,) = load_profile(REPO / "profiles/llama3.1-8b-optimum-neuron-tgi.yaml").specs
    assert get_neuron_config_arguments(spec) == {
        "instance_type": "inf2",
        "batch_size": 8,
        "sequence_length": 16512,
        "tensor_parallel_size": 8,
    }
    assert neuron_config_kwargs(spec) == {
        "checkpoint_id": "meta-llama/Meta-Llama-3.1-8B",
        "checkpoint_revision": None,
        "batch_size": 8,
        "sequence_length": 16512,
        "max_context_length": 16512,
        "tp_degree": 8,
        "torch_dtype": "bfloat16",
        "target": "trn1",
    }
    plan = get_backend("optimum-neuron").plan(spec)
    # Continuous batching (batch > 1): context encoding runs one sequence at a time.
    assert [g.name for g in plan.graphs] == ["cte-b1-s16512", "tkg-b8-s16512"]


def test_the_cli_command_says_what_it_cannot_reproduce() -> None:
    (spec,) = load_profile(REPO / "profiles/llama3.1-8b-optimum-neuron-tgi.yaml").specs
    command, cannot = export_command(spec, "out", "bfloat16")
    assert command == (
        "optimum-cli export neuron -m meta-llama/Meta-Llama-3.1-8B --task text-generation --instance_type inf2 "
        "--batch_size 8 --sequence_length 16512 --tensor_parallel_size 8 out"
    )
    # The shipped profile bundles the checkpoint's safetensors (on-load): the CLI would pre-shard.
    assert cannot == ["weights: on-load: the CLI saves a local checkpoint's weights pre-sharded (checkpoint/weights/)"]
    # A dtype other than the config's, a shorter context and an override: each one said.
    other = spec.model_copy(
        update={
            "amp": "fp16",
            "weights": "presharded",
            "sequence": spec.sequence.model_copy(update={"max_context_length": 4096}),
            "options": {"neuron_config": {"on_device_sampling": False}},
        }
    )
    _, cannot = export_command(other, "out", "bfloat16")
    assert cannot == [
        "dtype float16: the CLI takes the dtype from the model's config.json (bfloat16)",
        "max_context_length 4096: the CLI encodes context at the sequence length (16512)",
        "neuron_config.on_device_sampling: the CLI sets no NxDNeuronConfig field beyond its shape arguments",
    ]
    snippet = reproduce_snippet(other, "out")
    assert "config.dtype = torch.float16" in snippet
    assert "'max_context_length': 4096" in snippet and "'on_device_sampling': False" in snippet
    compile(snippet, "<snippet>", "exec")


def test_the_options_model_is_the_recorded_constructor() -> None:
    assert list(OptimumNeuronConfig.model_fields) == [name for name, _ in NXD_NEURON_CONFIG_PARAMETERS]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("{neuron_config: {on_device_sampeling: false}}", "unknown key 'on_device_sampeling'. Did you mean "),
        ("{neuron_config: {tp_degree: 4}}", "options.neuron_config.tp_degree: set by neuronc from the profile's"),
        ("{neuron_config: {speculation_length: 4}}", "speculative decoding needs on_device_sampling: false"),
        ("{neuron_config: {fused_qkv: maybe}}", "options.neuron_config.fused_qkv"),
    ],
)
def test_neuron_config_keys_are_checked_against_the_constructor(tmp_path: Path, options: str, expected: str) -> None:
    text = PROFILE.format(model="org/model", weights="on-load") + f"options: {options}\n"
    with pytest.raises(ProfileError) as info:
        make_spec(text, tmp_path)
    [problem] = info.value.details
    assert expected in problem
    assert ":10:" in problem


def test_bucket_lists_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        make_spec(
            """
        model: {id: org/model}
        backend: optimum-neuron
        target: trn1
        tp_degree: 2
        sequence: {max_length: 256, context_buckets: [128, 256]}
        """,
            tmp_path,
        )
    [problem] = info.value.details
    assert "sequence.context_buckets: optimum-neuron compiles one graph" in problem


def test_reference_weights_need_a_hub_model(tiny_llama: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_llama, tmp_path / "llama")
    with pytest.raises(ProfileError) as info:
        make_spec(PROFILE.format(model="./llama", weights="reference"), tmp_path)
    assert "weights: reference needs a Hub model" in "\n".join(info.value.details)


def test_trn2_is_its_own_target_and_batch_1_has_no_continuous_batching(tmp_path: Path) -> None:
    spec = make_spec(
        """
        model: {id: org/model}
        backend: optimum-neuron
        target: trn2
        tp_degree: 4
        sequence: {max_length: 1024}
        """,
        tmp_path,
    )
    assert neuron_config_kwargs(spec)["target"] == "trn2"
    assert [g.name for g in get_backend("optimum-neuron").plan(spec).graphs] == ["cte-b1-s1024", "tkg-b1-s1024"]


@pytest.mark.parametrize("weights", ["presharded", "on-load", "reference"])
def test_export_writes_the_directory_optimum_neuron_loads(
    sdk_doubles: Path,
    tiny_llama: Path,
    tmp_path: Path,
    weights: str,
) -> None:
    checkpoint = tmp_path / "llama"
    shutil.copytree(tiny_llama, checkpoint)
    model_id = "./llama" if weights != "reference" else "example-org/tiny-llama"
    spec = make_spec(PROFILE.format(model=model_id, weights=weights), tmp_path)
    job = make_job(spec, checkpoint, tmp_path)
    result = get_backend("optimum-neuron").compile(job)
    files = files_under(job.artifacts_dir)
    assert {"config.json", "generation_config.json", "model.pt", "neuron_config.json"} <= set(files)
    shards = [f for f in files if f.startswith("checkpoint/weights/")]
    assert len(shards) == (2 if weights == "presharded" else 0)
    assert ("model.safetensors" in files) == (weights == "on-load")
    neuron_config = json.loads((job.artifacts_dir / "neuron_config.json").read_text())
    assert neuron_config["target"] == "trn1"
    assert neuron_config["max_context_length"] == 128
    assert neuron_config["continuous_batching"] is True  # optimum-neuron's own default for batch > 1
    assert neuron_config["checkpoint_id"] == (None if weights != "reference" else "example-org/tiny-llama")
    # The environment pinned the compile target, as optimum-cli does on a CPU host.
    assert "NEURON_PLATFORM_TARGET_OVERRIDE=trn1" in (job.logs_dir / "compile.log").read_text()

    from optimum.neuron import NeuronModelForCausalLM

    model = NeuronModelForCausalLM.from_pretrained(str(job.artifacts_dir))
    expected = {
        "presharded": str(job.artifacts_dir / "checkpoint"),
        "on-load": str(job.artifacts_dir),
        "reference": "hub:example-org/tiny-llama@None",
    }[weights]
    assert model.loaded_weights_from == expected
    recorded = result.extra["optimum_neuron"]
    assert recorded["get_neuron_config"]["tensor_parallel_size"] == 2
    assert "max_context_length 128" in recorded["export_command_cannot_express"][-2 if weights != "presharded" else -1]
    assert result.extra["neuron_env"]["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"
    assert [g.name for g in (r.graph for r in result.graphs)] == ["cte-b1-s128", "tkg-b4-s256"]
