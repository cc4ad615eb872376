"""`neuronc deploy`: parse every emitted file and check each value against the bundle's manifest.

Bundles are real: written by the real BundleWriter with the layout each backend produces (the
Neuron SDK itself is the only thing absent), then read back through read_manifest.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from plugins.fake_backend import make_spec
from typer.testing import CliRunner

from neuronc._output import out
from neuronc.bundle import BundleWriter, Manifest, read_manifest, verify_bundle
from neuronc.cli import app
from neuronc.deploy import DeployOptions, render
from neuronc.errors import InvalidInputError
from neuronc.keys import config_key
from neuronc.spec import ResolvedSequence

SEQ = ResolvedSequence(
    max_length=4096, max_context_length=2048, context_buckets=(512, 1024, 2048), token_buckets=(2048, 4096)
)
TOOLCHAINS = {
    "nxdi": {"neuronx-cc": "2.21.18209.0+043b1bf7", "neuronx-distributed-inference": "0.6.10598"},
    "optimum-neuron": {"optimum-neuron": "0.4.5", "neuronx-cc": "2.21.18209.0+043b1bf7"},
    "transformers-neuronx": {"transformers-neuronx": "0.13.1380", "neuronx-cc": "2.21.18209.0+043b1bf7"},
}
ARTIFACTS = {
    "nxdi": [
        "artifacts/model.pt",
        "artifacts/neuron_config.json",
        "artifacts/weights/tp0_sharded_checkpoint.safetensors",
    ],
    "optimum-neuron": ["artifacts/model.pt", "artifacts/neuron_config.json", "artifacts/config.json"],
    "transformers-neuronx": ["artifacts/neff/a.neff", "artifacts/checkpoint/config.json"],
}


def _bundle(tmp_path: Path, backend: str, **overrides: Any) -> Path:
    """A bundle with the layout ``backend`` writes, through the real writer."""
    fields: dict[str, Any] = {
        "model": make_spec().model.model_copy(update={"id": "meta-llama/Llama-3.1-8B"}),
        "backend": backend,
        "target": "inf2",
        "tp_degree": 8,
        "batch_size": 4,
        "amp": "bf16",
        "sequence": SEQ,
        "compiler_flags": ("-O1", "--model-type=transformer"),
    }
    fields.update(overrides)
    spec = make_spec(**fields)
    key = config_key(spec)
    toolchain = {"neuronc": "0.1.0", **TOOLCHAINS[backend]}
    extra: dict[str, Any] = {}
    if backend == "transformers-neuronx":
        extra["transformers_neuronx"] = {"model_class": "transformers_neuronx.LlamaForSampling"}
    dest = tmp_path / f"bundle-{backend}-{key.short}"
    with BundleWriter(dest) as writer:
        writer.write_text("profile.yaml", "# profile\n")
        writer.write_text("model/config.json", json.dumps({"model_type": "llama", "num_attention_heads": 32}))
        for rel in ARTIFACTS[backend]:
            writer.write_bytes(rel, f"{rel}\n".encode())
        graphs = [
            {"role": "context_encoding", "batch": spec.batch_size, "bucket": b, "artifact": ARTIFACTS[backend][0]}
            for b in SEQ.context_buckets
        ]
        return writer.finish(
            {"spec": spec, "config_key": key, "toolchain": toolchain, "graphs": graphs, "extra": extra}
        )


def _files(tmp_path: Path, bundle: Path, stack: str, **options: Any) -> dict[str, str]:
    return {f.path: f.text for f in render(bundle, stack, DeployOptions(**options))}


def _env(text: str) -> dict[str, str]:
    """Parse KEY=VALUE lines (comments and blank lines ignored), refusing anything else."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line), line
        key, _, value = line.partition("=")
        assert key not in env
        env[key] = value
    return env


def _seq(m: Manifest) -> dict[str, Any]:
    seq = m.profile["sequence"]
    assert isinstance(seq, dict)
    return seq


# -- vLLM ---------------------------------------------------------------------------------------


