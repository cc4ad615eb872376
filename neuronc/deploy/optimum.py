"""optimum-neuron 0.4.x bundles, served the way optimum-neuron serves them: its vLLM-based server.

``optimum-cli neuron serve`` (optimum-neuron ``optimum/commands/neuron/serve.py``) reads the
export's ``neuron_config.json``, raises if ``--batch_size``/``--sequence_length``/
``--tensor_parallel_size`` differ from it, and starts vLLM with ``--max-num-seqs`` = batch,
``--max-model-len`` = sequence length and ``--dtype`` from the exported config. Its container
(``docker/vllm/Dockerfile``) turns every ``SM_ON_<NAME>=value`` variable into ``--<name> value`` for
that command, after ``--port 8080``. What the command accepts depends on the version (the wheels'
``optimum/commands/neuron/serve.py``):

- 0.4.0: no ``--served_model_name`` (vLLM then serves the model under its ``--model`` path), and
  optimum 1.24's ``parser.parse_args()`` rejects any other argument (exit 2);
- 0.4.1: ``--served_model_name`` exists; unknown arguments are still rejected;
- 0.4.2+: unknown arguments (``parse_known_args``) are appended after serve's own vLLM arguments, so
  ``--max_model_len`` reaches vLLM and overrides the sequence length (argparse: last wins).

So before 0.4.2 a bundle whose largest context bucket is shorter than its sequence length cannot be
capped at it, and is refused.
Version lock: the export loads only under the exact optimum-neuron and neuronx-cc it was made with
(``NeuronConfig.from_pretrained``), so the image comes from ``images.py`` by those versions.
"""

from __future__ import annotations

import shlex

from packaging.version import Version

from neuronc.deploy._compose import CONTAINER_BUNDLE, bundle_volumes, endpoint_files, placement, replica_files
from neuronc.deploy._quote import comment_text
from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues
from neuronc.deploy.images import choose_image, public
from neuronc.errors import InvalidInputError

CONTAINER_PORT = 8080  # the entrypoint's fixed --port
VERSIONS = ("optimum-neuron", "neuronx-cc")


def _at_least(v: ServingValues, version: str) -> bool:
    """Whether the bundle's optimum-neuron is ``version`` or newer (unknown: assume the newest)."""
    recorded = public(v.version("optimum-neuron"))
    return recorded is None or Version(recorded) >= Version(version)


def has_served_name(v: ServingValues) -> bool:
    """``--served_model_name`` exists in ``optimum-cli neuron serve`` from optimum-neuron 0.4.1."""
    return _at_least(v, "0.4.1")


def served_name(v: ServingValues, model_dir: str) -> str:
    """The model name vLLM answers to: the model id, or before 0.4.1 the ``--model`` path."""
    return v.served_name if has_served_name(v) else model_dir


def check_optimum_can_serve(v: ServingValues) -> None:
    """Refuse (exit 2) what this version's ``optimum-cli neuron serve`` cannot be told."""
    if v.max_model_len < v.max_length and not _at_least(v, "0.4.2"):
        msg = (
            f"optimum-neuron {v.version('optimum-neuron')}'s `optimum-cli neuron serve` rejects arguments it does "
            f"not know (pass-through to vLLM starts in 0.4.2), so vLLM cannot be capped at the largest context "
            f"bucket ({v.max_model_len}) below the sequence length ({v.max_length})"
        )
        hint = "re-export with optimum-neuron 0.4.2 or newer, or with the context length equal to the sequence length"
        raise InvalidInputError(msg, hint=hint)


def sm_on_env(v: ServingValues, model_dir: str) -> dict[str, str]:
    """The ``SM_ON_*`` variables for the optimum-neuron vLLM container (equal to the export's values),
    only those the bundle's optimum-neuron version accepts."""
    check_optimum_can_serve(v)
    env = {"SM_ON_MODEL": model_dir}
    if has_served_name(v):
        env["SM_ON_SERVED_MODEL_NAME"] = v.served_name
    env |= {
        "SM_ON_TENSOR_PARALLEL_SIZE": str(v.tp_degree),
        "SM_ON_BATCH_SIZE": str(v.batch_size),
        "SM_ON_SEQUENCE_LENGTH": str(v.max_length),
    }
    if v.max_model_len < v.max_length:
        env["SM_ON_MAX_MODEL_LEN"] = str(v.max_model_len)
    return env


