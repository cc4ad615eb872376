"""nxdi backend: NeuronConfig mapping, model classes, availability, and compile through the SDK doubles."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from sdk_doubles import write_dist_info
from sdk_doubles.fixtures import bundle_with_extra, files_under, make_job, make_spec

from neuronc.backends import get_backend
from neuronc.backends.neuron.isolated import COMPILE_LOG
from neuronc.backends.neuron.nxdi import MODEL_CLASSES, model_class_for, neuron_config_kwargs
from neuronc.errors import (
    BackendUnavailableError,
    CompileError,
    EnvironmentIncompatibleError,
    InvalidInputError,
    ProfileError,
)
from neuronc.profile import load_profile

REPO = Path(__file__).resolve().parent.parent

PROFILE = """
model: {{id: ./llama}}
backend: nxdi
target: inf2
tp_degree: 2
batch_size: 2
amp: bf16
sequence: {{max_length: 256, max_context_length: 128, context_buckets: [64, 128], token_buckets: [128, 256]}}
weights: {weights}
"""


@pytest.fixture
def workspace(tmp_path: Path, tiny_llama: Path) -> Path:
    shutil.copytree(tiny_llama, tmp_path / "llama")
    return tmp_path


def spec_for(workspace: Path, weights: str = "presharded", extra: str = ""):  # type: ignore[no-untyped-def]
    return make_spec(PROFILE.format(weights=weights) + extra, workspace)


def test_shipped_profile_maps_to_these_neuron_config_kwargs() -> None:
    (spec,) = load_profile(REPO / "profiles/llama3.1-8b-instruct-nxdi-inf2.yaml").specs
    assert neuron_config_kwargs(spec) == {
        "tp_degree": 8,
        "batch_size": 4,
        "seq_len": 16384,
        "max_length": 16384,
        "max_context_length": 8192,
        "torch_dtype": "bfloat16",
        "enable_bucketing": True,
        "context_encoding_buckets": [1024, 2048, 4096, 8192],
        "token_generation_buckets": [4096, 8192, 16384],
        "save_sharded_checkpoint": True,
        "logical_nc_config": 1,
        "target": "inf2",
    }
    plan = get_backend("nxdi").plan(spec)
    assert [g.name for g in plan.graphs] == [
        "cte-b4-s1024",
        "cte-b4-s2048",
        "cte-b4-s4096",
        "cte-b4-s8192",
        "tkg-b4-s4096",
        "tkg-b4-s8192",
        "tkg-b4-s16384",
    ]
    assert "artifacts/weights/" in plan.weights_layout


def test_single_buckets_turn_bucketing_off_and_weights_mode_picks_sharding(workspace: Path) -> None:
    spec = make_spec(
        """
        model: {id: ./llama}
        backend: nxdi
        target: trn2
        tp_degree: 2
        sequence: {max_length: 256}
        weights: on-load
        """,
        workspace,
    )
    assert neuron_config_kwargs(spec) == {
        "tp_degree": 2,
        "batch_size": 1,
        "seq_len": 256,
        "max_length": 256,
        "max_context_length": 256,
        "torch_dtype": "bfloat16",
        "enable_bucketing": False,
        "save_sharded_checkpoint": False,
        "logical_nc_config": 2,
        "target": "trn2",
    }


def test_extra_neuron_config_is_passed_through_but_cannot_override_profile_fields(workspace: Path) -> None:
    spec = spec_for(workspace, extra="options: {neuron_config: {fused_qkv: true}}\n")
    assert neuron_config_kwargs(spec)["fused_qkv"] is True
    with pytest.raises(ProfileError) as info:
        spec_for(workspace, extra="options: {neuron_config: {tp_degree: 4}}\n")
    [problem] = info.value.details
    assert "options.neuron_config.tp_degree: set by neuronc from the profile's tp_degree" in problem
    assert problem.startswith(f"{workspace / 'profile.yaml'}:10:")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("{logical_nc_confg: 1}", "unknown key 'logical_nc_confg'. Did you mean 'logical_nc_config'?"),
        ("{neuron_config: {fused_qvk: true}}", "unknown key 'fused_qvk'. Did you mean 'fused_qkv'?"),
        ("{model_class: no-colon}", "options.model_class"),
        ("{serving: tgi}", "options.serving"),
    ],
)
def test_options_are_checked_at_validate_time_with_positions(workspace: Path, options: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        spec_for(workspace, extra=f"options: {options}\n")
    assert expected in info.value.details[0]
    assert ":10:" in info.value.details[0]


def test_model_class_per_model_type() -> None:
    assert model_class_for("llama") == (
        "neuronx_distributed_inference.models.llama.modeling_llama",
        "NeuronLlamaForCausalLM",
    )
    assert model_class_for("mistral") == (
        "neuronx_distributed_inference.models.mistral.modeling_mistral",
        "NeuronMistralForCausalLM",
    )
    assert model_class_for("qwen3_moe")[1] == "NeuronQwen3MoeForCausalLM"
    assert model_class_for("anything", "pkg.mod:MyModel") == ("pkg.mod", "MyModel")
    with pytest.raises(InvalidInputError, match="no causal-LM class for model_type 'opt'") as info:
        model_class_for("opt")
    assert "llama" in (info.value.hint or "")
    with pytest.raises(InvalidInputError, match="separate text and vision neuron configs"):
        model_class_for("llama4")
    assert all(cls.startswith("Neuron") and cls.endswith("ForCausalLM") for _, cls in MODEL_CLASSES.values())


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [("llama4", "needs separate text and vision neuron configs"), ("gpt_bigcode", "no causal-LM class for model_type")],
)
def test_unsupported_architectures_are_refused_at_validate_time(
    workspace: Path, model_type: str, expected: str
) -> None:
    path = workspace / "llama" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_type": model_type}))
    with pytest.raises(ProfileError) as info:
        spec_for(workspace)
    [problem] = info.value.details
    assert ":2:9: model.id: " in problem
    assert expected in problem
    # A model class of one's own lifts the refusal.
    assert spec_for(workspace, extra="options: {model_class: 'pkg.mod:Mine'}\n").options["model_class"]


def test_lnc_2_exists_on_trn2_and_trn3_only(workspace: Path) -> None:
    with pytest.raises(ProfileError) as info:
        spec_for(workspace, extra="options: {logical_nc_config: 2}\n")
    assert "options.logical_nc_config: LNC 2 does not exist on inf2 (LNC 2 is trn2/trn3 only)" in info.value.details[0]


def test_unavailable_without_the_sdk_and_compile_exits_5(workspace: Path) -> None:
    backend = get_backend("nxdi")
    availability = backend.toolchain.availability()
    assert not availability.available
    assert "neuronx-distributed-inference" in (availability.reason or "")
    assert "pip.repos.neuron.amazonaws.com" in (availability.install_hint or "")
    job = make_job(spec_for(workspace), workspace / "llama", workspace)
    with pytest.raises(BackendUnavailableError) as info:
        backend.compile(job)
    assert info.value.exit_code == 5


def test_pypi_placeholders_do_not_count_as_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dists = write_dist_info(
        tmp_path,
        {
            "torch-neuronx": "1.0",
            "neuronx-cc": "1.0.post1",
            "neuronx-distributed": "0.1",
            "neuronx-distributed-inference": "0.1.0",
        },
    )
    monkeypatch.syspath_prepend(str(dists))
    availability = get_backend("nxdi").toolchain.availability()
    assert not availability.available
    assert "torch-neuronx (found 1.0, the PyPI placeholder)" in (availability.reason or "")


def test_available_with_the_sdk_doubles(sdk_doubles: Path) -> None:
    availability = get_backend("nxdi").toolchain.availability()
    assert availability.available, availability.reason
    assert availability.versions["neuronx-distributed-inference"] == "0.6.10598"
    assert availability.versions["neuronx-cc"] == "2.21.33363.0+82129205"


def _in_process(job, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    backend = get_backend("nxdi")
    for key, value in backend.compile_env(job).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(job.work_dir)
    return backend.compile_in_process(job)


def test_presharded_compile_writes_model_pt_config_and_nxdi_rank_shards(
    sdk_doubles: Path,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = make_job(spec_for(workspace, "presharded"), workspace / "llama", workspace)
    result = _in_process(job, monkeypatch)
    assert files_under(job.artifacts_dir) == [
        "model.pt",
        "neuron_config.json",
        "weights/tp0_sharded_checkpoint.safetensors",
        "weights/tp1_sharded_checkpoint.safetensors",
    ]
    config = json.loads((job.artifacts_dir / "neuron_config.json").read_text())
    assert config["neuron_config"]["context_encoding_buckets"] == [64, 128]
    assert config["neuron_config"]["save_sharded_checkpoint"] is True
    assert config["_name_or_path"] == "llama"  # no build-host path in the bundle
    assert [g.graph.name for g in result.graphs] == ["cte-b2-s64", "cte-b2-s128", "tkg-b2-s128", "tkg-b2-s256"]
    assert {g.artifact for g in result.graphs} == {"artifacts/model.pt"}
    # Each bucket compiled in this build's own BASE_COMPILE_WORK_DIR.
    logs = sorted(p.relative_to(job.work_dir).as_posix() for p in job.work_dir.rglob("log-neuron-cc.txt"))
    assert logs[0] == "nxd/context_encoding_model/_tp0_bk0/log-neuron-cc.txt"
    assert len(logs) == 4
    # NxD reads no NEURON_CC_FLAGS: the compile gets none, and the manifest says so.
    assert result.extra["neuron_env"]["NEURON_CC_FLAGS"] == ""
    assert result.extra["nxdi"]["model_class"].endswith(":NeuronLlamaForCausalLM")


@pytest.mark.parametrize(
    ("rope", "theta", "scaling"),
    [
        # As transformers 4.57 writes config.json: NxDI reads these keys as they are.
        ({"rope_theta": 500000.0, "rope_scaling": None}, 500000.0, None),
        # As transformers 5 writes it: one rope_parameters dict, no rope_theta.
        ({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}, 500000.0, None),
        (
            {"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}},
            500000.0,
            {"rope_type": "llama3", "factor": 8.0},
        ),
    ],
)
def test_nxdi_gets_rope_theta_from_either_config_json_form(
    sdk_doubles: Path,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    rope: dict[str, object],
    theta: float,
    scaling: object,
) -> None:
    path = workspace / "llama" / "config.json"
    config = json.loads(path.read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        config.pop(key, None)
    path.write_text(json.dumps({**config, **rope}))
    job = make_job(spec_for(workspace, "presharded"), workspace / "llama", workspace)
    _in_process(job, monkeypatch)
    written = json.loads((job.artifacts_dir / "neuron_config.json").read_text())
    assert written["rope_theta"] == theta
    assert written["rope_scaling"] == scaling


def test_on_load_bundle_is_self_contained_after_it_moves(
    sdk_doubles: Path,
    workspace: Path,
) -> None:
    job = make_job(spec_for(workspace, "on-load"), workspace / "llama", workspace, HF_TOKEN="hf_secret")
    result = get_backend("nxdi").compile(job)  # the isolated child process
    log = (job.logs_dir / COMPILE_LOG).read_text()
    assert "NEURON_CC_FLAGS=\n" in log
    assert "HF_TOKEN=<set>" in log and "hf_secret" not in log
    assert "model.safetensors" in files_under(job.artifacts_dir)
    assert "weights" not in {p.name for p in job.artifacts_dir.iterdir()}
    assert (job.logs_dir / COMPILE_LOG).is_file()
    assert (job.logs_dir / "neuronx-cc/nxd/token_generation_model/_tp0_bk1/log-neuron-cc.txt").is_file()
    snippet = result.extra["load_snippet"]
    assert snippet.splitlines()[0] == 'bundle = "/path/to/this/bundle"  # this bundle\'s directory'
    # Publish = rename: the build host's paths are gone, the bundle still loads its own weights.
    moved = workspace / "published"
    job.artifacts_dir.parent.rename(moved)
    shutil.rmtree(workspace / "llama")
    from neuronx_distributed_inference.models.llama.modeling_llama import NeuronLlamaForCausalLM

    model = NeuronLlamaForCausalLM(f"{moved}/artifacts/")
    model.load(f"{moved}/artifacts/")
    assert model.loaded_weights_from == f"{moved}/artifacts/"


def test_compiler_failure_raises_compile_error_with_the_log_tail(
    sdk_doubles: Path,
    workspace: Path,
) -> None:
    job = make_job(
        spec_for(workspace),
        workspace / "llama",
        workspace,
        NEURONC_SDK_DOUBLE_FAIL="Estimated peak HBM usage exceeds 16GB",
    )
    with pytest.raises(CompileError) as info:
        get_backend("nxdi").compile(job)
    error = info.value
    assert error.exit_code == 3
    assert error.log_path == str(job.logs_dir / COMPILE_LOG)
    assert any("ERROR: Estimated peak HBM usage exceeds 16GB" in line for line in error.details)
    # neuronx-cc's own log of the failing graph is kept too.
    assert list((job.logs_dir / "neuronx-cc").rglob("log-neuron-cc.txt"))


def test_an_architecture_changed_after_validation_is_refused_before_the_compile_starts(
    sdk_doubles: Path,
    workspace: Path,
) -> None:
    # Validated while the checkpoint was still a llama; compile checks the build again.
    job = make_job(spec_for(workspace), workspace / "llama", workspace)
    config = json.loads((workspace / "llama/config.json").read_text())
    config["model_type"] = "gpt_bigcode"
    (workspace / "llama/config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidInputError) as info:
        get_backend("nxdi").compile(job)
    assert "model.id: nxdi has no causal-LM class for model_type 'gpt_bigcode'" in info.value.details[0]
    assert not (job.logs_dir / COMPILE_LOG).exists()


def test_load_snippet_names_the_model_class_from_the_manifest(workspace: Path) -> None:
    extra = {"nxdi": {"model_class": "pkg.mod:NeuronQwen2ForCausalLM", "weights": "presharded"}}
    bundle = bundle_with_extra(workspace / "bundle", spec_for(workspace), extra)
    snippet = get_backend("nxdi").runtime.load_snippet(str(bundle))
    assert snippet is not None
    assert snippet.splitlines()[:2] == [
        f"bundle = {json.dumps(str(bundle))}",
        "from pkg.mod import NeuronQwen2ForCausalLM",
    ]
    assert 'model = NeuronQwen2ForCausalLM(f"{bundle}/artifacts/")' in snippet
    compile(snippet, "<snippet>", "exec")


def test_importing_the_backend_imports_no_sdk_or_torch() -> None:
    import subprocess

    code = (
        "import sys, neuronc.backends.neuron.nxdi, neuronc.backends.neuron.optimum_neuron, neuronc.backends.neuron.transformers_neuronx, "
        "neuronc.backends.neuron.torch_neuronx; "
        "print(sorted(m for m in ('torch', 'transformers', 'torch_neuronx', 'optimum') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# options.serving: vllm (vllm-project/vllm-neuron worker/neuronx_distributed_model_loader.py)
# ------------------------------------------------------------------------------------------------


def test_serving_vllm_compiles_as_vllm_neuron_loads(workspace: Path) -> None:
    spec = spec_for(workspace, extra="options: {serving: vllm}\n")
    kwargs = neuron_config_kwargs(spec)
    assert {k: kwargs[k] for k in ("ctx_batch_size", "is_continuous_batching", "padding_side")} == {
        "ctx_batch_size": 1,
        "is_continuous_batching": True,
        "padding_side": "right",
    }
    assert kwargs["on_device_sampling_config"] == {"dynamic": True, "deterministic": False}
    assert kwargs["enable_bucketing"] is True
    plan = get_backend("nxdi").plan(spec)
    assert [g.name for g in plan.graphs] == ["cte-b1-s64", "cte-b1-s128", "tkg-b2-s128", "tkg-b2-s256"]
    assert any("continuous batching on" in n for n in plan.notes)
    single_text = PROFILE.format(weights="presharded").replace("batch_size: 2", "batch_size: 1")
    single = make_spec(single_text + "options: {serving: vllm}\n", workspace)
    assert neuron_config_kwargs(single)["is_continuous_batching"] is False
    # Without serving, NxDI's own defaults stand.
    assert "is_continuous_batching" not in neuron_config_kwargs(spec_for(workspace))


@pytest.mark.parametrize(
    ("neuron_config", "field"),
    [
        ("{is_continuous_batching: false}", "is_continuous_batching"),
        ("{ctx_batch_size: 2}", "ctx_batch_size"),
        ("{is_prefix_caching: true, is_block_kv_layout: true}", "is_block_kv_layout"),
    ],
)
def test_serving_vllm_refuses_settings_vllm_would_mis_serve(workspace: Path, neuron_config: str, field: str) -> None:
    with pytest.raises(ProfileError) as info:
        spec_for(workspace, extra=f"options: {{serving: vllm, neuron_config: {neuron_config}}}\n")
    assert any(f"options.neuron_config.{field}: serving: vllm" in d for d in info.value.details)


def test_serving_vllm_is_recorded_in_the_manifest_extra(
    sdk_doubles: Path,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = spec_for(workspace, extra="options: {serving: vllm, neuron_config: {fused_qkv: true}}\n")
    job = make_job(spec, workspace / "llama", workspace)
    result = _in_process(job, monkeypatch)
    nxdi = result.extra["nxdi"]
    assert nxdi["serving"] == "vllm"
    assert nxdi["neuron_config"] == neuron_config_kwargs(spec)
    assert nxdi["neuron_config"]["fused_qkv"] is True
    written = json.loads((job.artifacts_dir / "neuron_config.json").read_text())["neuron_config"]
    assert written["is_continuous_batching"] is True and written["ctx_batch_size"] == 1
    assert [g.graph.name for g in result.graphs][:2] == ["cte-b1-s64", "cte-b1-s128"]
    json.dumps(result.extra)  # the manifest stores it as JSON


def test_a_class_the_installed_nxdi_lacks_stops_the_compile_with_the_release_that_has_it(
    sdk_doubles: Path,
    workspace: Path,
) -> None:
    # The doubles stand for NxDI 0.6.10598 (Neuron SDK 2.26.1), which has no NeuronMistralForCausalLM.
    path = workspace / "llama" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_type": "mistral"}))
    job = make_job(spec_for(workspace), workspace / "llama", workspace)
    with pytest.raises(EnvironmentIncompatibleError) as info:
        get_backend("nxdi").compile(job)
    assert info.value.exit_code == 5
    assert "NeuronMistralForCausalLM is not in this NxD Inference" in info.value.message
    assert "Neuron SDK 2.29" in (info.value.hint or "")
