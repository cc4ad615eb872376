"""`neuronc serve` of the demo bundle (batch 1), driven over HTTP as a real process.

The demo bundle comes from the session fixture (tests/conftest.py); each module-scoped server is one
`neuronc serve` process. What is checked: the greedy text `neuronc run` prints, streamed and not; a
400 naming the field for each bad field and naming the limit for each compiled shape; 429 with
Retry-After beyond the queue; a disconnected stream freeing its slot; SIGTERM and Ctrl-C with
requests in flight; bundles refused before the port opens; `serve --help` without torch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _demo import Demo
from _serve import REPO, Server, serve_command, start_server

pytest.importorskip("uvicorn", reason="the serve extra")

PROMPTS = ["The quick brown fox", "Alice was beginning to get very tired"]


@pytest.fixture(scope="module")
def server(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    running = start_server(demo.bundle, log, env=demo.env())
    yield running
    assert running.stop() == 0, log.read_text()


@pytest.mark.parametrize(("prompt", "tokens"), [(PROMPTS[0], 24), (PROMPTS[1], 40)])
def test_greedy_text_is_run_s_text(server: Server, demo: Demo, prompt: str, tokens: int) -> None:
    ran = demo.run_json(prompt, "--max-new-tokens", str(tokens))
    served = server.complete(prompt=prompt, max_tokens=tokens, temperature=0)
    [choice] = served["choices"]
    assert choice["text"] == ran["text"]
    assert served["usage"] == {
        "prompt_tokens": ran["prompt_tokens"],
        "completion_tokens": ran["generated_tokens"],
        "total_tokens": ran["prompt_tokens"] + ran["generated_tokens"],
    }
    assert choice["finish_reason"] == ("length" if ran["stop_reason"] == "max_new_tokens" else "stop")
    events = list(server.stream("/v1/completions", {"prompt": prompt, "max_tokens": tokens, "temperature": 0}))
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert "".join(c["choices"][0]["text"] for c in chunks) == ran["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stream_usage_as_guidellm_asks(server: Server) -> None:
    """include_usage: a last chunk with no choices and the usage; continuous_usage_stats: usage on every chunk."""
    body = {"prompt": PROMPTS[0], "max_tokens": 12, "ignore_eos": True, "temperature": 0}
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = list(server.stream("/v1/completions", {**body, "stream_options": options}))
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == 12
    plain = [e for e in server.stream("/v1/completions", body) if isinstance(e, dict)]
    assert all("usage" not in c for c in plain)


def test_seeded_sampling_repeats_and_top_p_narrows(server: Server) -> None:
    body = {"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 1.5, "seed": 7}
    first = server.complete(**body)["choices"][0]["text"]
    assert server.complete(**body)["choices"][0]["text"] == first
    greedy = server.complete(prompt=PROMPTS[0], max_tokens=16, temperature=0)["choices"][0]["text"]
    # top_p so small that only the most likely token survives: sampling is then greedy
    nucleus = server.complete(**{**body, "top_p": 1e-6})["choices"][0]["text"]
    assert nucleus == greedy


def test_stop_strings_end_the_text(server: Server) -> None:
    text = server.complete(prompt=PROMPTS[0], max_tokens=40, temperature=0)["choices"][0]["text"]
    word = text.split()[3]
    stopped = server.complete(prompt=PROMPTS[0], max_tokens=40, temperature=0, stop=[word, "zzzz"])
    assert stopped["choices"][0]["text"] == text[: text.index(word)]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    events = server.stream("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0, "stop": word})
    streamed = "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict))
    assert streamed == text[: text.index(word)]


def test_models_and_health(server: Server, demo: Demo) -> None:
    from neuronc.bundle import read_manifest

    manifest = read_manifest(demo.bundle)
    status, _, models = server.request("GET", "/v1/models")
    assert status == 200
    [card] = models["data"]
    assert card["bundle_key"] == manifest.config_hash
    assert card["id"] == f"tiny-llama-{manifest.config_hash[:12]}"
    assert (card["max_model_len"], card["batch_size"], card["context_buckets"]) == (128, 1, [32, 64])
    assert server.request("GET", "/health")[0] == 200
    status, _, error = server.request("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"})
    assert (status, error["error"]["param"]) == (404, "model")
    assert server.complete(model=card["id"], prompt="x", max_tokens=2)["model"] == card["id"]
    # the demo tokenizer has no chat template: no chat route
    assert server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})[0] == 404


BAD_FIELDS: list[tuple[Any, str]] = [
    (b"{not json", "body"),
    ([1, 2], "body"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "temperature": 2.5}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "top_p": 1.5}, "top_p"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "8"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": True}, "max_tokens"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "x", "stop": 3}, "stop"),
    ({"prompt": "x", "seed": "s"}, "seed"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "n": 2}, "n"),
    ({"prompt": "x", "logprobs": 3}, "logprobs"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "model": 3}, "model"),
    ({}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, 2, 999999]}, "prompt"),
    ({"prompt": {"text": "x"}}, "prompt"),
]


@pytest.mark.parametrize(("body", "field"), BAD_FIELDS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_FIELDS)])
def test_bad_field_is_a_400_naming_it(server: Server, body: Any, field: str) -> None:
    status, _, error = server.request("POST", "/v1/completions", body)
    assert status == 400, error
    assert error["error"]["param"] == field
    assert error["error"]["type"] == "invalid_request_error"


def test_compiled_shapes_are_the_limits(server: Server) -> None:
    long_prompt = list(range(3, 3 + 65))  # token ids: one past the largest context bucket (64)
    status, _, error = server.request("POST", "/v1/completions", {"prompt": long_prompt, "max_tokens": 1})
    assert status == 400
    assert "largest context bucket of this bundle is 64" in error["error"]["message"]
    assert error["error"]["param"] == "prompt"
    status, _, error = server.request("POST", "/v1/completions", {"prompt": list(range(3, 3 + 64)), "max_tokens": 65})
    assert status == 400
    assert "max_length is 128" in error["error"]["message"] and error["error"]["param"] == "max_tokens"
    # exactly at the limits: served
    served = server.complete(prompt=list(range(3, 3 + 64)), max_tokens=64, ignore_eos=True)
    assert served["usage"]["completion_tokens"] == 64


def test_access_log_has_one_line_per_request(server: Server) -> None:
    before = len(server.access_lines())
    server.complete(prompt="x", max_tokens=3, ignore_eos=True)
    server.request("POST", "/v1/completions", {"prompt": "x", "top_p": 7})
    server.request("GET", "/health")
    time.sleep(0.2)
    lines = server.access_lines()[before:]
    assert len(lines) == 3, lines
    assert '"POST /v1/completions" 200 id=cmpl-' in lines[0] and "completion_tokens=3" in lines[0]
    assert '"POST /v1/completions" 400' in lines[1] and "top_p" in lines[1]
    assert '"GET /health" 200' in lines[2]


def _flood(server: Server, count: int) -> list[tuple[int, dict[str, str]]]:
    results: list[tuple[int, dict[str, str]]] = []
    barrier = threading.Barrier(count)
    body = {"prompt": PROMPTS[1], "max_tokens": 100, "ignore_eos": True}

    def one() -> None:
        barrier.wait()
        status, headers, _ = server.request("POST", "/v1/completions", body)
        results.append((status, headers))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_flood_beyond_the_queue_is_429_with_retry_after(demo: Demo, tmp_path: Path) -> None:
    running = start_server(demo.bundle, tmp_path / "serve.log", "--max-queue", "1", env=demo.env())
    try:
        results = _flood(running, 24)
    finally:
        assert running.stop() == 0
    statuses = sorted(s for s, _ in results)
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
    assert all(h.get("retry-after") == "1" for s, h in results if s == 429)


def test_disconnect_mid_stream_frees_the_slot(demo: Demo, tmp_path: Path) -> None:
    """One slot, no queue: while a stream holds the slot a second request is a 429; once its client goes, it is not."""
    running = start_server(demo.bundle, tmp_path / "serve.log", "--max-queue", "0", env=demo.env())
    try:
        conn = running.connection()
        body = {"prompt": PROMPTS[0], "max_tokens": 120, "ignore_eos": True, "stream": True}
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode())
        response = conn.getresponse()
        assert response.readline().startswith(b"data:")  # the first token is out: the request holds the slot
        response.close()  # the client goes away mid-stream
        conn.close()
        deadline = time.monotonic() + 10
        while not any("finish=disconnected" in line for line in running.access_lines()):
            assert time.monotonic() < deadline, running.log.read_text()
            time.sleep(0.01)
        [line] = [x for x in running.access_lines() if "finish=disconnected" in x]
        generated = int(line.split("completion_tokens=")[1].split()[0])
        assert generated < 120  # dropped before its end
        served = running.complete(prompt=PROMPTS[1], max_tokens=8)  # no queue: a 429 if the slot were held
        assert served["usage"]["completion_tokens"] <= 8
    finally:
        assert running.stop() == 0


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signal_with_requests_in_flight_ends_within_the_bound(
    demo: Demo, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    running = start_server(demo.bundle, tmp_path / "serve.log", "--shutdown-timeout", "3", env=demo.env())
    results: list[int] = []

    def request() -> None:
        try:
            results.append(
                running.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 120, "ignore_eos": True})[0]
            )
        except OSError:
            results.append(-1)

    threads = [threading.Thread(target=request) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    started = time.monotonic()
    assert running.stop(sig, timeout=3 + 5) == code, running.log.read_text()
    assert time.monotonic() - started < 3 + 5
    for t in threads:
        t.join(10)
    assert results and all(r in (200, -1) for r in results), results
    with pytest.raises(ProcessLookupError):
        os.kill(running.proc.pid, 0)


def _copy_bundle(demo: Demo, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(demo.bundle, copy)
    return copy


def _refused(bundle: Path, demo: Demo) -> subprocess.CompletedProcess[str]:
    env = {**demo.env(), "PYTHONPATH": str(REPO)}
    return subprocess.run(serve_command(bundle), capture_output=True, text=True, env=env, timeout=120, check=False)


def test_bundle_failing_verification_is_refused_before_the_port_opens(demo: Demo, tmp_path: Path) -> None:
    bundle = _copy_bundle(demo, tmp_path)
    config = bundle / "model" / "config.json"
    config.write_text(config.read_text() + " ")
    result = _refused(bundle, demo)
    assert result.returncode == 4, result.stderr
    assert "model/config.json" in result.stderr and "http://" not in result.stderr


def test_non_cpu_bundle_is_refused_before_the_port_opens(demo: Demo, tmp_path: Path) -> None:
    bundle = _copy_bundle(demo, tmp_path)
    manifest = bundle / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"target": "cpu"', '"target": "inf2"', 1))
    result = _refused(bundle, demo)
    assert result.returncode == 2, result.stderr
    assert "CPU (inductor) bundles" in result.stderr and "http://" not in result.stderr


def test_serve_help_imports_no_torch() -> None:
    code = "import sys; from neuronc.cli import run_app; run_app(['serve', '--help']); print(sorted(sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    loaded = result.stdout.splitlines()[-1]
    for heavy in ("'torch'", "'transformers'", "'uvicorn'", "'starlette'"):
        assert heavy not in loaded
    assert "--max-queue" in result.stdout and "--host" in result.stdout
