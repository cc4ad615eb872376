"""TorchServe handler for a neuronc transformers-neuronx bundle (emitted by ``neuronc deploy --for torchserve``).

This file is copied as it is next to ``model-config.yaml`` and runs inside TorchServe, without
neuronc installed: it imports only the standard library, transformers and transformers-neuronx.

``initialize`` builds the model with exactly the settings the bundle was compiled with (the
``handler:`` keys of model-config.yaml, written from the bundle's manifest), then ``load()``s the
bundle's NEFFs before ``to_neuron()``: transformers-neuronx matches each kernel to a saved NEFF by
the hash of its HLO and compiles nothing (a missing NEFF raises instead of recompiling). Unlike
pytorch/serve's ``base_neuronx_continuous_batching_handler.py``, which builds the model with its own
settings and compiles on every worker start.

``handle`` takes OpenAI ``/v1/completions``-style JSON bodies (``prompt``, ``max_tokens``) and
answers in that shape, so clients and GuideLLM can talk to ``/predictions/<model>`` as to an
OpenAI server. TorchServe batches requests up to the compiled batch size (``batchSize``); the
handler pads a short batch to it. A prompt longer than the largest compiled context bucket is
answered with an error instead of reaching the model.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

# Every key this handler reads under ``handler:`` in model-config.yaml.
KEYS = (
    "model_module",
    "model_class",
    "checkpoint_dir",
    "neff_dir",
    "tokenizer_dir",
    "batch_size",
    "tp_degree",
    "amp",
    "n_positions",
    "context_length_estimate",
    "from_pretrained_extra",
    "neuron_config",
    "max_length",
    "longest_prompt",
    "max_new_tokens",
)


class NeuroncTnxHandler:
    """One worker: one transformers-neuronx model on tp_degree NeuronCores."""

    def __init__(self) -> None:
        self.initialized = False
        self.model: Any = None
        self.tokenizer: Any = None
        self.settings: dict[str, Any] = {}

    def initialize(self, context: Any) -> None:
        settings = dict(context.model_yaml_config["handler"])
        missing = [k for k in KEYS if k not in settings]
        if missing:
            raise ValueError(f"model-config.yaml handler: section lacks {', '.join(missing)}")
        model_dir = Path(context.system_properties["model_dir"])
        # The Neuron runtime gives this process exactly the cores the model was compiled for.
        os.environ.setdefault("NEURON_RT_NUM_CORES", str(settings["tp_degree"]))
        module = importlib.import_module(settings["model_module"])
        model_cls = getattr(module, settings["model_class"])
        kwargs: dict[str, Any] = {
            "batch_size": settings["batch_size"],
            "tp_degree": settings["tp_degree"],
            "amp": settings["amp"],
            "n_positions": settings["n_positions"],
            "context_length_estimate": settings["context_length_estimate"],
            **settings["from_pretrained_extra"],
        }
        if settings["neuron_config"] is not None:
            tnx = importlib.import_module("transformers_neuronx")
            kwargs["neuron_config"] = tnx.NeuronConfig(**settings["neuron_config"])
        model = model_cls.from_pretrained(str(model_dir / settings["checkpoint_dir"]), **kwargs)
        model.load(str(model_dir / settings["neff_dir"]))  # the bundle's NEFFs: no compile in to_neuron()
        model.to_neuron()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir / settings["tokenizer_dir"]))
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.initialized = True

    @staticmethod
    def _body(item: Any) -> dict[str, Any]:
        body = item.get("body") if isinstance(item, dict) else None
        if body is None and isinstance(item, dict):
            body = item.get("data")
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body.decode("utf-8"))
        if isinstance(body, str):
            body = json.loads(body)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise ValueError('expected a JSON body with a "prompt" string')
        return body

    def handle(self, data: list[Any], context: Any) -> list[dict[str, Any]]:
        import torch

        settings = self.settings
        answers: list[dict[str, Any] | None] = [None] * len(data)
        prompts: list[tuple[int, list[int], int]] = []
        for index, item in enumerate(data):
            try:
                body = self._body(item)
                ids = self.tokenizer(body["prompt"])["input_ids"]
                if len(ids) > settings["longest_prompt"]:
                    raise ValueError(
                        f"prompt is {len(ids)} tokens; this model takes at most {settings['longest_prompt']}"
                    )
                wanted = int(body.get("max_tokens") or settings["max_new_tokens"])
                prompts.append((index, ids, max(1, wanted)))
            except (ValueError, TypeError, KeyError) as exc:
                answers[index] = {"error": {"message": str(exc), "type": "invalid_request_error"}}
        if prompts:
            width = max(len(ids) for _, ids, _ in prompts)
            rows = [[self.tokenizer.pad_token_id] * (width - len(ids)) + ids for _, ids, _ in prompts]
            rows += [rows[-1]] * (settings["batch_size"] - len(rows))  # the compiled batch is fixed
            total = min(settings["max_length"], width + max(n for _, _, n in prompts))
            with torch.inference_mode():
                out = self.model.sample(torch.tensor(rows), sequence_length=total)
            for row, (index, ids, wanted) in enumerate(prompts):
                new = [int(t) for t in out[row][width : width + wanted]]
                answers[index] = {
                    "id": f"cmpl-{context.request_ids.get(index, index) if context.request_ids else index}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": context.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": self.tokenizer.decode(new, skip_special_tokens=True),
                            "finish_reason": "length" if len(new) >= wanted else "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(ids),
                        "completion_tokens": len(new),
                        "total_tokens": len(ids) + len(new),
                    },
                }
        return [a if a is not None else {"error": {"message": "no answer"}} for a in answers]
