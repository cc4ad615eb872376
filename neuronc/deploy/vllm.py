"""vLLM for NxDI bundles, through the vllm-neuron plugin's NxD Inference path (vLLM V1).

The image is the bundle's Neuron SDK release's (``_releases.nxdi_image``, from the support matrix):
SDK 2.27.0 vLLM 0.11.0 (vllm-neuron 0.2.1), 2.27.1 vLLM 0.13.0 (0.3.0) or 0.11.0 (0.2.2), 2.28.0
vLLM 0.13.0 (0.4.1), 2.29.x-2.31.x vLLM 0.16.0 (0.5.x). The arguments below are the same for all
three vLLM versions: each of them exists with the same meaning in 0.11.0, 0.13.0 and 0.16.0
(checked with each version's own parser, tests/contract/serving/test_vllm_parser.py).

What the plugin does with the values emitted here (vllm-project/vllm-neuron 0.2.0,
``vllm_neuron/platform.py`` and ``worker/neuronx_distributed_model_loader.py``):

- ``NEURON_COMPILED_ARTIFACTS`` is the only path it loads precompiled artifacts from without
  wiping it first; it then calls ``NeuronXCls(path)`` + ``load(path)`` and ignores any
  ``override_neuron_config``: the bundle must already be compiled the way the plugin drives it.
  On a load failure it recompiles *into that path* from the model directory, so the emitted
  compose file mounts ``artifacts/`` read-only and ``weights: reference`` bundles are refused.
- vLLM passes one slot id per request; NxDI honours them only with ``is_continuous_batching``,
  so a batch > 1 bundle without it is refused (requests would overwrite each other's KV cache).
- With prefix caching off the plugin sets ``block_size = max_model_len`` itself; ``--block-size``
  only accepts 1-128 (vLLM 0.11) / 1-256 (vLLM 0.13, 0.16) and is never passed. Prefix caching is on
  by default in vLLM V1: ``--no-enable-prefix-caching``. ``--num-gpu-blocks-override`` is the
  compiled batch (one block of max_model_len per sequence; the plugin adds its null block).
- Prompts: vLLM accepts prompts up to ``--max-model-len``, but NxDI has no context-encoding
  graph for prompts longer than the largest context bucket. The plugin resets
  ``--max-num-batched-tokens`` to 131072, so that cannot cap them; ``--max-model-len`` is set to
  the largest context bucket, which vLLM's API layer enforces (HTTP 400) before a request reaches
  the engine. A bundle compiled with max_context_length == max_length loses nothing.
"""

from __future__ import annotations

import shlex

from neuronc.deploy._compose import CONTAINER_BUNDLE, bundle_volumes, endpoint_files, placement, replica_files
from neuronc.deploy._quote import comment_text, sh_env_file
from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues
from neuronc.deploy.images import known_text, versions_text
from neuronc.errors import InvalidInputError

# The AWS vLLM DLCs (aws-neuron/deep-learning-containers vllm/inference/*/Dockerfile.neuronx, tags
# 2.27.0-2.32.0) declare ``EXPOSE 8080 8081`` and ``HEALTHCHECK curl --fail http://localhost:8080/ping``;
# vLLM serves /ping on its API port, whose default is 8000. Serving on 8080 keeps the image's health
# check true (on 8000 every replica would stay "unhealthy").
SERVER_PORT = 8080
DLC_HEALTHCHECK_URL = "http://localhost:8080/ping"
VERSIONS = ("neuronx-cc", "neuronx-distributed-inference")


def check_vllm_can_serve(v: ServingValues) -> None:
    """Refuse (exit 2, the fix in the hint) NxDI bundles vLLM would mis-serve."""
    if v.weights == "reference":
        msg = "a weights: reference bundle has no weights; vLLM would recompile into NEURON_COMPILED_ARTIFACTS"
        raise InvalidInputError(msg, hint="recompile with weights: presharded (or on-load) for a self-contained bundle")
    record = v.nxdi
    if record is None:
        msg = "the manifest has no extra.nxdi record of the NeuronConfig this bundle was compiled with"
        raise InvalidInputError(msg, hint="recompile the bundle with this neuronc")
    fix = "add `options: {serving: vllm}` to the profile and recompile (or compile batch_size: 1)"
    if v.batch_size > 1 and not record.continuous_batching:
        msg = (
            f"batch {v.batch_size} compiled without continuous batching: under vLLM concurrent requests "
            "would overwrite each other's KV cache"
        )
        raise InvalidInputError(msg, hint=fix)
    if v.batch_size > 1 and record.ctx_batch_size not in (None, 1):
        msg = f"context batch {record.ctx_batch_size}: vllm-neuron encodes one prompt at a time (ctx_batch_size 1)"
        raise InvalidInputError(msg, hint=fix)
    if record.block_kv_layout:
        msg = "block KV layout / prefix caching / chunked prefill builds are not supported by neuronc deploy"
        raise InvalidInputError(msg, hint="compile without them (options.serving: vllm does)")


