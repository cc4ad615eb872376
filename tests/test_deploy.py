"""`neuronc deploy`: every emitted value checked against the bundle's manifest and the stacks' rules.

Bundles here are written by the real BundleWriter with the layout and the ``extra`` records each
backend writes (the Neuron SDK is the only thing absent); ``test_deploy_shipped.py`` compiles the
shipped profiles through the SDK doubles, and tests/contract/serving/ runs the stacks' own parsers.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from plugins.fake_backend import make_spec, spec_key

from neuronc._output import out
from neuronc.backends.base import GraphSpec
from neuronc.bundle import BuildRecord, BundleWriter, Graph, Manifest, read_manifest, verify_bundle
from neuronc.cli import app
from neuronc.deploy import DeployOptions, Rendered, render, write
from neuronc.deploy import images as image_table
from neuronc.deploy.tnx_handler import KEYS as HANDLER_KEYS
from neuronc.errors import InvalidInputError
from neuronc.spec import ResolvedSequence

SEQ = ResolvedSequence(
    max_length=4096, max_context_length=2048, context_buckets=(512, 1024, 2048), token_buckets=(2048, 4096)
)
FULL = ResolvedSequence(max_length=4096, max_context_length=4096, context_buckets=(4096,), token_buckets=(4096,))
CC = "2.21.33363.0+82129205"
# NxDI: SDK 2.28.0's versions (its AWS vLLM 0.13.0 image ships them); optimum-neuron, transformers-neuronx: 2.26.1's.
TOOLCHAINS = {
    "nxdi": {"neuronx-cc": "2.23.6484.0+3b612583", "neuronx-distributed-inference": "0.8.16251+f3ca5575"},
    "optimum-neuron": {"optimum-neuron": "0.4.5", "neuronx-cc": CC},
    "transformers-neuronx": {"transformers-neuronx": "0.13.1315", "neuronx-cc": CC},
}
ARTIFACTS = {
    "nxdi": [
        "artifacts/model.pt",
        "artifacts/neuron_config.json",
        "artifacts/weights/tp0_sharded_checkpoint.safetensors",
    ],
    "optimum-neuron": ["artifacts/model.pt", "artifacts/neuron_config.json", "artifacts/config.json"],
    "transformers-neuronx": ["artifacts/neff/0123456789abcdef0123.neff", "artifacts/checkpoint/config.json"],
}
CB = {"is_continuous_batching": True, "ctx_batch_size": 1}
TNX_KWARGS = {
    "batch_size": 4,
    "tp_degree": 8,
    "amp": "f16",
    "n_positions": [2048, 4096],
    "context_length_estimate": [512, 1024, 2048],
    "unroll": 4,
}


def _bundle(
    tmp_path: Path,
    backend: str,
    *,
    toolchain: dict[str, str] | None = None,
    neuron_config: dict[str, Any] | None = None,
    **overrides: Any,
) -> Path:
    """A bundle with the layout and extra records ``backend`` writes, through the real writer."""
    fields: dict[str, Any] = {
        "model": make_spec().model.model_copy(update={"id": "meta-llama/Llama-3.1-8B"}),
        "backend": backend,
        "target": "inf2",
        "tp_degree": 8,
        "batch_size": 4,
        "amp": "bf16",
        "sequence": SEQ,
        "compiler_flags": ("-O1",),
    }
    fields.update(overrides)
    spec = make_spec(**fields)
    key = spec_key(spec)
    extra: dict[str, Any] = {}
    if backend == "nxdi":
        nc = {
            "tp_degree": spec.tp_degree,
            "batch_size": spec.batch_size,
            **(CB if neuron_config is None else neuron_config),
        }
        extra["nxdi"] = {"model_class": "m:NeuronLlamaForCausalLM", "neuron_config": nc, "weights": spec.weights}
    if backend == "transformers-neuronx":
        kwargs = {**TNX_KWARGS, "batch_size": spec.batch_size, "tp_degree": spec.tp_degree}
        extra["transformers_neuronx"] = {
            "model_class": "transformers_neuronx.LlamaForSampling",
            "from_pretrained": kwargs,
            "weights": spec.weights,
            "neffs": ["0123456789abcdef0123.neff"],
        }
    dest = tmp_path / f"bundle-{backend}-{key.short}"
    with BundleWriter(dest) as writer:
        writer.write_text("profile.yaml", "# profile\n")
        writer.write_text("model/config.json", json.dumps({"model_type": "llama", "num_attention_heads": 32}))
        for rel in ARTIFACTS[backend]:
            writer.write_bytes(rel, f"{rel}\n".encode())
        graphs = [
            Graph(
                name=GraphSpec("context_encoding", spec.batch_size, b).name,
                role="context_encoding",
                batch=spec.batch_size,
                bucket=b,
                artifact=ARTIFACTS[backend][0],
            )
            for b in spec.sequence.context_buckets
        ]
        chain = {"neuronc": "0.1.0", **(toolchain or TOOLCHAINS[backend])}
        return writer.finish(BuildRecord.for_build(spec, key, chain, graphs=graphs, extra=extra))


def _files(rendered: Rendered) -> dict[str, str]:
    return {f.path: f.text for f in rendered.files}


def _env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (comments and blank lines ignored), refusing anything else."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line), line
        key, _, value = line.partition("=")
        assert key not in env
        env[key] = value
    return env


def _exec_argv(script: str) -> list[str]:
    line = next(li for li in script.splitlines() if li.startswith("exec "))
    return shlex.split(line)[1:]


def _flags(argv: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            flags[argv[i]] = nxt
            i += 2 if nxt is not None else 1
        else:
            i += 1
    return flags


def _scenario(files: dict[str, str]) -> dict[str, Any]:
    data = json.loads(files["guidellm-scenario.json"])
    assert isinstance(data, dict)
    return data


def _seq(m: Manifest) -> dict[str, Any]:
    seq = m.profile["sequence"]
    assert isinstance(seq, dict)
    return seq


# -- vLLM for NxDI (vllm-neuron) ----------------------------------------------------------------------


def test_vllm_serve_sh_runs_with_a_bundle_path_holding_spaces_and_dollars(tmp_path: Path) -> None:
    """serve.sh sources vllm.env: the values are quoted for the shell, so the path arrives as written."""
    import subprocess

    bundle = _bundle(tmp_path, "nxdi")
    where = "/srv/my bundles/$HOME/b"
    out_dir = tmp_path / "deploy"
    write(render(bundle, "vllm", DeployOptions(bundle_path=where)), out_dir)
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$NEURON_COMPILED_ARTIFACTS" "$2"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "HOME": "/nowhere"}
    proc = subprocess.run(["sh", str(out_dir / "serve.sh")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{where}/artifacts", f"{where}/model"]


def test_vllm_nxdi_arguments_come_from_the_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi")
    m = read_manifest(bundle)
    rendered = render(bundle, "vllm")
    files = _files(rendered)
    assert _env(files["vllm.env"]) == {"NEURON_COMPILED_ARTIFACTS": f"{bundle.absolute()}/artifacts"}
    argv = _exec_argv(files["serve.sh"])
    assert argv[:3] == ["vllm", "serve", f"{bundle.absolute()}/model"]
    flags = _flags(argv[3:])
    assert flags == {
        "--served-model-name": m.model_id,
        "--tensor-parallel-size": "8",
        "--max-num-seqs": "4",
        "--max-model-len": "2048",  # the largest context bucket: longer prompts get HTTP 400 from vLLM
        "--dtype": "bfloat16",
        "--no-enable-prefix-caching": None,
        "--num-gpu-blocks-override": "4",
        "--port": "8080",
    }
    assert "--block-size" not in argv
    assert rendered.image is not None and rendered.image.endswith(":0.13.0-neuronx-py312-sdk2.28.0-ubuntu24.04")


def test_vllm_nxdi_bundle_of_versions_no_release_ships_gets_serve_sh_and_a_note(tmp_path: Path) -> None:
    toolchain = {"neuronx-cc": "2.23.9999.0", "neuronx-distributed-inference": "0.8.16251"}
    rendered = render(_bundle(tmp_path, "nxdi", toolchain=toolchain), "vllm")
    files = _files(rendered)
    assert "serve.sh" in files and "docker-compose.yml" not in files and rendered.image is None
    assert "2.23.9999.0" in rendered.notes[0] and "--image" in rendered.notes[0]
    assert "0.8.16251" in rendered.notes[0]  # the known images' versions are named


def test_vllm_nxdi_compose_mounts_artifacts_read_only_on_disjoint_devices(tmp_path: Path) -> None:
    toolchain = {"neuronx-cc": "2.23.6484.0+3b612583", "neuronx-distributed-inference": "0.8.16251+f3ca5575"}
    bundle = _bundle(tmp_path, "nxdi", toolchain=toolchain, tp_degree=4, sequence=FULL)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="inf2.48xlarge", port=9000))
    assert (
        rendered.image
        == "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.13.0-neuronx-py312-sdk2.28.0-ubuntu24.04"
    )
    compose = yaml.safe_load(_files(rendered)["docker-compose.yml"])
    replicas = {k: s for k, s in compose["services"].items() if k.startswith("vllm-")}
    assert len(replicas) == 6  # 12 devices, 2 per tp-4 replica
    seen: set[str] = set()
    for service in replicas.values():
        assert service["volumes"] == [
            {"type": "bind", "source": f"{bundle.absolute()}/model", "target": "/bundle/model", "read_only": True},
            {
                "type": "bind",
                "source": f"{bundle.absolute()}/artifacts",
                "target": "/bundle/artifacts",
                "read_only": True,
            },
        ]
        assert service["environment"] == {"NEURON_COMPILED_ARTIFACTS": "/bundle/artifacts"}
        assert service["command"][:3] == ["vllm", "serve", "/bundle/model"]
        assert _flags(service["command"][3:])["--max-model-len"] == "4096"
        devices = {d.split(":")[0] for d in service["devices"]}
        assert len(devices) == 2 and not devices & seen
        seen |= devices
        assert "ports" not in service
    assert compose["services"]["nginx"]["ports"] == ["9000:80"]
    assert _scenario(_files(rendered))["spec"]["profile"]["max_concurrency"] == 4 * 6


@pytest.mark.parametrize(
    ("overrides", "neuron_config", "words", "hint"),
    [
        ({}, {}, "without continuous batching", "serving: vllm"),
        ({}, {"is_continuous_batching": True, "ctx_batch_size": 4}, "context batch 4", "serving: vllm"),
        ({"weights": "reference"}, CB, "weights: reference", "presharded"),
        ({}, {**CB, "is_block_kv_layout": True}, "block KV layout", "serving: vllm"),
    ],
)
def test_vllm_refuses_nxdi_bundles_it_would_mis_serve(
    tmp_path: Path, overrides: dict[str, Any], neuron_config: dict[str, Any], words: str, hint: str
) -> None:
    bundle = _bundle(tmp_path, "nxdi", neuron_config=neuron_config, **overrides)
    with pytest.raises(InvalidInputError, match=words) as caught:
        render(bundle, "vllm")
    assert caught.value.exit_code == 2 and hint in str(caught.value.hint)


def test_vllm_serves_a_batch_1_nxdi_bundle_without_continuous_batching(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi", neuron_config={}, batch_size=1)
    argv = _exec_argv(_files(render(bundle, "vllm"))["serve.sh"])
    assert _flags(argv)["--num-gpu-blocks-override"] == "1"


# -- optimum-neuron's vLLM server -----------------------------------------------------------------


def test_optimum_bundle_serves_with_optimum_cli_and_its_image(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", sequence=FULL, tp_degree=2, batch_size=8)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="inf2.24xlarge", bundle_path="/srv/b"))
    assert rendered.image == "ghcr.io/huggingface/optimum-neuron-vllm:0.4.5"
    files = _files(rendered)
    compose = yaml.safe_load(files["docker-compose.yml"])
    replicas = {k: s for k, s in compose["services"].items() if k.startswith("vllm-")}
    assert len(replicas) == 6
    for service in replicas.values():
        assert service["image"] == rendered.image
        assert service["environment"] == {
            "SM_ON_MODEL": "/bundle/artifacts",
            "SM_ON_SERVED_MODEL_NAME": "meta-llama/Llama-3.1-8B",
            "SM_ON_TENSOR_PARALLEL_SIZE": "2",
            "SM_ON_BATCH_SIZE": "8",
            "SM_ON_SEQUENCE_LENGTH": "4096",
        }
        assert service["volumes"] == [
            {"type": "bind", "source": "/srv/b/model", "target": "/bundle/model", "read_only": True},
            {"type": "bind", "source": "/srv/b/artifacts", "target": "/bundle/artifacts", "read_only": True},
        ]
    assert re.search(r"server vllm-0:8080 ", files["nginx.conf"])
    argv = _exec_argv(files["serve.sh"])
    assert argv[:3] == ["optimum-cli", "neuron", "serve"]
    assert _flags(argv[3:])["--model"] == "/srv/b/artifacts"


def test_optimum_bundle_with_a_shorter_context_caps_vllm_at_it(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", sequence=SEQ)
    files = _files(render(bundle, "vllm"))
    env = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]["environment"]
    assert env["SM_ON_SEQUENCE_LENGTH"] == "4096" and env["SM_ON_MAX_MODEL_LEN"] == "2048"
    assert _flags(_exec_argv(files["serve.sh"])[3:])["--max-model-len"] == "2048"


@pytest.mark.parametrize("stack", ["vllm", "sagemaker"])
def test_optimum_bundle_without_a_matching_image_is_refused_with_its_versions(tmp_path: Path, stack: str) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", toolchain={"optimum-neuron": "0.4.5", "neuronx-cc": "2.21.18209.0"})
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, stack)
    assert "optimum-neuron 0.4.5, neuronx-cc 2.21.18209.0" in str(caught.value)
    assert "optimum-neuron 0.4.5 + neuronx-cc 2.21.33363.0" in str(caught.value.hint)
    rendered = render(bundle, stack, DeployOptions(image="registry.example/my-optimum:0.4.5"))
    assert rendered.image == "registry.example/my-optimum:0.4.5"


def test_the_image_table_is_consistent() -> None:
    families = {i.family for i in image_table.IMAGES}
    assert families == set(image_table.FAMILY_WORDS)
    for image in image_table.IMAGES:
        assert image_table.public(image.neuronx_cc) is not None
        assert (image.optimum_neuron is None) == (image.family == "vllm-neuron")
    tags = [i.image for i in image_table.IMAGES]
    assert len(tags) == len(set(tags))


# -- TGI -------------------------------------------------------------------------------------------


def test_tgi_refuses_optimum_0_4_bundles_and_names_the_target_to_use(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron")
    with pytest.raises(InvalidInputError, match=r"TGI.s neuron images ship optimum-neuron 0\.3\.0") as caught:
        render(bundle, "tgi")
    assert "--for vllm" in str(caught.value.hint)


@pytest.mark.parametrize(
    ("tp", "instance", "replicas"), [(2, "inf2.48xlarge", 12), (8, None, 1), (24, "inf2.48xlarge", 1)]
)
def test_tgi_serves_optimum_0_3_bundles(tmp_path: Path, tp: int, instance: str | None, replicas: int) -> None:
    toolchain = {"optimum-neuron": "0.3.0", "neuronx-cc": "2.19.8089.0+8ab9f450"}
    bundle = _bundle(tmp_path, "optimum-neuron", toolchain=toolchain, tp_degree=tp, sequence=FULL)
    rendered = render(bundle, "tgi", DeployOptions(instance_type=instance, port=9090))
    assert rendered.image == "ghcr.io/huggingface/text-generation-inference:3.3.7-neuron"
    files = _files(rendered)
    assert _env(files[".env"]) == {
        "MODEL_ID": "/bundle/artifacts",
        "HF_NUM_CORES": str(tp),
        "HF_AUTO_CAST_TYPE": "bf16",
        "MAX_BATCH_SIZE": "4",
        "MAX_INPUT_TOKENS": "4095",  # max_length - 1: TGI requires it below the sequence length
        "MAX_TOTAL_TOKENS": "4096",
        "MAX_BATCH_PREFILL_TOKENS": str(4 * 4095),
    }
    services = yaml.safe_load(files["docker-compose.yml"])["services"]
    assert len([s for s in services if s.startswith("tgi-")]) == replicas
    assert services["nginx"]["ports"] == ["9090:80"]
    assert files["nginx.conf"].count("server tgi-") == replicas


def test_tgi_input_cap_is_the_largest_context_bucket_when_shorter(tmp_path: Path) -> None:
    toolchain = {"optimum-neuron": "0.3.0", "neuronx-cc": "2.19.8089.0"}
    bundle = _bundle(tmp_path, "optimum-neuron", toolchain=toolchain, sequence=SEQ)
    assert _env(_files(render(bundle, "tgi"))[".env"])["MAX_INPUT_TOKENS"] == "2048"


# -- SageMaker -------------------------------------------------------------------------------------


def test_sagemaker_uses_the_vllm_container_for_optimum_0_4(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2, sequence=FULL)
    options = DeployOptions(s3_uri="s3://models/llama", role_arn="arn:aws:iam::1:role/sm", region="eu-west-1")
    rendered = render(bundle, "sagemaker", options)
    files = _files(rendered)
    model = json.loads(files["create-model.json"])
    container = model["PrimaryContainer"]
    assert container["Image"] == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/huggingface-vllm-inference-neuronx:"
        "0.11.0-optimum0.4.5-neuronx-py310-sdk2.26.1-ubuntu22.04"
    )
    assert container["ModelDataSource"]["S3DataSource"] == {
        "S3Uri": "s3://models/llama/",
        "S3DataType": "S3Prefix",
        "CompressionType": "None",
    }
    assert container["Environment"]["SM_ON_MODEL"] == "/opt/ml/model/artifacts"
    assert container["Environment"]["SM_ON_BATCH_SIZE"] == "4"
    assert not [k for k in container["Environment"] if not k.startswith("SM_ON_")]
    variant = json.loads(files["create-endpoint-config.json"])["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.inf2.xlarge"
    assert 600 <= variant["ContainerStartupHealthCheckTimeoutInSeconds"] <= 3600
    assert 60 <= variant["ModelDataDownloadTimeoutInSeconds"] <= 3600
    assert "aws s3 sync" in files["deploy.sh"]


def test_sagemaker_timeouts_grow_with_the_bundle() -> None:
    from dataclasses import replace

    from neuronc.deploy._values import ServingValues
    from neuronc.deploy.sagemaker import timeouts

    small = ServingValues(
        bundle="/b", model_id="m", backend="optimum-neuron", target="inf2", tp_degree=2,
        batch_size=1, amp="bf16", max_length=64, max_context_length=64, context_buckets=(64,),
        config_hash="0" * 64, weights="presharded", toolchain={},
    )  # fmt: skip
    big = replace(small, bundle_bytes=20 * 1024**3)
    assert timeouts(small) < timeouts(big) and timeouts(big)[1] == 600 + 60 * 20
    assert timeouts(replace(small, bundle_bytes=500 * 1024**3)) == (3600, 3600)


def test_sagemaker_refuses_optimum_0_3(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", toolchain={"optimum-neuron": "0.3.0", "neuronx-cc": "2.19.8089.0"})
    with pytest.raises(InvalidInputError, match=r"0\.4\.x exports only") as caught:
        render(bundle, "sagemaker")
    assert "--for tgi" in str(caught.value.hint)


# -- TorchServe ------------------------------------------------------------------------------------


def test_torchserve_handler_keys_are_the_manifest_settings(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "transformers-neuronx", amp="fp16")
    m = read_manifest(bundle)
    files = _files(render(bundle, "torchserve"))
    config = yaml.safe_load(files["model-config.yaml"])
    handler = config["handler"]
    assert set(handler) == set(HANDLER_KEYS)  # exactly the keys neuronc_tnx_handler.py reads
    recorded = m.extra["transformers_neuronx"]["from_pretrained"]
    assert {k: handler[k] for k in ("batch_size", "tp_degree", "amp", "n_positions", "context_length_estimate")} == {
        k: recorded[k] for k in ("batch_size", "tp_degree", "amp", "n_positions", "context_length_estimate")
    }
    assert handler["amp"] == "f16" and handler["from_pretrained_extra"] == {"unroll": 4}
    assert (handler["model_module"], handler["model_class"]) == ("transformers_neuronx.llama.model", "LlamaForSampling")
    assert handler["longest_prompt"] == 2048 and handler["max_length"] == 4096
    assert config["batchSize"] == 4 and config["minWorkers"] == config["maxWorkers"] == 1
    assert "continuousBatching" not in config
    assert files["neuronc_tnx_handler.py"].startswith('"""TorchServe handler for a neuronc')
    archiver = [shlex.split(li) for li in files["archive.sh"].splitlines() if li.startswith("torch-model-archiver")]
    assert _flags(archiver[0][1:])["--handler"] == "neuronc_tnx_handler.py"
    routes = _scenario(files)["spec"]["backend"]["api_routes"]
    assert routes["/v1/completions"] == f"predictions/{_flags(archiver[0][1:])['--model-name']}"


