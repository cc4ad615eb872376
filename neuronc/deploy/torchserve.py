"""TorchServe for transformers-neuronx bundles: neuronc's own handler, its model-config.yaml, the archive.

The handler (``tnx_handler.py``, emitted as ``neuronc_tnx_handler.py``) loads the bundle's
NEFFs with exactly the manifest's ``from_pretrained`` settings; ``model-config.yaml``'s
``handler:`` section holds exactly the keys it reads (``tnx_handler.KEYS``). ``archive.sh`` runs
``torch-model-archiver --archive-format no-archive`` and links the bundle's ``model/`` and
``artifacts/`` into the model directory (TorchServe serves a no-archive model from where it is).
Module paths are transformers-neuronx's own (``src/transformers_neuronx/<module>/model.py``:
``gptneox``, not ``gpt_neox``).
"""

from __future__ import annotations

import shlex
from importlib import resources
from typing import Any

from neuronc.deploy._quote import yaml_text
from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues
from neuronc.deploy.benchmark import Endpoint, benchmark_files
from neuronc.errors import InvalidInputError

HANDLER_FILE = "neuronc_tnx_handler.py"
CONFIG_PROPERTIES = "config.properties"
# Class (as exported at transformers_neuronx's top level) -> the module that defines it.
TNX_MODULES = {
    "BloomForSampling": "transformers_neuronx.bloom.model",
    "GPT2ForSamplingWithContextBroadcasting": "transformers_neuronx.gpt2.model",
    "GPTJForSampling": "transformers_neuronx.gptj.model",
    "GPTNeoXForSampling": "transformers_neuronx.gptneox.model",
    "LlamaForSampling": "transformers_neuronx.llama.model",
    "MistralForSampling": "transformers_neuronx.mistral.model",
    "MixtralForSampling": "transformers_neuronx.mixtral.model",
    "OPTForSampling": "transformers_neuronx.opt.model",
}
MANAGED = ("batch_size", "tp_degree", "amp", "n_positions", "context_length_estimate")
MAX_BATCH_DELAY_MS = 100
RESPONSE_TIMEOUT_S = 900  # a request may wait while the worker loads the model onto the NeuronCores
STARTUP_TIMEOUT_S = 1800


def handler_source() -> str:
    return resources.files("neuronc.deploy").joinpath("tnx_handler.py").read_text(encoding="utf-8")


def check_torchserve_can_serve(v: ServingValues) -> None:
    if v.tnx is None or v.tnx.model_class not in TNX_MODULES:
        recorded = v.tnx.model_class if v.tnx else "nothing"
        known = ", ".join(TNX_MODULES)
        msg = f"the manifest records transformers-neuronx class {recorded or 'nothing'}; neuronc knows {known}"
        raise InvalidInputError(msg, hint="recompile the bundle with this neuronc")
    if v.weights == "reference":
        msg = "a weights: reference bundle carries no checkpoint for the handler to load"
        raise InvalidInputError(msg, hint="recompile with weights: presharded (or on-load)")
    if not v.tnx.neffs:
        raise InvalidInputError("the manifest lists no NEFFs for this bundle", hint="recompile the bundle")


def handler_settings(v: ServingValues) -> dict[str, Any]:
    """The ``handler:`` section: the recorded from_pretrained kwargs, split into the keys the handler reads."""
    assert v.tnx is not None
    recorded = dict(v.tnx.from_pretrained)
    settings: dict[str, Any] = {
        "model_module": TNX_MODULES[v.tnx.model_class],
        "model_class": v.tnx.model_class,
        "checkpoint_dir": "artifacts/checkpoint",
        "neff_dir": "artifacts/neff",
        "tokenizer_dir": "model",
        **{key: recorded.pop(key) for key in MANAGED},
        "from_pretrained_extra": recorded,
        "neuron_config": dict(v.tnx.neuron_config) if v.tnx.neuron_config else None,
        "max_length": v.max_length,
        # A prompt must leave room for one new token: when the largest context bucket is max_length,
        # prompts are capped one below it (the handler refuses longer ones).
        "longest_prompt": min(v.longest_prompt, v.max_length - 1),
        "max_new_tokens": max(1, min(256, v.max_length - min(v.longest_prompt, v.max_length - 1))),
    }
    return settings