def vllm_env(v: ServingValues, bundle: str) -> dict[str, str]:
    return {"NEURON_COMPILED_ARTIFACTS": f"{bundle}/artifacts", **v.runtime_env}


def vllm_args(v: ServingValues, bundle: str, port: int) -> list[str]:
    """The ``vllm serve`` arguments (after ``vllm serve``)."""
    return [
        f"{bundle}/model",
        "--served-model-name",
        v.served_name,
        "--tensor-parallel-size",
        str(v.tp_degree),
        "--max-num-seqs",
        str(v.batch_size),
        "--max-model-len",
        str(v.max_model_len),
        "--dtype",
        v.dtype,
        "--no-enable-prefix-caching",
        "--num-gpu-blocks-override",
        str(v.batch_size),
        "--port",
        str(port),
    ]


def render_vllm(v: ServingValues, options: DeployOptions) -> Rendered:
    check_vllm_can_serve(v)
    env = vllm_env(v, v.bundle)
    target, versions = comment_text(v.target), comment_text(versions_text(v.toolchain, VERSIONS))
    script = (
        "#!/bin/sh\n"
        f"# vLLM (vllm-neuron) for bundle {v.config_hash} ({target}, tp {v.tp_degree}, batch {v.batch_size});\n"
        "# generated by neuronc deploy. For a host with vllm-neuron and the bundle's Neuron SDK installed\n"
        f"# ({versions}). Prefer docker-compose.yml where there is one: it mounts\n"
        "# artifacts/ read-only; here, keep the bundle read-only (chmod -R a-w) so a failed load cannot rewrite it.\n"
        f"# Prompt + output tokens are capped at {v.max_model_len} (the largest context bucket).\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n'
        "set -a\n. ./vllm.env\nset +a\n"
        f"exec vllm serve {shlex.join(vllm_args(v, v.bundle, options.port))}\n"
    )
    files = [
        # serve.sh sources this file: values are shell-quoted (a bundle path may hold spaces or `$`).
        EmittedFile("vllm.env", sh_env_file(env), "environment for vllm serve"),
        EmittedFile("serve.sh", script, "vllm serve on this host", executable=True),
    ]
    notes: list[str] = []
    image = options.image
    if image is None:
        from neuronc.deploy._releases import nxdi_image

        found = nxdi_image(v.toolchain, v.sdk, v.target)
        image = found.reference if found else None
    replicas = 1
    if image is not None:  # replicas and instance matter only to the compose file
        where = placement(v, options)
        replicas = where.replicas
        command = ["vllm", "serve", *vllm_args(v, CONTAINER_BUNDLE, SERVER_PORT)]
        service = {"image": image, "command": command, "volumes": bundle_volumes(v), "shm_size": "1gb"}
        env_list = [vllm_env(v, CONTAINER_BUNDLE) for _ in where.groups]
        files += replica_files(
            v,
            options,
            where,
            prefix="vllm",
            service=service,
            environment=env_list,
            port=SERVER_PORT,
            what="vLLM replica(s)",
        )
    else:
        from neuronc.deploy._releases import no_image_reason

        why = no_image_reason(v.toolchain, v.sdk)
        notes.append(
            f"no docker-compose.yml: no AWS Neuron vLLM container ships {versions_text(v.toolchain, VERSIONS)} "
            f"(known: {known_text('vllm-neuron', VERSIONS)}){'; ' + why if why else ''}; run serve.sh on a host "
            "with that SDK and the vllm-neuron plugin, or pass --image"
        )
    files += endpoint_files(
        v,
        options,
        replicas=replicas,
        max_prompt=v.max_model_len,
        max_total=v.max_model_len,
        tokenizer=f"{v.bundle}/model",
    )
    return Rendered(Stack.vllm, tuple(files), image=image, notes=tuple(notes))


__all__ = ["DLC_HEALTHCHECK_URL", "SERVER_PORT", "check_vllm_can_serve", "render_vllm", "vllm_args", "vllm_env"]