def test_torchserve_listens_where_the_benchmark_points(tmp_path: Path) -> None:
    """--port sets TorchServe's inference_address (config.properties), which the start line passes."""
    bundle = _bundle(tmp_path, "transformers-neuronx")
    files = _files(render(bundle, "torchserve", DeployOptions(port=9000)))
    assert "inference_address=http://0.0.0.0:9000" in files["config.properties"].splitlines()
    start = next(line for line in files["archive.sh"].splitlines() if line.startswith("echo 'start: "))
    assert "--ts-config config.properties" in start
    assert _scenario(files)["spec"]["backend"]["target"] == "http://localhost:9000"


def test_torchserve_module_paths_cover_every_class_the_backend_records() -> None:
    from neuronc.backends.neuron.transformers_neuronx import MODEL_CLASSES
    from neuronc.deploy.torchserve import TNX_MODULES

    assert set(MODEL_CLASSES.values()) <= set(TNX_MODULES)
    assert TNX_MODULES["GPTNeoXForSampling"] == "transformers_neuronx.gptneox.model"


def test_torchserve_refuses_a_reference_weights_bundle(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "transformers-neuronx", weights="reference")
    with pytest.raises(InvalidInputError, match="no checkpoint"):
        render(bundle, "torchserve")


# -- GuideLLM hand-off -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "stack", "toolchain", "prompt_cap", "total_cap"),
    [
        ("nxdi", "vllm", None, 2048, 2048),
        ("optimum-neuron", "vllm", None, 2048, 2048),
        ("optimum-neuron", "tgi", {"optimum-neuron": "0.3.0", "neuronx-cc": "2.19.8089.0"}, 2048, 4096),
        ("optimum-neuron", "sagemaker", None, 2048, 2048),
        ("transformers-neuronx", "torchserve", None, 2048, 4096),
    ],
)
def test_every_target_writes_a_benchmark_sized_to_the_bundle(
    tmp_path: Path, backend: str, stack: str, toolchain: dict[str, str] | None, prompt_cap: int, total_cap: int
) -> None:
    bundle = _bundle(tmp_path, backend, toolchain=toolchain)
    files = _files(render(bundle, stack))
    assert _exec_argv(files["benchmark.sh"])[:4] == ["guidellm", "run", "--scenario", "guidellm-scenario.json"]
    spec = _scenario(files)["spec"]
    [data] = spec["data"]
    assert data["kind"] == "synthetic_text"
    assert data["prompt_tokens"] <= data["prompt_tokens_max"] < prompt_cap
    assert data["prompt_tokens_max"] + data["output_tokens_max"] < total_cap
    assert spec["profile"]["kind"] == "sweep" and spec["profile"]["max_concurrency"] >= 4
    assert spec["outputs"][0]["kind"] == "json"


