"""On a Trn2/Trn3 host with the Neuron SDK's vllm-neuron plugin: compile, serve from the bundle, generate.

Marked ``neuron`` and skipped without a Neuron device, a Trn2/Trn3 host or the plugin installed; it
has not run yet (no such host was available). Run it there (docs/backends.md, "Hardware tests")::

    NEURONC_VLLM_NEURON_RUNNER=host pytest -m neuron tests/test_backend_vllm_neuron_hardware.py -v

1. ``neuronc compile`` the demo model (profiles/models/tiny-llama) with ``backend: vllm-neuron`` on
   this host (the plugin's own CPU compile mode fills the bundle's compile cache);
2. move the checkpoint away and start ``vllm serve`` from the bundle alone with its own serve lines
   (``extra.load_snippet``: a writable ``VLLM_CACHE_ROOT`` seeded from the bundle and
   ``VLLM_NEURON_DISABLE_WARMUP_COMPILE=1``, so a cache miss is a start-up error, not a compile);
3. complete the prompt greedily through the OpenAI API and compare the tokens with the Hugging Face
   model's greedy tokens on CPU (a divergence allowed only where the reference's top two logits tie,
   as in tests/test_backend_neuron_hardware.py);
4. ``neuronc verify --against-env`` the bundle (the release that built it is installed here).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_backend_neuron_hardware import DEMO, DIVERGENCE_TOLERANCE, NEW_TOKENS, PROMPT, _hf_reference

from neuronc._output import out
from neuronc.backends import get_backend
from neuronc.backends.neuron.env import host_platform, neuron_device_present
from neuronc.bundle import BUNDLE_PLACEHOLDER, read_manifest
from neuronc.cli import app

PROFILE = """
model: {id: ./model}
backend: vllm-neuron
target: TARGET
tp_degree: 1
batch_size: 1
amp: bf16
sequence: {max_length: 256, context_buckets: [128], token_buckets: [256]}
"""
START_TIMEOUT_S = 900  # loading NEFFs from the cache; a compile would take far longer and is refused

needs_a_trn_host = pytest.mark.skipif(
    not neuron_device_present() or host_platform() not in ("trn2", "trn3"),
    reason="needs a Trn2 or Trn3 host with a Neuron device",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"vllm serve exited with {server.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(5)
    pytest.fail(f"vllm serve did not answer in {START_TIMEOUT_S}s:\n{log.read_text(errors='replace')[-4000:]}")


def _complete(port: int) -> dict[str, Any]:
    body = {
        "model": "model",  # a local model is served under its directory name
        "prompt": PROMPT,
        "max_tokens": NEW_TOKENS,
        "min_tokens": NEW_TOKENS,
        "temperature": 0,
        "logprobs": 1,
        "return_tokens_as_token_ids": True,
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return dict(json.loads(response.read()))


def _divergence(expected: dict[str, Any], tokens: list[int]) -> str | None:
    """Why ``tokens`` leave the reference's greedy tokens (None when they agree or diverge at a tie)."""
    import torch

    for step, (want, got) in enumerate(zip(expected["tokens"], tokens, strict=False)):
        if want != got:
            top2 = torch.topk(expected["logits"][step], 2).values
            gap = (top2[0] - top2[1]).item() / max(abs(top2[0].item()), 1e-6)
            return None if gap <= DIVERGENCE_TOLERANCE else f"step {step}: token {got} instead of {want} ({gap:.2%})"
    return None


@pytest.mark.neuron
@needs_a_trn_host
def test_a_bundle_serves_from_its_own_cache_and_generates(tmp_path: Path) -> None:
    if not get_backend("vllm-neuron").host_availability().available:  # type: ignore[attr-defined]
        pytest.skip("the vllm-neuron plugin is not installed on this host")
    os.environ.setdefault("NEURONC_VLLM_NEURON_RUNNER", "host")
    shutil.copytree(DEMO, tmp_path / "model")
    profile = tmp_path / "profile.yaml"
    profile.write_text(textwrap.dedent(PROFILE).replace("TARGET", host_platform() or "trn2"))
    out.reset()
    result = CliRunner().invoke(app, ["compile", str(profile), "--out", str(tmp_path / "bundle"), "--json"])
    assert result.exit_code == 0, result.stderr
    bundle = Path(json.loads(result.stdout)["builds"][0]["bundle"])
    (tmp_path / "model").rename(tmp_path / "checkpoint-moved-away")

    snippet = str(read_manifest(bundle).extra["load_snippet"]).replace(BUNDLE_PLACEHOLDER, str(bundle))
    assert "VLLM_NEURON_DISABLE_WARMUP_COMPILE=1" in snippet
    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            ["bash", "-c", f"{snippet} --port {port}"], stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_ready(port, server, log)
        reply = _complete(port)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    choice = reply["choices"][0]
    tokens = [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]
    assert len(tokens) == NEW_TOKENS and choice["finish_reason"] == "length", reply
    problem = _divergence(_hf_reference(), tokens)
    assert problem is None, problem

    out.reset()
    verified = CliRunner().invoke(app, ["verify", str(bundle), "--against-env"])
    assert verified.exit_code == 0, verified.stderr
