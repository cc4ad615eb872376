"""The emitted TorchServe handler (``neuronc/deploy/tnx_handler.py``) run against the transformers-neuronx
SDK double, whose ``sample()`` is bound to the recorded upstream signatures (HEAD 1ade6d74: Llama /
Mistral / Mixtral ``sample(input_ids, sequence_length, [cache_ids,] start_ids=None, top_k=50, top_p=1.0,
eos_token_override=None, temperature=1.0, ...)``; OPT, GPT-J, GPT-NeoX, BLOOM ``sample(input_ids,
sequence_length, start_ids=None, top_k=50, streamer=None)``) and which follows the loops' EOS rules."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from test_deploy import FULL, SEQ, _bundle, _files

from neuronc.deploy import render
from neuronc.deploy.tnx_handler import NeuroncTnxHandler

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "neuronc" / "data" / "profiles" / "models" / "tiny-llama"
SMALL = {"batch_size": 2, "tp_degree": 2}


def _handler(
    tmp_path: Path, checkpoint: Path, model_class: str, sequence: Any = SEQ, **overrides: Any
) -> NeuroncTnxHandler:
    """The handler initialised by TorchServe's protocol on a model dir holding the bundle's layout: the
    checkpoint, the NEFFs the double compiled for exactly the handler's settings, and the tokenizer."""
    import transformers_neuronx as tnx

    bundle = _bundle(tmp_path, "transformers-neuronx", sequence=sequence, **{**SMALL, **overrides})
    settings = yaml.safe_load(_files(render(bundle, "torchserve"))["model-config.yaml"])["handler"]
    settings["model_module"], settings["model_class"] = "transformers_neuronx", model_class
    model_dir = tmp_path / "model-dir"
    shutil.copytree(checkpoint, model_dir / settings["checkpoint_dir"])
    shutil.copytree(TOKENIZER, model_dir / settings["tokenizer_dir"])
    kwargs = {k: settings[k] for k in ("batch_size", "tp_degree", "amp", "n_positions", "context_length_estimate")}
    kwargs |= settings["from_pretrained_extra"]
    compiled = getattr(tnx, model_class).from_pretrained(str(model_dir / settings["checkpoint_dir"]), **kwargs)
    compiled.cpu_compile()
    compiled.save(str(model_dir / settings["neff_dir"]))
    handler = NeuroncTnxHandler()
    handler.initialize(
        SimpleNamespace(model_yaml_config={"handler": settings}, system_properties={"model_dir": str(model_dir)})
    )
    return handler