# -- compatibility, the CLI and writing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "stack", "hint"),
    [
        ("nxdi", "tgi", "--for vllm"),
        ("transformers-neuronx", "vllm", "--for torchserve"),
        ("optimum-neuron", "torchserve", "--for vllm"),
        ("nxdi", "sagemaker", "--for vllm"),
    ],
)
def test_stack_refuses_a_backend_it_cannot_serve(tmp_path: Path, backend: str, stack: str, hint: str) -> None:
    bundle = _bundle(tmp_path, backend)
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, stack)
    assert caught.value.hint is not None and hint in caught.value.hint


def test_deploy_cli_writes_files_and_leaves_the_bundle_intact(tmp_path: Path, runner: CliRunner) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron")
    out.reset()
    target = tmp_path / "vllm"
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "vllm", "--out", str(target), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["image"] == "ghcr.io/huggingface/optimum-neuron-vllm:0.4.5" and data["notes"] == []
    names = sorted(Path(f["path"]).name for f in data["files"])
    # verdict.json: the pre-boot verdict the files were written under.
    assert names == [
        "benchmark.sh",
        "docker-compose.yml",
        "guidellm-scenario.json",
        "nginx.conf",
        "serve.sh",
        "verdict.json",
    ]
    assert sorted(p.name for p in target.iterdir()) == names  # no temporary files left behind
    assert (target / "serve.sh").stat().st_mode & 0o111 and not (target / "nginx.conf").stat().st_mode & 0o111
    assert verify_bundle(bundle).ok  # nothing was written into the bundle


