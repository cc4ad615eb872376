"""``options.serving: vllm``: an NxDI bundle compiled the way the vllm-neuron plugin loads it.

vllm-neuron builds its own ``NeuronConfig`` from the server's arguments
(vllm-project/vllm-neuron vllm_neuron/worker/neuronx_distributed_model_loader.py
``_get_default_neuron_config``): ``ctx_batch_size=1``, ``is_continuous_batching=(batch_size > 1)``,
``enable_bucketing=True``, ``padding_side="right"`` and
``on_device_sampling_config=OnDeviceSamplingConfig(dynamic=True, deterministic=False)``; block KV
layout only with chunked prefill or prefix caching, which its scheduler turns off
(vllm_neuron/platform.py) and the deploy serves without. When it finds precompiled artifacts it
loads them as they are and ignores ``override_neuron_config`` (``_load_compiled_model``), so the
bundle must already be compiled with those settings: vLLM gives each request a KV-cache slot
(``seq_ids``), and NxDI writes the cache by slot only with continuous batching, so a batch > 1
bundle without it lets requests overwrite each other's cache.

The manifest records ``extra.nxdi.serving = "vllm"`` and the full NeuronConfig kwargs in
``extra.nxdi.neuron_config``; ``neuronc deploy --for vllm`` reads both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronc.backends.base import SpecProblem

VLLM = "vllm"
SERVING_MODES = (VLLM,)

# vllm-neuron's OnDeviceSamplingConfig(dynamic=True, deterministic=False), as NeuronConfig takes it
# (a dict becomes an OnDeviceSamplingConfig: aws-neuron/neuronx-distributed-inference models/config.py).
VLLM_ON_DEVICE_SAMPLING: dict[str, Any] = {"dynamic": True, "deterministic": False}
# Settings a bundle for vLLM must not have: vLLM is served without prefix caching or chunked prefill.
_BLOCK_KV_KEYS = ("is_block_kv_layout", "is_prefix_caching", "chunked_prefill_config")


def serving_kwargs(serving: str, batch_size: int) -> dict[str, Any]:
    """The NeuronConfig kwargs a serving stack needs (the profile's own fields are set elsewhere)."""
    if serving != VLLM:
        msg = f"unknown serving stack {serving!r}"
        raise ValueError(msg)
    return {
        "ctx_batch_size": 1,
        "is_continuous_batching": batch_size > 1,
        "padding_side": "right",
        "on_device_sampling_config": dict(VLLM_ON_DEVICE_SAMPLING),
    }


def serving_problems(serving: str, batch_size: int, user: Mapping[str, Any]) -> list[SpecProblem]:
    """``options.neuron_config`` keys that contradict what the serving stack needs."""
    path = ("options", "neuron_config")
    problems: list[SpecProblem] = []
    if batch_size > 1 and user.get("is_continuous_batching") is False:
        msg = "serving: vllm with batch_size > 1 needs continuous batching (vLLM assigns each request a KV slot)"
        problems.append(SpecProblem((*path, "is_continuous_batching"), msg))
    if "ctx_batch_size" in user and user["ctx_batch_size"] != 1:
        msg = "serving: vllm encodes one prompt at a time (vllm-neuron's ctx_batch_size is 1)"
        problems.append(SpecProblem((*path, "ctx_batch_size"), msg))
    for key in _BLOCK_KV_KEYS:
        if user.get(key):
            msg = f"serving: vllm serves without prefix caching or chunked prefill (block KV layout); remove {key}"
            problems.append(SpecProblem((*path, key), msg))
    return problems
