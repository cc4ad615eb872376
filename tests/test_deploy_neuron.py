"""On an inf2/trn1 host: compile, deploy, start the server from the emitted files, get one completion;
on a Trn2/Trn3 host the same for a vllm-neuron (torch.compile) bundle, with a cache miss made fatal.

Marked ``neuron``: skipped unless a Neuron device is present and the serving stack's command is
installed (``vllm`` with the vllm-neuron plugin, ``optimum-cli`` with optimum-neuron[vllm],
``torchserve`` + ``torch-model-archiver`` with transformers-neuronx). The model is
``NEURONC_SERVING_MODEL`` (default TinyLlama/TinyLlama-1.1B-Chat-v1.0, from the Hub), compiled at
tp 2, batch 2, 1024 tokens. Not run yet: no Neuron hardware was available while writing them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from _serving import VLLM_READY_OPTIONS
from click.testing import CliRunner

from neuronc._output import out
from neuronc.backends.neuron.env import host_platform, neuron_device_present
from neuronc.cli import app

pytestmark = [
    pytest.mark.neuron,
    pytest.mark.skipif(not neuron_device_present(), reason="no Neuron device (/dev/neuron0 or /proc/devices)"),
]
MODEL = os.environ.get("NEURONC_SERVING_MODEL", "TinyLlama/TinyLlama-1.1B-Chat-v1.0")
PORT = 18080
START_TIMEOUT_S = 1800

CASES = {
    "nxdi": ("vllm", ["vllm"], {"options": VLLM_READY_OPTIONS}),
    "optimum-neuron": ("vllm", ["optimum-cli"], {}),
    "transformers-neuronx": ("torchserve", ["torchserve", "torch-model-archiver"], {}),
}


def _compile(tmp_path: Path, backend: str, extra: dict[str, Any], target: str = "inf2") -> Path:
    buckets = {} if backend == "optimum-neuron" else {"context_buckets": [256, 512], "token_buckets": [1024]}
    profile = {
        "model": {"id": MODEL},
        "backend": backend,
        "target": target,
        "tp_degree": 2,
        "batch_size": 2,
        "amp": "bf16",
        "sequence": {"max_length": 1024, **buckets},
        "weights": "on-load" if backend == "vllm-neuron" else "presharded",
        **extra,
    }
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    out.reset()
    result = CliRunner().invoke(app, ["compile", str(path), "--json", "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    return Path(json.loads(result.stdout)["builds"][0]["bundle"])


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        data = json.loads(response.read())
        assert isinstance(data, dict)
        return data


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited while starting"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(5)
    raise AssertionError(f"{url} did not answer within {START_TIMEOUT_S}s")


@pytest.mark.parametrize("backend", sorted(CASES))
def test_compile_deploy_serve_one_completion(backend: str, tmp_path: Path) -> None:
    stack, commands, extra = CASES[backend]
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    bundle = _compile(tmp_path, backend, extra)
    deploy = tmp_path / "deploy"
    out.reset()
    result = CliRunner().invoke(app, ["deploy", str(bundle), "--for", stack, "--out", str(deploy), "--port", str(PORT)])
    assert result.exit_code == 0, result.output
    if stack == "torchserve":
        subprocess.run(["sh", str(deploy / "archive.sh")], check=True)
        name = next(p.name for p in (deploy / "model_store").iterdir() if p.is_dir())
        argv = ["torchserve", "--start", "--foreground", "--ncs", "--disable-token-auth", "--ts-config",
                str(deploy / "config.properties"), "--model-store", str(deploy / "model_store"), "--models", name]  # fmt: skip
        health, url, body = f"http://localhost:{PORT}/ping", f"http://localhost:{PORT}/predictions/{name}", {}
    else:
        argv = ["sh", str(deploy / "serve.sh")]
        health, url = f"http://localhost:{PORT}/v1/models", f"http://localhost:{PORT}/v1/completions"
        body = {"model": MODEL}
    process = subprocess.Popen(argv, start_new_session=True)
    try:
        _wait(health, process)
        answer = _post(url, {**body, "prompt": "The capital of France is", "max_tokens": 8})
        assert answer["choices"][0]["text"], answer
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)


@pytest.mark.skipif(host_platform() not in ("trn2", "trn3"), reason="the vllm-neuron backend serves on Trn2/Trn3")
def test_vllm_neuron_bundle_serves_from_its_cache_with_a_miss_fatal(tmp_path: Path) -> None:
    """Compile (the plugin's CPU compile, on this host or in the release's DLC), deploy, start serve.sh (which
    sets VLLM_NEURON_DISABLE_WARMUP_COMPILE=1: a graph missing from the bundle's cache stops the server),
    one completion."""
    if shutil.which("vllm") is None:
        pytest.skip("vllm (with the vllm-neuron plugin) not installed")
    target = host_platform()
    assert target is not None
    bundle = _compile(tmp_path, "vllm-neuron", {"options": {"logical_nc_config": 2}}, target=target)
    deploy = tmp_path / "deploy"
    out.reset()
    result = CliRunner().invoke(
        app, ["deploy", str(bundle), "--for", "vllm", "--out", str(deploy), "--port", str(PORT)]
    )
    assert result.exit_code == 0, result.output
    assert "VLLM_NEURON_DISABLE_WARMUP_COMPILE=1" in (deploy / "vllm.env").read_text()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(["sh", str(deploy / "serve.sh")], start_new_session=True, stdout=log, stderr=log)
    try:
        _wait(f"http://localhost:{PORT}/v1/models", process)
        answer = _post(
            f"http://localhost:{PORT}/v1/completions",
            {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8},
        )
        assert answer["choices"][0]["text"], answer
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)
        log.close()
