"""Pre-flight estimates and `neuronc plan`: parameter counts, KV replication, fit, store and cache status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.fake_backend import VERSION_ENV, build_bundle, register

from neuronc import preflight as pf
from neuronc._output import out
from neuronc.backends import get_backend
from neuronc.build import Build
from neuronc.cli import app
from neuronc.errors import PreflightError
from neuronc.pipeline.plan import hf_cache_status
from neuronc.preflight import GIB, Estimate, model_dims
from neuronc.profile import load_profile
from neuronc.store import LocalStore

LLAMA_3_1_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
OPT_6_7B: dict[str, Any] = {
    "model_type": "opt",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "ffn_dim": 16384,
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "word_embed_proj_dim": 4096,
    "do_layer_norm_before": True,
    "torch_dtype": "float16",
}
MIXTRAL_8X7B: dict[str, Any] = {
    **LLAMA_3_1_8B,
    "model_type": "mixtral",
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}


def estimate(spec: Any, config: Any, **kwargs: Any) -> Estimate:
    """``neuronc.preflight.estimate`` with the build's backend and its planned graphs, as the pipeline passes them."""
    backend = get_backend(spec.backend)
    return pf.estimate(spec, config, backend=backend, graphs=len(backend.plan(spec).graphs), **kwargs)


def preflight(spec: Any, config: Any, **kwargs: Any) -> Estimate:
    backend = get_backend(spec.backend)
    return pf.preflight(spec, config, backend=backend, graphs=len(backend.plan(spec).graphs), **kwargs)


def smallest_fitting_tp(spec: Any, config: Any) -> int | None:
    return pf.smallest_fitting_tp(spec, config, get_backend(spec.backend))


def _invoke(runner: CliRunner, args: list[str]) -> Any:
    out.reset()  # the output object caches consoles bound to the previous invocation's streams
    return runner.invoke(app, args)


# -- parameter counts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "params"),
    [
        (LLAMA_3_1_8B, 8_030_261_248),  # Meta-Llama-3.1-8B
        (OPT_6_7B, 6_658_473_984),  # facebook/opt-6.7b
        (MIXTRAL_8X7B, 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1
        (
            {
                "model_type": "gpt2",
                "n_embd": 768,
                "n_layer": 12,
                "n_head": 12,
                "vocab_size": 50257,
                "n_positions": 1024,
            },
            124_439_808,
        ),
        (
            {
                "model_type": "gpt_neox",
                "hidden_size": 512,
                "num_hidden_layers": 6,
                "num_attention_heads": 8,
                "intermediate_size": 2048,
                "vocab_size": 50304,
            },
            70_426_624,  # EleutherAI/pythia-70m
        ),
    ],
)
def test_parameter_counts_match_published_sizes(config: dict[str, Any], params: int) -> None:
    dims, why = model_dims(config)
    assert why is None and dims is not None
    assert dims.params == params


_SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "vocab_size": 211,
}