def test_vllm_command_and_env_come_from_the_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi")
    m = read_manifest(bundle)
    files = _files(tmp_path, bundle, "vllm", port=8000)
    env = _env(files["vllm.env"])
    assert env == {
        "NEURON_COMPILED_ARTIFACTS": f"{bundle.absolute()}/artifacts",
        "VLLM_NEURON_FRAMEWORK": "neuronx-distributed-inference",
        "NEURON_RT_NUM_CORES": str(m.tp_degree),
    }
    exec_line = next(line for line in files["serve.sh"].splitlines() if line.startswith("exec "))
    argv = shlex.split(exec_line)[1:]
    assert argv[:3] == ["vllm", "serve", f"{bundle.absolute()}/model"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags == {
        "--served-model-name": m.model_id,
        "--tensor-parallel-size": str(m.tp_degree),
        "--max-num-seqs": str(m.batch_size),
        "--max-model-len": str(_seq(m)["max_length"]),
        "--block-size": str(_seq(m)["max_length"]),
        "--dtype": "bfloat16",
        "--port": "8000",
    }
    assert ". ./vllm.env" in files["serve.sh"]


def test_vllm_block_size_follows_a_paged_attention_build(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi", options={"neuron_config": {"pa_block_size": 32}})
    argv = shlex.split(
        next(li for li in _files(tmp_path, bundle, "vllm")["serve.sh"].splitlines() if li.startswith("exec "))
    )
    assert argv[argv.index("--block-size") + 1] == "32"


def test_vllm_serves_an_optimum_export_from_its_directory(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2, batch_size=1, amp="fp16")
    files = _files(tmp_path, bundle, "vllm", bundle_path="/srv/bundle")
    argv = shlex.split(next(li for li in files["serve.sh"].splitlines() if li.startswith("exec ")))
    assert argv[:4] == ["exec", "vllm", "serve", "/srv/bundle/artifacts"]
    assert argv[argv.index("--dtype") + 1] == "float16"
    assert _env(files["vllm.env"])["NEURON_COMPILED_ARTIFACTS"] == "/srv/bundle/artifacts"


# -- TGI ----------------------------------------------------------------------------------------


def _nginx_blocks(text: str) -> None:
    depth = 0
    for char in re.sub(r"#.*", "", text):
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0, "a closing brace without an opening one"
    assert depth == 0, "unbalanced braces"


@pytest.mark.parametrize(
    ("tp", "instance", "replicas", "devices_each"),
    [
        (2, "inf2.48xlarge", 12, 1),  # 12 devices of 2 cores: twelve tp-2 replicas
        (8, "inf2.48xlarge", 3, 4),
        (8, None, 1, 4),  # default: the smallest instance with 8 cores (inf2.24xlarge, 6 devices)
        (4, "inf2.24xlarge", 3, 2),
        (24, "inf2.48xlarge", 1, 12),
    ],
)
def test_tgi_env_compose_and_nginx(
    tmp_path: Path, tp: int, instance: str | None, replicas: int, devices_each: int
) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=tp)
    m = read_manifest(bundle)
    files = _files(tmp_path, bundle, "tgi", instance_type=instance, port=9090)

    env = _env(files[".env"])
    seq = _seq(m)
    assert env == {
        "MODEL_ID": "/bundle/artifacts",
        "HF_NUM_CORES": str(m.tp_degree),
        "HF_AUTO_CAST_TYPE": m.profile["amp"],
        "MAX_BATCH_SIZE": str(m.batch_size),
        "MAX_INPUT_TOKENS": str(seq["max_context_length"]),
        "MAX_TOTAL_TOKENS": str(seq["max_length"]),
        "MAX_BATCH_PREFILL_TOKENS": str(m.batch_size * seq["max_context_length"]),
    }
    assert int(env["MAX_INPUT_TOKENS"]) < int(env["MAX_TOTAL_TOKENS"])  # TGI refuses otherwise

    compose = yaml.safe_load(files["docker-compose.yml"])
    services = compose["services"]
    tgi = {name: s for name, s in services.items() if name.startswith("tgi-")}
    assert len(tgi) == replicas
    seen: set[str] = set()
    for service in tgi.values():
        devices = [d.split(":")[0] for d in service["devices"]]
        assert all(re.fullmatch(r"/dev/neuron\d+", d) for d in devices)
        assert all(d.split(":")[0] == d.split(":")[1] for d in service["devices"])
        assert len(devices) == devices_each
        assert not seen & set(devices), "device groups overlap"
        seen |= set(devices)
        assert service["env_file"] == [".env"]
        assert service["volumes"] == [f"{bundle.absolute()}:/bundle:ro"]
        assert "ports" not in service  # only nginx is published
    assert devices_each * 2 >= m.tp_degree  # each replica has its tp cores (2 per inf2 device)
    nginx = services["nginx"]
    assert nginx["ports"] == ["9090:80"]
    assert sorted(nginx["depends_on"]) == sorted(tgi)
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]

    conf = files["nginx.conf"]
    _nginx_blocks(conf)
    upstream = re.search(r"upstream (\S+) \{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server (\S+?)(?::(\d+))?\s.*;$", upstream.group(2), re.M)
    assert sorted(s[0] for s in servers) == sorted(tgi)
    assert {s[1] for s in servers} == {"80"}
    assert re.search(rf"proxy_pass http://{upstream.group(1)};", conf)
    assert re.search(r"^\s*listen 80;$", conf, re.M)


