"""vLLM for vllm-neuron bundles: the plugin's ``torch.compile`` path (SDK 2.31+, Trn2/Trn3), served
from the compile cache the build filled, with a cache miss made fatal.

What the served engine needs, and where each value comes from (the manifest's ``extra.vllm_neuron``,
written by the vllm-neuron backend's compile; the plugin facts are the backend's, each recorded with
its source, and reached through its serving capability, ``neuronc.backends.serving.RecordedEngine``):

- ``VLLM_CACHE_ROOT``: the plugin reads its compiled graphs from
  ``$VLLM_CACHE_ROOT/neuron/compile_cache/<key>/`` and writes a lock file (and its holder's metadata)
  beside an entry while it checks it (vllm-neuron ``vllm_neuron/compile/cache.py``, 0.21 line). The
  bundle is read-only, so serve.sh and each container copy the bundle's cache tree into a writable
  ``VLLM_CACHE_ROOT`` first. ``NEURON_COMPILED_ARTIFACTS`` is not read by this path (only by the NxDI
  path, vllm.py): it is not set.
- Both no-compile switches (vllm-neuron cpu_compilation.md): ``VLLM_NEURON_DISABLE_WARMUP_COMPILE=1``
  (a graph missing from the cache is an error at start-up instead of a compile of up to half an hour
  on the serving host) and the plugin line's ``*_DISABLE_GRAPH_CAPTURE_BACKEND=1`` (0.21:
  ``VLLM_NEURON_``, 0.24+: ``NEURON_LIBTORCH_``).
- ``VLLM_NEURON_BACKEND``: the route the graphs were compiled on, when the compile set it (from 0.29
  always: 2.33's Precompile Cache is off while it is unset; below 0.29 only when the compile host set
  it, facts.route_to_set); ``NEURON_LOGICAL_NC_CONFIG``: the LNC compiled for;
  ``NEURON_PLATFORM_TARGET_OVERRIDE``: the platform target compiled for (the plugin's key names it).
- The compile's recorded ``VLLM_NEURON_*`` / ``NEURON_*`` variables (``compile_env``, KV sizing
  included): a host compile inherits the host's environment, and what it read must be what the
  server reads.
- The engine arguments are the recorded ``engine_args`` (the same values the compile's ``vllm.LLM``
  got, ``gpu_memory_utilization`` included, and ``--num-gpu-blocks-override`` with the KV block count
  the compile sized), after the checkpoint path, then ``--port``.
- The image: ``--image``; else the DLC image the compile ran in, by the digest recorded; else the
  release's vllm-neuron image from the support matrix, when what it pins is the bundle's neuronx-cc,
  NKI and libtorch-neuronx-lite (``support.pin_mismatches``: the cache key holds those versions, so
  other versions would all miss; a pin the matrix does not know is refused too). A release
  without an image is refused with the nearest named. The image's entrypoint runs its arguments as a
  command, and its health check polls :8080/ping: the server listens on 8080 (vllm.SERVER_PORT).
"""

from __future__ import annotations

from neuronc.backends.serving import RecordedEngine, recorded_engine
from neuronc.backends.support import Serves
from neuronc.deploy._compose import CONTAINER_BUNDLE, endpoint_files, placement, replica_files
from neuronc.deploy._quote import comment_text, sh_command, sh_env_file, sh_word
from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues, VllmNeuronRecord
from neuronc.deploy.images import versions_text
from neuronc.deploy.vllm import SERVER_PORT
from neuronc.errors import InvalidInputError

# Writable in the DLC image (its processes run as root); one copy per replica container.
CONTAINER_CACHE = "/var/cache/neuronc/vllm"
VERSIONS = ("neuronx-cc", "nki", "libtorch-neuronx-lite", "vllm-neuron", "vllm")


def record_of(v: ServingValues) -> VllmNeuronRecord:
    if v.vllm_neuron is None:
        msg = "the manifest has no extra.vllm_neuron record of the engine this bundle was compiled for"
        raise InvalidInputError(msg, hint="recompile the bundle with this neuronc")
    return v.vllm_neuron


def engine_of(v: ServingValues) -> RecordedEngine:
    """The bundle's backend's serving capability (the record was read through it: ``_values``)."""
    engine = recorded_engine(v.backend)
    if engine is None:
        msg = f"the {v.backend} backend records no engine deploy writes vllm-neuron serve lines from"
        raise InvalidInputError(msg, hint="deploy a vllm-neuron bundle")
    return engine


def serve_env(record: VllmNeuronRecord, engine: RecordedEngine) -> dict[str, str]:
    """The variables of the served engine, but ``VLLM_CACHE_ROOT`` (a writable copy, made at start)."""
    return engine.serve_env(
        logical_nc_config=record.logical_nc_config,
        plugin=record.plugin,
        route=record.route,
        recorded_env={**record.kv_sizing_env, **record.compile_env},
        target=record.target,
    )


def serve_args(record: VllmNeuronRecord, bundle: str, port: int) -> list[str]:
    """The ``vllm serve`` arguments (after ``vllm serve``)."""
    return [f"{bundle}/{record.checkpoint}", *record.engine_args, "--port", str(port)]