@pytest.mark.parametrize(
    "config",
    [
        {**_SMALL, "model_type": "llama", "num_key_value_heads": 2, "tie_word_embeddings": False},
        {**_SMALL, "model_type": "llama", "num_key_value_heads": 4, "tie_word_embeddings": True, "head_dim": 32},
        {**_SMALL, "model_type": "mistral", "num_key_value_heads": 2},
        {**_SMALL, "model_type": "qwen2", "num_key_value_heads": 2, "tie_word_embeddings": True},
        {**_SMALL, "model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 24},
        {**_SMALL, "model_type": "gemma", "num_key_value_heads": 1, "head_dim": 16},
        {**_SMALL, "model_type": "gemma2", "num_key_value_heads": 2, "head_dim": 16},
        {**_SMALL, "model_type": "granite", "num_key_value_heads": 2},
        {**_SMALL, "model_type": "phi3", "num_key_value_heads": 4, "pad_token_id": 0},
        {**_SMALL, "model_type": "mixtral", "num_key_value_heads": 2, "num_local_experts": 3, "num_experts_per_tok": 2},
        {
            "model_type": "opt",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "ffn_dim": 96,
            "vocab_size": 211,
            "max_position_embeddings": 128,
            "word_embed_proj_dim": 64,
        },
        {
            "model_type": "opt",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "ffn_dim": 96,
            "vocab_size": 211,
            "max_position_embeddings": 128,
            "word_embed_proj_dim": 32,
        },
        {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 211, "n_positions": 128},
        {**_SMALL, "model_type": "gpt_neox", "max_position_embeddings": 128},
        {**_SMALL, "model_type": "gpt_neox", "max_position_embeddings": 128, "tie_word_embeddings": True},
    ],
    ids=lambda c: f"{c['model_type']}-{len(c)}",
)
def test_parameter_counts_match_transformers(config: dict[str, Any]) -> None:
    """Instantiate each family on the meta device with transformers and count its parameters."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    expected = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    dims, why = model_dims(hf_config.to_dict())
    assert why is None and dims is not None
    assert dims.params == expected
    assert dims.largest_tensor_params == max(_stored_numels(model))


def _stored_numels(model: Any) -> list[int]:
    """Tensor sizes as save_pretrained writes them (the plan estimates the split's largest read).

    transformers 5 holds Mixtral's experts fused in memory (gate_up_proj [E, 2I, H], down_proj
    [E, H, I]) and saves them per expert (w1, w3 [I, H], w2 [H, I]), as 4.57 holds them.
    """
    sizes = []
    for name, param in model.named_parameters():
        if name.endswith("experts.gate_up_proj"):
            sizes.append(param.numel() // (2 * param.shape[0]))
        elif name.endswith("experts.down_proj"):
            sizes.append(param.numel() // param.shape[0])
        else:
            sizes.append(param.numel())
    return sizes


def test_unknown_family_and_missing_fields_are_unknown_not_errors() -> None:
    dims, why = model_dims({"model_type": "t5", "d_model": 512})
    assert dims is None and why is not None and "t5" in why
    dims, why = model_dims({"model_type": "llama", "hidden_size": 64})
    assert dims is None and why is not None and "lacks" in why
    dims, why = model_dims({})
    assert dims is None and why == "config.json has no model_type"


# -- device memory -----------------------------------------------------------------------------


def _spec(tmp_path: Path, config: dict[str, Any] | None, **fields: Any) -> Any:
    """A validated BuildSpec whose model is a local directory holding ``config`` (or a hub id)."""
    if config is not None:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(config))
        model_id = "model"
    else:
        model_id = "acme/not-downloaded"
    body = {
        "model": {"id": model_id, **({"revision": "0" * 40} if config is None else {})},
        "backend": "nxdi",
        "target": "inf2",
        "tp_degree": 8,
        "batch_size": 4,
        "amp": "bf16",
        "sequence": {
            "max_length": 16384,
            "max_context_length": 8192,
            "context_buckets": [8192],
            "token_buckets": [16384],
        },
    }
    body.update(fields)
    profile = tmp_path / "p.yaml"
    profile.write_text(json.dumps(body))
    return load_profile(profile).specs[0]


def test_device_memory_is_weights_over_tp_plus_kv_cache(tmp_path: Path) -> None:
    spec = _spec(tmp_path, LLAMA_3_1_8B)
    est = estimate(spec, LLAMA_3_1_8B)
    weights = 8_030_261_248 * 2
    kv_per_head = 4 * 16384 * 32 * 128 * 2 * 2  # batch × max_length × layers × head_dim × (K, V) × bf16
    assert est.weights_bytes == weights
    assert est.weights_per_core_bytes == -(-weights // 8)
    assert est.kv_cache_bytes == kv_per_head * 8
    assert est.kv_heads_per_core == 1  # 8 KV heads over 8 ranks
    assert est.kv_cache_per_core_bytes == kv_per_head
    assert est.device_per_core_bytes == est.weights_per_core_bytes + kv_per_head
    assert est.hbm_per_core_bytes == 16 * GIB
    assert est.status == "fits" and est.fits is True
    assert "per NeuronCore" in est.summary()


@pytest.mark.parametrize(("tp", "per_core"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_kv_heads_shard_across_ranks(tmp_path: Path, tp: int, per_core: int) -> None:
    spec = _spec(tmp_path, LLAMA_3_1_8B, tp_degree=tp, batch_size=1, sequence={"max_length": 1024})
    est = estimate(spec, LLAMA_3_1_8B)
    assert est.kv_heads_per_core == per_core
    assert est.kv_cache_per_core_bytes == 1 * 1024 * 32 * 128 * 2 * 2 * per_core


def test_kv_heads_are_replicated_when_fewer_than_ranks(tmp_path: Path) -> None:
    config = {**LLAMA_3_1_8B, "hidden_size": 6144, "num_attention_heads": 48, "num_key_value_heads": 8}
    spec = _spec(tmp_path, config, tp_degree=24, batch_size=1, sequence={"max_length": 2048})
    est = estimate(spec, config)
    one_head = 1 * 2048 * 32 * 128 * 2 * 2
    # 24 ranks share 8 KV heads: every rank holds a whole replicated head, so the cache is 3× the logical size.
    assert est.kv_heads_per_core == 1
    assert est.kv_cache_per_core_bytes == one_head
    assert est.kv_cache_per_core_bytes * 24 == 3 * est.kv_cache_bytes  # type: ignore[operator]
    assert "replicated" in est.summary()


def test_trn2_hbm_per_core_follows_lnc(tmp_path: Path) -> None:
    lnc2 = _spec(tmp_path, LLAMA_3_1_8B, target="trn2", tp_degree=8)
    lnc1 = _spec(tmp_path, LLAMA_3_1_8B, target="trn2", tp_degree=8, options={"logical_nc_config": 1})
    assert estimate(lnc2, LLAMA_3_1_8B).hbm_per_core_bytes == 24 * GIB
    assert estimate(lnc1, LLAMA_3_1_8B).hbm_per_core_bytes == 12 * GIB


def test_preflight_refuses_a_build_that_cannot_fit_and_names_the_numbers(tmp_path: Path) -> None:
    spec = _spec(tmp_path, LLAMA_3_1_8B, tp_degree=1)
    with pytest.raises(PreflightError) as caught:
        preflight(spec, LLAMA_3_1_8B)
    exc = caught.value
    assert exc.exit_code == 2
    # 15.0 GiB of weights + 8.0 GiB of KV cache per core against 16.0 GiB.
    assert "needs 23.0 GiB per NeuronCore, inf2 has 16.0 GiB" in exc.message
    assert any("8,030,261,248 parameters × 2 bytes (bfloat16) = 15.0 GiB" in d for d in exc.details)
    assert any(
        "KV cache: 8.0 GiB per core (batch 4 × max_length 16384 × 32 layers × 8 of 8 KV heads" in d for d in exc.details
    )
    assert exc.hint is not None and "raise tp_degree to 2" in exc.hint
    assert smallest_fitting_tp(spec, LLAMA_3_1_8B) == 2  # 7.5 GiB + 4.0 GiB


def test_preflight_passes_when_the_config_is_unknown(tmp_path: Path) -> None:
    spec = _spec(tmp_path, None, tp_degree=1)
    est = preflight(spec, None)
    assert est.status == "unknown" and est.fits is None
    assert est.unknown_reason is not None and "not available locally" in est.unknown_reason


def test_host_ram_model_and_warnings(tmp_path: Path) -> None:
    spec = _spec(tmp_path, LLAMA_3_1_8B)
    est = estimate(spec, LLAMA_3_1_8B, jobs=4, host_ram=32 * GIB)
    weights = 8_030_261_248 * 2
    largest = 128256 * 4096  # the embedding (and the untied lm_head)
    assert est.host_split_bytes == 300 * 1024**2 + largest * 2 + -(-largest * 2 // 8)
    assert est.compile_jobs == 2  # only two graphs to compile
    assert est.host_compile_bytes == 4 * GIB + 2 * weights + 2 * (2 * GIB)
    assert any("compile needs about" in w and "this host has 32.0 GiB" in w for w in est.warnings)
    on_load = _spec(tmp_path, LLAMA_3_1_8B, weights="on-load")
    assert estimate(on_load, LLAMA_3_1_8B).host_split_bytes == 0


def test_encoders_have_no_kv_cache(tmp_path: Path) -> None:
    config = {**_SMALL, "model_type": "llama"}
    spec = _spec(
        tmp_path,
        config,
        backend="torch-neuronx",
        model={"id": "model", "task": "feature-extraction"},
        tp_degree=1,
        sequence={"max_length": 128},
    )
    est = estimate(spec, config)
    assert est.kv_cache_per_core_bytes == 0
    assert est.device_per_core_bytes == est.weights_bytes


# -- neuronc plan --------------------------------------------------------------------------------


def test_plan_cli_exits_2_when_a_build_cannot_fit(tmp_path: Path, runner: CliRunner) -> None:
    _spec(tmp_path, LLAMA_3_1_8B, tp_degree=1)
    result = _invoke(runner, ["plan", str(tmp_path / "p.yaml")])
    assert result.exit_code == 2, result.output
    assert "cannot fit the target's memory per NeuronCore" in result.stderr
    assert "23.0 GiB per NeuronCore" in result.stderr
    # The hint names the smallest tp degree that fits, as docs/ci.md says.
    assert "raise tp_degree to 2" in " ".join(result.stderr.split())

    result = _invoke(runner, ["plan", str(tmp_path / "p.yaml"), "--json"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)  # stdout holds one JSON document
    assert data["fits"] is False and data["exit_code"] == 2
    pre = data["builds"][0]["preflight"]
    assert pre["status"] == "does-not-fit"
    assert pre["device_per_core_bytes"] > pre["hbm_per_core_bytes"] == 16 * GIB


def test_plan_cli_on_shipped_profiles(repo_root: Path, runner: CliRunner) -> None:
    result = _invoke(runner, ["plan", str(repo_root / "profiles"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_name = {(b["name"], b["build"]): b for b in data["builds"]}
    tiny = by_name[("tiny-llama-cpu", 0)]
    assert tiny["preflight"]["status"] == "n/a"  # CPU: no HBM; host numbers are known from the shipped config
    assert tiny["preflight"]["model"]["model_type"] == "llama"
    assert tiny["preflight"]["host_compile_bytes"] > 0
    assert tiny["store"]["status"] == "miss"
    assert tiny["hf_cache"]["status"] == "unknown"
    assert [g["name"] for g in tiny["graphs"]] == ["cte-b1-s32", "cte-b1-s64", "tkg-b1-s128"]
    llama = by_name[("llama3.1-8b-instruct-inf2-tp8", 0)]
    assert llama["preflight"]["status"] == "unknown"  # the hub model is not downloaded here
    assert llama["toolchain_missing"]  # the Neuron SDK is not installed here
    assert "not installed here" in llama["store"]["note"]


def test_plan_reports_store_hits_and_other_toolchains(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    register()
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "model: {id: acme/tiny-llama, revision: 0123456789abcdef0123456789abcdef01234567}\n"
        "backend: fake\ntarget: inf2\ntp_degree: 2\nbatch_size: 1\namp: bf16\n"
        "sequence: {max_length: 256, max_context_length: 128, context_buckets: [64, 128], token_buckets: [128, 256]}\n"
    )
    spec = load_profile(profile).specs[0]
    store = LocalStore(tmp_path / "store")
    bundle = build_bundle(store=store, spec=spec)
    result = _invoke(runner, ["plan", str(profile), "--store", str(store.root), "--json"])
    assert result.exit_code == 0, result.output
    build = json.loads(result.stdout)["builds"][0]
    assert build["store"] == {
        "status": "hit",
        "store": str(store.root),
        "location": str(bundle),
        "other_toolchains": [],
    }
    assert {g["store"] for g in build["graphs"]} == {"hit"}

    monkeypatch.setenv(VERSION_ENV, "9.9.9")  # another compiler version: same config, other toolchain
    result = _invoke(runner, ["plan", str(profile), "--store", str(store.root), "--json"])
    build = json.loads(result.stdout)["builds"][0]
    assert build["store"]["status"] == "other-toolchain"
    assert build["store"]["other_toolchains"] == [bundle.parent.name]


def test_hf_cache_status_is_unknown_rather_than_a_crash(tmp_path: Path) -> None:
    build = Build.received(_spec(tmp_path, LLAMA_3_1_8B))
    assert hf_cache_status(build).status == "unknown"
    missing = hf_cache_status(build, snapshot=tmp_path / "no-such-snapshot")
    assert missing.status == "unknown"
    assert missing.reason is not None and "no such snapshot directory" in missing.reason
    offline = hf_cache_status(build, online=True)  # HF_HUB_OFFLINE=1 in tests: the Hub cannot be asked
    assert offline.status == "unknown", offline


def test_plan_looks_builds_up_in_an_hf_cache_snapshot(repo_root: Path, tmp_path: Path, runner: CliRunner) -> None:
    fixture = repo_root / "tests" / "fixtures" / "hf-neuron-cache"
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"model: {{id: {fixture / 'models' / 'example-org' / 'tiny-llama'}}}\n"
        "backend: optimum-neuron\ntarget: trn1\ntp_degree: 2\namp: bf16\nsequence: {max_length: 2048}\n"
        "matrix: {batch_size: [1, 3]}\n"
    )
    result = _invoke(runner, ["plan", str(profile), "--snapshot", str(fixture / "snapshot"), "--json"])
    assert result.exit_code == 0, result.output
    builds = json.loads(result.stdout)["builds"]
    # The snapshot holds an optimum-neuron 0.3.0 export of this model at batch 1, not at batch 3.
    assert [(b["batch_size"], b["hf_cache"]["status"]) for b in builds] == [(1, "hit"), (3, "miss")]
    assert {g["hf_cache"] for g in builds[0]["graphs"]} == {"hit"}
    assert builds[0]["preflight"]["status"] == "fits"  # the tiny model's config.json is local


def test_plan_matrix_and_deploy_do_not_import_torch(repo_root: Path, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from neuronc.cli import main\n"
        "try:\n"
        f"    main(['plan', {str(repo_root / 'profiles')!r}, '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "try:\n"
        f"    main(['matrix', {str(repo_root / 'profiles')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "try:\n"
        f"    main(['deploy', {str(tmp_path / 'no-bundle')!r}, '--for', 'vllm'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import neuronc.deploy.vllm, neuronc.deploy.tgi, neuronc.deploy.torchserve, neuronc.deploy.sagemaker\n"
        "print(sorted({'torch', 'transformers', 'numpy'} & set(sys.modules)), file=sys.stderr)\n"
    )
    env = {
        "HF_HUB_OFFLINE": "1",
        "NEURONC_STORE": str(tmp_path / "store"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