def test_tgi_replicas_option_and_limits(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=8)
    files = _files(tmp_path, bundle, "tgi", instance_type="inf2.48xlarge", replicas=2)
    assert len([s for s in yaml.safe_load(files["docker-compose.yml"])["services"] if s.startswith("tgi-")]) == 2
    with pytest.raises(InvalidInputError, match="fits 1 to 3 replicas"):
        render(bundle, "tgi", DeployOptions(instance_type="inf2.48xlarge", replicas=4))
    with pytest.raises(InvalidInputError, match="needs 8 per replica"):
        render(bundle, "tgi", DeployOptions(instance_type="inf2.8xlarge"))
    with pytest.raises(InvalidInputError, match="compiled for inf2"):
        render(bundle, "tgi", DeployOptions(instance_type="trn1.32xlarge"))


# -- TorchServe -----------------------------------------------------------------------------------


def test_torchserve_model_config_and_archiver_command(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "transformers-neuronx", tp_degree=8, amp="fp16")
    m = read_manifest(bundle)
    files = _files(tmp_path, bundle, "torchserve")
    config = yaml.safe_load(files["model-config.yaml"])
    seq = _seq(m)
    assert config["batchSize"] == m.batch_size
    assert config["minWorkers"] == config["maxWorkers"] == 1
    assert config["continuousBatching"] is True
    assert isinstance(config["maxBatchDelay"], int) and isinstance(config["responseTimeout"], int)
    handler = config["handler"]
    assert handler == {
        "model_path": "model",
        "model_checkpoint_dir": "artifacts/checkpoint",
        "model_module_prefix": "transformers_neuronx",
        "model_class_name": "llama.model.LlamaForSampling",
        "amp": "fp16",
        "tp_degree": m.tp_degree,
        "n_positions": seq["token_buckets"],
        "context_length_estimate": seq["context_buckets"],
        "max_length": seq["max_length"],
        "max_new_tokens": seq["max_length"] - seq["max_context_length"],
        "batch_size": m.batch_size,
        "neuron_cc_flag": " ".join(m.hashed_inputs["compiler_flags"]),
    }
    lines = [shlex.split(li) for li in files["archive.sh"].splitlines() if li.startswith("torch-model-archiver")]
    assert len(lines) == 1
    argv = lines[0]
    assert argv[argv.index("--archive-format") + 1] == "no-archive"
    assert argv[argv.index("--config-file") + 1] == "model-config.yaml"
    name = argv[argv.index("--model-name") + 1]
    assert name.endswith(m.config_hash[:12]) and re.fullmatch(r"[a-z0-9-]+", name)
    copies = [shlex.split(li) for li in files["archive.sh"].splitlines() if li.startswith("cp ")]
    assert [c[2:] for c in copies] == [
        [f"{bundle.absolute()}/model", f"model_store/{name}/model"],
        [f"{bundle.absolute()}/artifacts", f"model_store/{name}/artifacts"],
    ]