def entrypoint_argv(env: dict[str, str]) -> list[str]:
    """What the container's entrypoint runs for these variables (docker/vllm/Dockerfile, entrypoint.sh)."""
    argv = ["optimum-cli", "neuron", "serve", "--port", str(CONTAINER_PORT)]
    for key, value in env.items():
        if key.startswith("SM_ON_"):
            argv.append("--" + key.removeprefix("SM_ON_").lower())
            if value:
                argv.append(value)
    return argv


def serve_argv(v: ServingValues, port: int) -> list[str]:
    check_optimum_can_serve(v)
    argv = ["optimum-cli", "neuron", "serve", "--model", f"{v.bundle}/artifacts"]
    if has_served_name(v):
        argv += ["--served_model_name", v.served_name]
    argv += [
        "--tensor_parallel_size",
        str(v.tp_degree),
        "--batch_size",
        str(v.batch_size),
        "--sequence_length",
        str(v.max_length),
        "--port",
        str(port),
    ]
    if v.max_model_len < v.max_length:
        argv += ["--max-model-len", str(v.max_model_len)]
    return argv


def render_optimum_vllm(v: ServingValues, options: DeployOptions) -> Rendered:
    image = options.image or choose_image("optimum-vllm", v.toolchain, VERSIONS).image
    where = placement(v, options)
    env = sm_on_env(v, f"{CONTAINER_BUNDLE}/artifacts")
    service: dict[str, object] = {"image": image, "volumes": bundle_volumes(v), "shm_size": "1gb"}
    environment = []
    for _ in where.groups:
        replica_env = {**env, **v.runtime_env}
        if v.weights == "reference":
            # optimum-neuron downloads the weights by checkpoint_id at load time.
            replica_env["HF_TOKEN"] = "${HF_TOKEN:-}"
        environment.append(replica_env)
    versions = comment_text(", ".join(f"{p} {v.version(p)}" for p in VERSIONS))
    script = (
        "#!/bin/sh\n"
        f"# optimum-neuron's vLLM server for bundle {v.config_hash} (tp {v.tp_degree}, batch {v.batch_size});\n"
        f"# generated by neuronc deploy. Needs exactly {versions}\n"
        f"# (the export refuses any other); {comment_text(image)} ships them.\n"
        "set -eu\n"
        + "".join(f"export {k}={shlex.quote(val)}\n" for k, val in v.runtime_env.items())
        + f"exec {shlex.join(serve_argv(v, options.port))}\n"
    )
    files = replica_files(
        v,
        options,
        where,
        prefix="vllm",
        service=service,
        environment=environment,
        port=CONTAINER_PORT,
        what="replica(s)",
    )
    files.append(EmittedFile("serve.sh", script, "optimum-cli neuron serve on this host", executable=True))
    files += endpoint_files(
        v,
        options,
        replicas=where.replicas,
        model=served_name(v, f"{CONTAINER_BUNDLE}/artifacts"),
        max_prompt=v.max_model_len,
        max_total=v.max_model_len,
        tokenizer=f"{v.bundle}/artifacts",
    )
    notes: tuple[str, ...] = ()
    if not has_served_name(v):
        notes = (
            f"optimum-neuron {v.version('optimum-neuron')} has no --served_model_name: vLLM answers to the model "
            f"path ({CONTAINER_BUNDLE}/artifacts in docker-compose.yml, {v.bundle}/artifacts from serve.sh)",
        )
    return Rendered(Stack.vllm, tuple(files), image=image, notes=notes)


__all__ = [
    "CONTAINER_PORT",
    "check_optimum_can_serve",
    "entrypoint_argv",
    "has_served_name",
    "render_optimum_vllm",
    "serve_argv",
    "served_name",
    "sm_on_env",
]
