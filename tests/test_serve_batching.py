"""`neuronc serve` of a 4-slot bundle (the demo model, batch_size 4, a chat template added): continuous
batching gives each request the text it gets alone, and chat completions apply the tokenizer's template.

Slow: the 4-slot bundle is a real AOTInductor compile of its own (the session demo is batch 1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _demo import ROOT
from _serve import REPO, Server, start_server

pytest.importorskip("uvicorn", reason="the serve extra")
pytestmark = pytest.mark.slow

TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
# Prompts of different lengths (the last past 32 tokens: the second context bucket) and budgets, so
# that rows stop at different steps and waiting requests join while others decode.
REQUESTS = [
    ("The quick brown fox", 40),
    ("Alice was beginning to get very tired of sitting by her sister on the bank", 12),
    ("Down the rabbit hole", 64),
    ("The Queen of Hearts, she made some tarts, all on a summer day: the Knave of Hearts, he stole those tarts, "
     "and took them quite away", 20),
    ("Curiouser and curiouser", 30),
    ("Who are you?", 8),
    ("Off with her head", 50),
    ("It was the White Rabbit", 16),
]  # fmt: skip


@pytest.fixture(scope="module")
def four_slots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from neuronc.pipeline import compile_profiles

    root = tmp_path_factory.mktemp("four-slots")
    model = root / "models" / "tiny-llama"
    shutil.copytree(ROOT / "profiles" / "models" / "tiny-llama", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}, indent=2))
    profile = root / "four-slots.yaml"
    text = (ROOT / "profiles" / "tiny-llama-cpu.yaml").read_text()
    profile.write_text(text.replace("batch_size: 1", "batch_size: 4").replace("name: tiny-llama-cpu", "name: four"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURONC_GRAPH_CACHE", str(root / "graphs"))
        [report] = compile_profiles([profile], store=root / "store", jobs=2)
    assert report.status == "built", report.error
    return Path(report.bundle or "")


@pytest.fixture(scope="module")
def server(four_slots: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(four_slots, tmp_path_factory.mktemp("serve") / "serve.log")
    yield running
    assert running.stop() == 0


def _run(bundle: Path, prompt: str, tokens: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "neuronc", "run", str(bundle), "-p", prompt, "-n", str(tokens), "--json"]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=True)
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _concurrently(server: Server, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in bodies]
    barrier = threading.Barrier(len(bodies))

    def one(i: int) -> None:
        barrier.wait()
        results[i] = server.complete(**bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results


def test_batched_greedy_text_is_each_request_s_run_text(server: Server, four_slots: Path) -> None:
    bodies = [{"prompt": p, "max_tokens": n, "temperature": 0} for p, n in REQUESTS]
    served = _concurrently(server, bodies)
    for (prompt, tokens), answer in zip(REQUESTS, served, strict=True):
        ran = _run(four_slots, prompt, tokens)
        assert answer["choices"][0]["text"] == ran["text"], prompt
        assert answer["usage"]["completion_tokens"] == ran["generated_tokens"]
    assert any(_run(four_slots, p, 1)["context_bucket"] == 64 for p, _ in REQUESTS)  # both buckets were used


def test_seeded_sampling_does_not_depend_on_the_batch(server: Server) -> None:
    body = {"prompt": REQUESTS[0][0], "max_tokens": 24, "temperature": 1.0, "top_p": 0.9, "seed": 11}
    alone = server.complete(**body)["choices"][0]["text"]
    others = [{"prompt": p, "max_tokens": n, "temperature": 1.0} for p, n in REQUESTS[1:4]]
    together = _concurrently(server, [body, *others])
    assert together[0]["choices"][0]["text"] == alone


def test_chat_completions_apply_the_template(server: Server, four_slots: Path) -> None:
    from transformers import AutoTokenizer

    messages = [{"role": "system", "content": "You are Alice."}, {"role": "user", "content": "Who are you?"}]
    tokenizer = AutoTokenizer.from_pretrained(str(four_slots / "model"))
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) else ids
    as_completion = server.complete(prompt=list(ids), max_tokens=20, temperature=0)
    status, _, chat = server.request(
        "POST", "/v1/chat/completions", {"messages": messages, "max_completion_tokens": 20, "temperature": 0}
    )
    assert status == 200, chat
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": as_completion["choices"][0]["text"]}
    assert chat["usage"] == as_completion["usage"]
    events = [
        e
        for e in server.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
        if isinstance(e, dict)
    ]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(e["choices"][0]["delta"]["content"] for e in events) == chat["choices"][0]["message"]["content"]
    status, _, error = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
    assert (status, error["error"]["param"]) == (400, "messages[0].role")
    # no max_tokens: the rest of max_length
    status, _, full = server.request("POST", "/v1/chat/completions", {"messages": messages, "ignore_eos": True})
    assert full["usage"]["completion_tokens"] == 128 - len(ids)
