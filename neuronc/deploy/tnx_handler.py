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

``sample()`` as transformers-neuronx (HEAD 1ade6d74) defines it: ``start_ids`` = each left-padded row's
pad count (else the row attends to the pads); ``top_k``/``top_p``/``temperature`` only where the
class takes them; ``sample_llama`` fills a row that sampled EOS with EOS until every row is done, so
the answer is cut at the first EOS (``finish_reason`` "stop"); otherwise it is "length".
"""

from __future__ import annotations

import importlib
import inspect
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

    def _sampling(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request's sampling settings as this class's ``sample()`` takes them (transformers-neuronx
        HEAD 1ade6d74: Llama/Mistral/Mixtral take ``top_k, top_p, temperature``; the others ``top_k``
        only). Temperature 0 is greedy (``top_k=1``): ``sample_llama`` divides by the temperature."""
        params = inspect.signature(self.model.sample).parameters
        out: dict[str, Any] = {}
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        top_k = body.get("top_k")
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise ValueError("top_k must be a positive integer")
            out["top_k"] = top_k
        if temperature is not None:
            if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
                raise ValueError("temperature must be a number >= 0")
            if temperature == 0:
                out["top_k"] = 1
            elif "temperature" in params:
                out["temperature"] = float(temperature)
            elif temperature != 1:
                raise ValueError(f"{type(self.model).__name__} samples at temperature 1 only (or 0: greedy)")
        if top_p is not None:
            if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
                raise ValueError("top_p must be in (0, 1]")
            if "top_p" in params:
                out["top_p"] = float(top_p)
            elif top_p != 1:
                raise ValueError(f"{type(self.model).__name__} takes no top_p")
        return out

    def _eos_ids(self) -> set[int]:
        config = getattr(self.model, "config", None)
        ids = config.get("eos_token_id") if isinstance(config, dict) else getattr(config, "eos_token_id", None)
        found = set(ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else [])
        if self.tokenizer.eos_token_id is not None:
            found.add(int(self.tokenizer.eos_token_id))
        return found

    def handle(self, data: list[Any], context: Any) -> list[dict[str, Any]]:
        settings = self.settings
        answers: list[dict[str, Any] | None] = [None] * len(data)
        groups: dict[str, list[tuple[int, list[int], int]]] = {}
        room = settings["max_length"] - 1
        for index, item in enumerate(data):
            try:
                body = self._body(item)
                ids = self.tokenizer(body["prompt"])["input_ids"]
                longest = min(settings["longest_prompt"], room)  # at least one token of room
                if len(ids) > longest:
                    raise ValueError(f"prompt is {len(ids)} tokens; this model takes at most {longest}")
                wanted = int(body.get("max_tokens") or settings["max_new_tokens"])
                sampling = self._sampling(body)
                groups.setdefault(json.dumps(sampling, sort_keys=True), []).append((index, ids, max(1, wanted)))
            except (ValueError, TypeError, KeyError) as exc:
                answers[index] = {"error": {"message": str(exc), "type": "invalid_request_error"}}
        # One sample() call per sampling setting: a batch shares top_k/top_p/temperature.
        for key, prompts in groups.items():
            for index, answer in zip(
                (p[0] for p in prompts), self._generate(prompts, json.loads(key), context), strict=True
            ):
                answers[index] = answer
        return [a if a is not None else {"error": {"message": "no answer"}} for a in answers]

    def _generate(
        self, prompts: list[tuple[int, list[int], int]], sampling: dict[str, Any], context: Any
    ) -> list[dict[str, Any]]:
        import torch

        settings = self.settings
        width = max(len(ids) for _, ids, _ in prompts)
        rows = [[self.tokenizer.pad_token_id] * (width - len(ids)) + ids for _, ids, _ in prompts]
        pads = [width - len(ids) for _, ids, _ in prompts]
        rows += [rows[-1]] * (settings["batch_size"] - len(rows))  # the compiled batch is fixed
        pads += [pads[-1]] * (settings["batch_size"] - len(pads))
        total = min(settings["max_length"], width + max(n for _, _, n in prompts))
        kwargs = dict(sampling)
        if not (settings["neuron_config"] or {}).get("continuous_batching"):
            # Left padding: start_ids = pad count per row, as transformers-neuronx's own HF adapter
            # computes them (generation_utils.py: attention_mask.max(axis=1)); without them the rows
            # attend to the pads and their positions are shifted. (With continuous batching
            # start_ids are slot ids instead.)
            kwargs["start_ids"] = torch.tensor(pads, dtype=torch.int32)
        with torch.inference_mode():
            out = self.model.sample(torch.tensor(rows), sequence_length=total, **kwargs)
        eos = self._eos_ids()
        answers = []
        for row, (index, ids, wanted) in enumerate(prompts):
            new = [int(t) for t in out[row][width : width + wanted]]
            stop = next((i for i, t in enumerate(new) if t in eos), None)
            if stop is not None:  # the EOS and the EOS fill after it are not tokens of the answer
                new, finish = new[:stop], "stop"
            else:  # max_tokens reached, or the compiled max_length
                finish = "length"
            answers.append(
                {
                    "id": f"cmpl-{context.request_ids.get(index, index) if context.request_ids else index}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": context.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": self.tokenizer.decode(new, skip_special_tokens=True),
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(ids),
                        "completion_tokens": len(new),
                        "total_tokens": len(ids) + len(new),
                    },
                }
            )
        return answers