def model_config(v: ServingValues) -> dict[str, Any]:
    return {
        "minWorkers": 1,
        "maxWorkers": 1,  # one worker holds all tp_degree NeuronCores
        "batchSize": v.batch_size,  # frontend batching up to the compiled batch
        "maxBatchDelay": MAX_BATCH_DELAY_MS,
        "responseTimeout": RESPONSE_TIMEOUT_S,
        "startupTimeout": STARTUP_TIMEOUT_S,
        "handler": handler_settings(v),
    }


def archiver_argv(v: ServingValues) -> list[str]:
    return [
        "torch-model-archiver",
        "--model-name",
        v.name,
        "--version",
        "1.0",
        "--handler",
        HANDLER_FILE,
        "--config-file",
        "model-config.yaml",
        "--archive-format",
        "no-archive",
        "--export-path",
        "model_store",
        "--force",
    ]


def start_argv(v: ServingValues) -> list[str]:
    """How archive.sh says to start TorchServe (from the deploy directory)."""
    return [
        "torchserve", "--start", "--ncs", "--disable-token-auth", "--ts-config", CONFIG_PROPERTIES,
        "--model-store", "model_store", "--models", v.name,
    ]  # fmt: skip


def render_torchserve(v: ServingValues, options: DeployOptions) -> Rendered:
    check_torchserve_can_serve(v)
    header = f"TorchServe settings for bundle {v.config_hash} ({v.model_id}); generated by neuronc deploy."
    config_text = yaml_text(model_config(v), header=header)
    target = f"model_store/{v.name}"
    script = (
        "#!/bin/sh\n"
        f"# Archive bundle {v.key} for TorchServe (no-archive format) and link the bundle's model/ and artifacts/ in.\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n'
        "mkdir -p model_store\n"
        f"{shlex.join(archiver_argv(v))}\n"
        f"ln -sfn {shlex.quote(v.bundle + '/model')} {shlex.quote(target + '/model')}\n"
        f"ln -sfn {shlex.quote(v.bundle + '/artifacts')} {shlex.quote(target + '/artifacts')}\n"
        f"echo 'start: {shlex.join(start_argv(v))}'\n"
    )
    # TorchServe's own properties format (key=value lines): where the inference API listens.
    properties = (
        f"# TorchServe settings; generated by neuronc deploy.\ninference_address=http://0.0.0.0:{options.port}\n"
    )
    endpoint = Endpoint(
        target=f"http://localhost:{options.port}",
        model=v.name,
        concurrency=v.batch_size,
        max_prompt=v.longest_prompt,
        max_total=v.max_length,
        api_routes={"/v1/completions": f"predictions/{v.name}", "/health": "ping"},
        stream=False,
        tokenizer=f"{v.bundle}/model",
    )
    files = [
        EmittedFile(HANDLER_FILE, handler_source(), "TorchServe handler: loads the bundle's NEFFs, no recompile"),
        EmittedFile("model-config.yaml", config_text, "TorchServe model config (batching + the handler's keys)"),
        EmittedFile("archive.sh", script, "torch-model-archiver --archive-format no-archive", executable=True),
        EmittedFile(CONFIG_PROPERTIES, properties, f"TorchServe config: the inference API on port {options.port}"),
        *benchmark_files(v, endpoint),
    ]
    return Rendered(Stack.torchserve, tuple(files))


__all__ = [
    "CONFIG_PROPERTIES",
    "HANDLER_FILE",
    "TNX_MODULES",
    "check_torchserve_can_serve",
    "handler_source",
    "model_config",
    "render_torchserve",
    "start_argv",
]