def test_deploy_cli_says_plainly_what_is_wrong(tmp_path: Path, runner: CliRunner) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron")
    out.reset()
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "k8s"])
    assert result.exit_code == 2
    assert (
        "--for k8s: not a serving stack neuronc knows; choose one of vllm, tgi, torchserve, sagemaker" in result.stderr
    )
    assert "Value error" not in result.stderr and "is not one of" not in result.stderr
    out.reset()
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "torchserve", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["exit_code"] == 2 and "--for vllm" in error["hint"]
    out.reset()
    result = runner.invoke(app, ["deploy", str(tmp_path / "nope"), "--for", "vllm"])
    assert result.exit_code == 2


def test_deploy_of_a_cpu_bundle_gives_the_way_forward(tmp_path: Path, runner: CliRunner) -> None:
    bundle = _bundle_cpu(tmp_path)
    out.reset()
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "vllm", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert "neuronc run" in error["hint"] and "nxdi" in error["hint"]


def _bundle_cpu(tmp_path: Path) -> Path:
    spec = make_spec(backend="inductor", target="cpu", tp_degree=1, amp="fp32")
    key = spec_key(spec)
    with BundleWriter(tmp_path / "cpu-bundle") as writer:
        writer.write_bytes("artifacts/graph.pt2", b"x")
        return writer.finish(BuildRecord.for_build(spec, key, {"neuronc": "0.1.0"}))