# -- SageMaker ------------------------------------------------------------------------------------


def test_sagemaker_uncompressed_s3_model(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2)
    m = read_manifest(bundle)
    files = _files(tmp_path, bundle, "sagemaker", s3_uri="s3://models/llama", role_arn="arn:aws:iam::1:role/sm")
    model = json.loads(files["create-model.json"])
    source = model["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]
    assert source == {"S3Uri": "s3://models/llama/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    assert model["ExecutionRoleArn"] == "arn:aws:iam::1:role/sm"
    env = model["PrimaryContainer"]["Environment"]
    seq = _seq(m)
    assert env["HF_MODEL_ID"] == "/opt/ml/model/artifacts" and "MODEL_ID" not in env
    assert env["HF_NUM_CORES"] == str(m.tp_degree)
    assert env["MAX_BATCH_SIZE"] == str(m.batch_size)
    assert env["MAX_TOTAL_TOKENS"] == str(seq["max_length"])
    assert env["MAX_INPUT_TOKENS"] == str(seq["max_context_length"])
    assert env["HF_AUTO_CAST_TYPE"] == m.profile["amp"]
    config = json.loads(files["create-endpoint-config.json"])
    variant = config["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.inf2.xlarge"  # the smallest inf2 with 2 NeuronCores
    assert variant["ModelName"] == model["ModelName"] == config["EndpointConfigName"]
    endpoint = json.loads(files["create-endpoint.json"])
    assert endpoint["EndpointConfigName"] == config["EndpointConfigName"]
    sync = shlex.split(files["deploy.sh"].splitlines()[4])
    assert sync == ["aws", "s3", "sync", str(bundle.absolute()), "s3://models/llama/"]
    explicit = _files(tmp_path, bundle, "sagemaker", instance_type="ml.inf2.48xlarge")
    assert (
        json.loads(explicit["create-endpoint-config.json"])["ProductionVariants"][0]["InstanceType"]
        == "ml.inf2.48xlarge"
    )


# -- compatibility and the CLI --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "stack", "hint"),
    [
        ("nxdi", "tgi", "--for vllm"),
        ("transformers-neuronx", "vllm", "--for torchserve"),
        ("optimum-neuron", "torchserve", "--for tgi"),
        ("nxdi", "sagemaker", "--for vllm"),
    ],
)
def test_stack_refuses_a_backend_it_cannot_load(tmp_path: Path, backend: str, stack: str, hint: str) -> None:
    bundle = _bundle(tmp_path, backend)
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, stack)
    assert caught.value.hint is not None and hint in caught.value.hint


def test_deploy_cli_writes_files_and_leaves_the_bundle_intact(tmp_path: Path, runner: CliRunner) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron")
    out.reset()
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "tgi", "--out", str(tmp_path / "tgi"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(Path(f["path"]).name for f in data["files"]) == [".env", "docker-compose.yml", "nginx.conf"]
    assert _env((tmp_path / "tgi" / ".env").read_text())["MAX_BATCH_SIZE"] == "4"
    assert verify_bundle(bundle).ok  # nothing was written into the bundle

    out.reset()
    result = runner.invoke(app, ["deploy", str(bundle), "--for", "torchserve", "--out", str(tmp_path / "ts")])
    assert result.exit_code == 2
    assert "--for torchserve cannot serve a bundle built with optimum-neuron" in result.stderr
    out.reset()
    result = runner.invoke(app, ["deploy", str(tmp_path / "nope"), "--for", "vllm"])
    assert result.exit_code == 2
    assert (tmp_path / "serve.sh").exists() is False