def seed_script(source: str, root: str) -> str:
    """sh: copy the bundle's cache tree into a writable cache root, then run the arguments."""
    quoted = sh_word(root)
    return f'mkdir -p {quoted} && cp -R {sh_word(source)}/. {quoted}/ && chmod -R u+w {quoted} && exec "$$@"'


def choose_image(v: ServingValues, record: VllmNeuronRecord, options: DeployOptions) -> tuple[str, str]:
    """The image reference and where it came from."""
    from neuronc.backends.support import PINNED, pin_mismatches
    from neuronc.deploy._releases import plugin_image, release_of

    if options.image is not None:
        return options.image, "given with --image"
    release = release_of(record.release)
    if record.pinned is not None:
        return record.pinned, f"the Neuron SDK {release.version} image the compile ran in, by digest"
    image = plugin_image(release, v.target, v.toolchain)
    # The image must pin what keys the plugin's cache (neuronx-cc, NKI, libtorch-neuronx-lite); vLLM,
    # vllm-neuron and torch are recorded in the manifest, not compared.
    wrong = pin_mismatches(image, v.toolchain)
    if wrong:
        keyed = PINNED[Serves.VLLM_NEURON]
        pins = ", ".join(f"{name} {pinned or '(a version no source names)'}" for name, pinned, _ in wrong)
        msg = (
            f"the bundle was compiled with {versions_text(v.toolchain, keyed)}; Neuron SDK {release.version}'s "
            f"image {image.reference} pins {pins}: every compiled graph would miss the plugin's cache"
        )
        hint = (
            "pass --image with an image of exactly the bundle's versions, or deploy a bundle compiled in the "
            "release's image (its digest is recorded)"
        )
        raise InvalidInputError(msg, hint=hint)
    assert image.serves is Serves.VLLM_NEURON
    return image.reference, f"the Neuron SDK {release.version} vllm-neuron image (support matrix)"


def render_vllm_neuron(v: ServingValues, options: DeployOptions) -> Rendered:
    record, engine = record_of(v), engine_of(v)
    cache_env = engine.cache_root_env
    image, image_source = choose_image(v, record, options)
    cache = f"{v.bundle}/{record.cache_root}"
    env = serve_env(record, engine)
    head = (
        f"# vLLM (vllm-neuron {comment_text(record.plugin)}, torch.compile) for bundle {v.config_hash}\n"
        f"# ({v.target}, tp {v.tp_degree}, batch {v.batch_size}, LNC {record.logical_nc_config}, "
        f"Neuron SDK {comment_text(record.release)}); generated by neuronc deploy.\n"
    )
    script = (
        "#!/bin/sh\n"
        f"{head}"
        f"# For a Trn host with the bundle's SDK installed ({comment_text(versions_text(v.toolchain, VERSIONS))}).\n"
        "# The plugin writes lock files into its cache: the bundle's cache tree is copied into a writable\n"
        "# VLLM_CACHE_ROOT first (a new temporary directory unless VLLM_CACHE_ROOT is set), and a graph\n"
        f"# missing from it stops the server ({engine.fail_on_miss_env}=1) instead of compiling.\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n'
        "set -a\n. ./vllm.env\nset +a\n"
        f'if [ -z "${{{cache_env}:-}}" ]; then\n'
        f'    {cache_env}="$(mktemp -d "${{TMPDIR:-/tmp}}/neuronc-vllm-cache.XXXXXX")"\n'
        "fi\n"
        f"export {cache_env}\n"
        f'mkdir -p "${cache_env}"\n'
        f'cp -R {sh_word(cache)}/. "${cache_env}/"\n'
        f'chmod -R u+w "${cache_env}"\n'
        f"exec vllm serve {sh_command(serve_args(record, v.bundle, options.port))}\n"
    )
    files = [
        EmittedFile("vllm.env", sh_env_file(env), "environment for vllm serve"),
        EmittedFile("serve.sh", script, "vllm serve on this host, from a writable copy of the compile cache", True),
    ]
    where = placement(v, options)
    source = f"{CONTAINER_BUNDLE}/{record.cache_root}"
    command = ["sh", "-c", seed_script(source, CONTAINER_CACHE), "neuronc-seed-cache"]
    command += ["vllm", "serve", *serve_args(record, CONTAINER_BUNDLE, SERVER_PORT)]
    volume = f"{v.bundle}/artifacts:{CONTAINER_BUNDLE}/artifacts:ro"
    service = {"image": image, "command": command, "volumes": [volume], "shm_size": "1gb"}
    container_env = {cache_env: CONTAINER_CACHE, **env}
    files += replica_files(
        v,
        options,
        where,
        prefix="vllm",
        service=service,
        environment=[container_env for _ in where.groups],
        port=SERVER_PORT,
        what="vLLM (vllm-neuron) replica(s)",
    )
    longest = max(v.context_buckets) if v.context_buckets else v.max_context_length
    files += endpoint_files(
        v,
        options,
        replicas=where.replicas,
        max_prompt=min(longest, v.max_length - 1),
        max_total=v.max_length,
        tokenizer=f"{v.bundle}/{record.checkpoint}",
    )
    notes = (f"image: {image} ({image_source})",)
    return Rendered(Stack.vllm, tuple(files), image=image, notes=notes)


__all__ = ["CONTAINER_CACHE", "render_vllm_neuron", "seed_script", "serve_args", "serve_env"]