def test_write_replaces_older_files_atomically(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi")
    rendered = render(bundle, "vllm")
    target = tmp_path / "out"
    target.mkdir()
    (target / "serve.sh").write_text("old")
    write(rendered, target)
    assert (target / "serve.sh").read_text() == _files(rendered)["serve.sh"]
    assert not [p for p in target.iterdir() if p.name.startswith(".")]


def test_each_deploy_module_imports_first_without_a_cycle_or_torch() -> None:
    """Imported first, in a fresh interpreter, each module of neuronc.deploy loads (an import cycle
    fails exactly then: "partially initialized module") and leaves torch unimported."""
    import subprocess
    import sys

    code = """
import importlib, pkgutil, sys
import neuronc.deploy
names = sorted(m.name for m in pkgutil.iter_modules(neuronc.deploy.__path__, "neuronc.deploy."))
assert len(names) >= 8, names
failed = []
for name in ["neuronc.deploy", *names]:
    for loaded in [m for m in sys.modules if m == "neuronc" or m.startswith("neuronc.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed.append(f"{name}: {exc}")
    if "torch" in sys.modules:
        failed.append(f"{name} imports torch")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize(("lnc", "fits"), [(1, True), (2, False)])
def test_trn2_placement_counts_physical_cores_at_lnc_1(tmp_path: Path, lnc: int, fits: bool) -> None:
    """tp 8 on trn2.3xlarge (one device: 8 physical cores, 4 logical at LNC=2) fits only at LNC=1."""
    bundle = _bundle(tmp_path, "nxdi", target="trn2", batch_size=1, options={"logical_nc_config": lnc})
    options = DeployOptions(image="registry.example/vllm-neuron:test", instance_type="trn2.3xlarge")
    if not fits:
        with pytest.raises(InvalidInputError, match="has 4 NeuronCores; the bundle needs 8"):
            render(bundle, "vllm", options)
        return
    compose = yaml.safe_load(_files(render(bundle, "vllm", options))["docker-compose.yml"])
    assert [name for name in compose["services"] if name != "nginx"] == ["vllm-0"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (DeployOptions(instance_type="inf2.48xlarge", replicas=7), "--replicas 7: inf2.48xlarge fits 1 to 6 replicas"),
        (DeployOptions(instance_type="inf2.48xlarge", replicas=0), "--replicas 0: inf2.48xlarge fits 1 to 6 replicas"),
        (DeployOptions(instance_type="inf2.huge"), "--instance-type inf2.huge: not a known Neuron instance type"),
        (DeployOptions(instance_type="trn1.32xlarge"), "is trn1; the bundle was compiled for inf2"),
        (DeployOptions(instance_type="inf2.xlarge"), "inf2.xlarge has 2 NeuronCores; the bundle needs 4 per replica"),
    ],
)
def test_compose_placement_refusals_name_the_instance_and_its_limits(
    tmp_path: Path, options: DeployOptions, message: str
) -> None:
    toolchain = {"neuronx-cc": "2.23.6484.0+3b612583", "neuronx-distributed-inference": "0.8.16251+f3ca5575"}
    bundle = _bundle(tmp_path, "nxdi", toolchain=toolchain, tp_degree=4, sequence=FULL)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        render(bundle, "vllm", options)


def test_sagemakers_ml_prefix_is_accepted_for_the_instance_type(tmp_path: Path) -> None:
    toolchain = {"neuronx-cc": "2.23.6484.0+3b612583", "neuronx-distributed-inference": "0.8.16251+f3ca5575"}
    bundle = _bundle(tmp_path, "nxdi", toolchain=toolchain, tp_degree=4, sequence=FULL)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="ml.inf2.48xlarge", replicas=2))
    compose = yaml.safe_load(_files(rendered)["docker-compose.yml"])
    assert sorted(s for s in compose["services"] if s != "nginx") == ["vllm-0", "vllm-1"]