def _ask(handler: NeuroncTnxHandler, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    context = SimpleNamespace(request_ids=None, model_name="m")
    return handler.handle([{"body": body} for body in bodies], context)


def _ids(handler: NeuroncTnxHandler, text: str) -> list[int]:
    ids = handler.tokenizer(text)["input_ids"]
    assert isinstance(ids, list)
    return ids


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the double's compile writes its logs under the working directory


@pytest.fixture
def llama(sdk_doubles: Path, tiny_llama: Path, tmp_path: Path) -> NeuroncTnxHandler:
    return _handler(tmp_path, tiny_llama, "LlamaForSampling")


def test_a_prompts_answer_does_not_depend_on_its_batch_mates(llama: NeuroncTnxHandler) -> None:
    """Left-padded rows get start_ids (pad counts): without them a short prompt attends to the pads."""
    short, long = "hello", "a much longer prompt than the other one in this batch"
    assert len(_ids(llama, short)) < len(_ids(llama, long))
    greedy = {"temperature": 0, "max_tokens": 4}
    alone = _ask(llama, {"prompt": short, **greedy})[0]
    mixed = _ask(llama, {"prompt": short, **greedy}, {"prompt": long, **greedy})[0]
    assert mixed["choices"][0]["text"] == alone["choices"][0]["text"]
    assert mixed["usage"] == alone["usage"]


def _eos_distance(handler: NeuroncTnxHandler, text: str) -> int:
    """Greedy steps before the double's Llama loop samples EOS for this prompt (its rule: first token
    (sum + count of the visible ids) mod vocab, then +1 a step)."""
    ids = _ids(handler, text)
    vocab, eos = handler.model.config["vocab_size"], handler.model.config["eos_token_id"]
    return int((eos - (sum(ids) + len(ids))) % vocab)


def test_finish_reason_is_stop_at_eos_and_length_when_capped(llama: NeuroncTnxHandler) -> None:
    near = next(
        t for t in ("one", "two", "three", "four", "five", "six", "seven") if 1 <= _eos_distance(llama, t) <= 20
    )
    far = next(t for t in ("alpha", "beta", "gamma", "delta", "omega", "zeta") if _eos_distance(llama, t) > 8)
    answers = _ask(
        llama, {"prompt": near, "temperature": 0, "max_tokens": 40}, {"prompt": far, "temperature": 0, "max_tokens": 8}
    )
    stopped, capped = answers
    assert stopped["choices"][0]["finish_reason"] == "stop"
    # the EOS and the EOS fill after it (the other row ran on) are not completion tokens
    assert stopped["usage"]["completion_tokens"] == _eos_distance(llama, near)
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 8


def test_sampling_settings_reach_sample(llama: NeuroncTnxHandler) -> None:
    """temperature 0 is greedy (top_k=1): the same answer every time; default sampling (top_k 50) is random."""
    body = {"prompt": "hello there", "max_tokens": 12}
    greedy = {_ask(llama, {**body, "temperature": 0})[0]["choices"][0]["text"] for _ in range(3)}
    assert len(greedy) == 1
    sampled = {_ask(llama, {**body, "temperature": 0.7, "top_p": 0.9})[0]["choices"][0]["text"] for _ in range(6)}
    assert len(sampled) > 1
    bad = _ask(llama, {**body, "temperature": -1})[0]
    assert "temperature" in bad["error"]["message"]


def test_top_p_and_temperature_are_refused_for_classes_that_take_only_top_k(
    sdk_doubles: Path, tiny_opt: Path, tmp_path: Path
) -> None:
    opt = _handler(tmp_path, tiny_opt, "OPTForSampling")
    ok, no_top_p, no_temperature = _ask(
        opt,
        {"prompt": "hi", "temperature": 0, "max_tokens": 3},
        {"prompt": "hi", "top_p": 0.5},
        {"prompt": "hi", "temperature": 0.5},
    )
    assert ok["choices"][0]["finish_reason"] == "length" and ok["usage"]["completion_tokens"] == 3
    assert "top_p" in no_top_p["error"]["message"]
    assert "temperature" in no_temperature["error"]["message"]


def test_longest_bucket_equal_to_max_length_leaves_room_for_a_token(
    sdk_doubles: Path, tiny_llama: Path, tmp_path: Path
) -> None:
    """max_context_length == max_length: a prompt gets at least one new token, a longer one is refused."""
    handler = _handler(tmp_path, tiny_llama, "LlamaForSampling", sequence=FULL)
    settings = handler.settings
    assert settings["longest_prompt"] == settings["max_length"] - 1 and settings["max_new_tokens"] == 1
    fits = " x" * ((settings["max_length"] - 2) // 2)  # BOS + 2 tokens per " x" with this tokenizer
    assert len(_ids(handler, fits)) == settings["max_length"] - 1
    answer = _ask(handler, {"prompt": fits, "temperature": 0})[0]
    assert answer["usage"]["prompt_tokens"] == settings["max_length"] - 1
    assert answer["usage"]["completion_tokens"] + (answer["choices"][0]["finish_reason"] == "stop") == 1
    refused = _ask(handler, {"prompt": fits + " x x", "temperature": 0})[0]
    assert "at most" in refused["error"]["message"]
