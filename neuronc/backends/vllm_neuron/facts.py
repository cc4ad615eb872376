"""What neuronc relies on about the vllm-neuron plugin (torch.compile path) and its DLC images.

Every value here is recorded with its source in tests/fixtures/vllm_neuron/facts.json, which the
test doubles (tests/sdk_doubles) read to behave as the plugin does; tests/test_vllm_neuron_facts.py
checks that the two agree. The sources, in short:

- Cache layout: vllm-neuron ``vllm_neuron/compile/cache.py`` (0.21 line, read in public forks:
  Infinity-AI-Institute/vllm-neuron @7f4cca75, jinhuang12/vllm-neuron @6f823e07); the SDK's copy of
  the plugin docs, aws-neuron/aws-neuron-sdk ``vllm-neuron/docs/design/compilation/compilation_cache.md``
  (``$VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/``, a 32-character MD5 key).
- Environment names: ``compilation_cache.md``, ``cpu_compilation.md`` and
  ``guides/reference-configuration.md`` (0.24 names, ``NEURON_LIBTORCH_*``); the 0.21 names
  (``VLLM_NEURON_*``) from the 0.21-era ``vllm_neuron/envs.py`` (forks above) and the SDK docs before
  commit a3247f5b. ``NEURON_LOGICAL_NC_CONFIG``: about-neuron/arch/neuron-features/
  logical-neuroncore-config.rst and the plugin's envs.py.
- KV sizing parity between CPU compile and the device: ``design/vllm/determine_available_memory_design.md``
  (KV block count from the static HBM size, ``gpu_memory_utilization`` and
  ``VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION``; the KV shape is part of every NEFF).
- The route (``VLLM_NEURON_BACKEND``): the 0.21 line's ``vllm_neuron/__init__.py`` ``register()``
  ("vllm_neuron" the default, "neuron_native") and ``envs.is_native_backend`` (jinhuang12/vllm-neuron
  @0bae3e9c); 2.33 makes "neuron_native" the default and turns its Precompile Cache on only when the
  variable is set explicitly (vllm-neuron docs guides/how-to-precompile-cache, as read for
  ../shared/reference/neuron-stack-2026.md). The second no-compile switch, ``*_DISABLE_GRAPH_CAPTURE_BACKEND``
  ("used when remote cache already has the compiled artifacts", 0.21 ``envs.py``, Infinity-AI-Institute
  @1d15e568), and ``VLLM_NEURON_DISABLE_WARMUP_COMPILE`` together: cpu_compilation.md.
- Remote filesystems: the 0.21 line's ``envs._path_is_remote_filesystem`` (jinhuang12 @0bae3e9c) calls
  ``stat -f -c %T`` and treats ``nfs*`` and ``lustre`` as remote, "incompatible with FileLock semantics".
- The KV block count: vLLM 0.21 ``vllm/v1/engine/utils.py`` (``wait_for_engine_startup``) copies the
  engine cores' ``num_gpu_blocks`` into the client's ``vllm_config.cache_config``; ``num_gpu_blocks_override``
  (``--num-gpu-blocks-override``, an EngineArgs field in 0.16-0.29, tests/fixtures/vllm_neuron/engine_args.json)
  replaces the sized count (memory-design.md: the KV shape is part of every graph).
- DLC images: aws-neuron/deep-learning-containers ``vllm/inference/<v>/Dockerfile.neuronx``
  (``ENTRYPOINT ["python", "/usr/local/bin/vllm_entrypoint.py"]``, which runs its arguments;
  ``EXPOSE 8080 8081``; ``HEALTHCHECK CMD curl --fail http://localhost:8080/ping``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# -- the compile cache -----------------------------------------------------------------------------
CACHE_SUBDIR = "neuron/compile_cache"  # under $VLLM_CACHE_ROOT
ENTRY_NAME = re.compile(r"^[0-9a-f]{32}$")
HLO_FILE = "graph.hlo"
NEFF_FILE = "graph_{key}.neff"
METADATA_FILE = re.compile(r"^\.artifact_metadata_v[0-9]+\.json$")
METADATA_KEY_FIELD = "cache_key"
COMPLETE_FILE = ".compilation_complete"
# Written next to the entries while a process compiles one (a lock and who holds it), and a
# best-effort hit marker inside an entry: none of them belongs in a bundle.
LOCK_METADATA = re.compile(r"^\.[0-9a-f]{32}\.compilation_metadata(\.lock)?$")
ACCESSED_FILE = ".cache_accessed"

# -- environment -----------------------------------------------------------------------------------
CACHE_ROOT_ENV = "VLLM_CACHE_ROOT"
CPU_COMPILE_ENV = "VLLM_NEURON_CPU_COMPILE"
TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
FAIL_ON_MISS_ENV = "VLLM_NEURON_DISABLE_WARMUP_COMPILE"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
# Read at compile and at serve time to size the KV cache; the NEFFs hit only when they agree.
KV_SIZING_ENV = ("VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION", "VLLM_NEURON_MIN_KV_BUDGET_GIB")
# The compile route; set explicitly at compile and at serve (2.33's Precompile Cache is off when unset).
ROUTE_ENV = "VLLM_NEURON_BACKEND"
# The variables of a compile environment that can change what the plugin compiles: every one of them
# set where the compile ran is recorded and replayed where the bundle is served.
RECORDED_ENV_PREFIXES = ("VLLM_NEURON_", "NEURON_")
# Filesystem types (as ``stat -f -c %T`` and /proc/self/mountinfo name them) the plugin refuses.
REMOTE_FS_PREFIXES = ("nfs", "lustre")
# vLLM's EngineArgs field that pins the KV block count (``--num-gpu-blocks-override``).
BLOCKS_OVERRIDE = "num_gpu_blocks_override"


@dataclass(frozen=True)
class PluginEnv:
    """The cache variables of one plugin line (renamed from VLLM_NEURON_* to NEURON_LIBTORCH_* in 0.24)."""

    remote_cache: str
    disable_graph_capture: str
    parallel_workers: str
    compilation_timeout: str


PLUGIN_ENV: dict[str, PluginEnv] = {
    "0.21": PluginEnv(
        "VLLM_NEURON_REMOTE_CACHE",
        "VLLM_NEURON_DISABLE_GRAPH_CAPTURE_BACKEND",
        "VLLM_NEURON_PARALLEL_COMPILE_WORKERS",
        "VLLM_NEURON_COMPILATION_TIMEOUT",
    ),
    "0.24": PluginEnv(
        "NEURON_LIBTORCH_REMOTE_CACHE",
        "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND",
        "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS",
        "NEURON_LIBTORCH_COMPILATION_TIMEOUT",
    ),
}


# Variables that shape no graph: where caches live, whether they are used, how long a compile may take,
# how many compile in parallel, and the runtime's own settings (logging, core placement). A compile
# host with any of them set compiles the same graphs; never recorded, hashed, replayed or compared.
# Sources: the 0.21 plugin raises ValueError when VLLM_NEURON_DISABLE_COMPILE_CACHE is set together
# with VLLM_NEURON_DISABLE_WARMUP_COMPILE (fork vllm_neuron/compile/backend.py, compile()), and the
# SDK's compilation_cache.md calls the warm-up switch "incompatible with
# NEURON_LIBTORCH_DISABLE_COMPILE_CACHE": replaying a compile host's cache switch next to the serve
# files' warm-up switch stops the server at start (third audit).
NOT_GRAPH_ENV = frozenset(
    {
        "VLLM_NEURON_DISABLE_COMPILE_CACHE",
        "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE",
        "VLLM_NEURON_ASSERT_CACHE_HIT",
        "NEURON_COMPILE_CACHE_URL",
        *(name for line in PLUGIN_ENV.values() for name in (line.remote_cache, line.parallel_workers)),
        *(line.compilation_timeout for line in PLUGIN_ENV.values()),
    }
)
NOT_GRAPH_PREFIXES = ("NEURON_RT_",)  # the Neuron runtime: log levels, visible cores, timeouts


def shapes_graphs(name: str) -> bool:
    """Whether a ``VLLM_NEURON_*`` / ``NEURON_*`` variable can change what the plugin compiles."""
    return (
        name.startswith(RECORDED_ENV_PREFIXES) and name not in NOT_GRAPH_ENV and not name.startswith(NOT_GRAPH_PREFIXES)
    )


_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")


def env_value_problem(name: str, value: str) -> str | None:
    """Why a recorded variable cannot reach a serving file (shell, env file, YAML), or None: printable
    ASCII only, no ``$`` or backtick (expansions in sh and compose files), at most 4096 characters."""
    if not _ENV_NAME.fullmatch(name):
        return "is not a plain variable name"
    if len(value) > 4096 or any(not " " <= c <= "~" or c in "$`" for c in value):
        return "holds characters no serving file can carry (only printable ASCII, no $ or `)"
    return None


def plugin_line(plugin_version: str) -> int:
    """The plugin's minor line: ``0.21.0.1.0.0`` -> 21; anything not ``0.x`` -> 99."""
    major, _, rest = plugin_version.partition(".")
    try:
        return int(rest.partition(".")[0] or 0) if major == "0" else 99
    except ValueError:
        return 0


def default_route(plugin_version: str) -> str:
    """The route the plugin takes when ``VLLM_NEURON_BACKEND`` is unset: the XLA route ("vllm_neuron")
    before 0.29 (SDK 2.33), the native route after."""
    return "neuron_native" if plugin_line(plugin_version) >= 29 else "vllm_neuron"


def route_to_set(plugin_version: str) -> str | None:
    """The value neuronc gives ``VLLM_NEURON_BACKEND`` when the compile's environment does not set it:
    none before 0.29 (the variable stays unset, the plugin's own default: the 0.21 line's
    ``register()`` says "If VLLM_NEURON_BACKEND is not set, defaults to vllm_neuron", the 0.24 line
    lists it as "(unset)" and names its XLA value ``neuron_libtorch``, so ``vllm_neuron`` is a value that
    line may refuse); ``neuron_native`` from 0.29 (SDK 2.33), whose Precompile Cache is on only when the
    variable is set explicitly (../shared/reference/neuron-stack-2026.md, third audit)."""
    return default_route(plugin_version) if plugin_line(plugin_version) >= 29 else None


def plugin_env(plugin_version: str) -> PluginEnv:
    """The variable names of a plugin version (``0.21.0.1.0.0`` -> the 0.21 names; 0.24 and later the 0.24 ones).

    0.29's docs (the SDK's ``latest`` build, Oct 2026) still name the 0.24 variables.
    """
    return PLUGIN_ENV["0.21"] if plugin_line(plugin_version) < 24 else PLUGIN_ENV["0.24"]


# -- the Deep Learning Container ------------------------------------------------------------------
DLC_ENTRYPOINT = ("python", "/usr/local/bin/vllm_entrypoint.py")  # runs its arguments as a command
DLC_HEALTHCHECK_PORT = 8080
DLC_HEALTHCHECK_PATH = "/ping"
DLC_EXPOSED_PORTS = (8080, 8081)

# -- additional_config.neuron_config ---------------------------------------------------------------
# Keys neuronc sets from the profile; the rules are the reference's (guides/reference-configuration.md).
BUCKET_KEYS = ("num_batched_tokens_buckets", "num_seqs_buckets", "decode_context_length_buckets")
DECODE_BUCKET_MULTIPLE = 128

__all__ = [
    "ACCESSED_FILE",
    "BLOCKS_OVERRIDE",
    "BUCKET_KEYS",
    "CACHE_ROOT_ENV",
    "CACHE_SUBDIR",
    "COMPLETE_FILE",
    "CPU_COMPILE_ENV",
    "DECODE_BUCKET_MULTIPLE",
    "DLC_ENTRYPOINT",
    "DLC_EXPOSED_PORTS",
    "DLC_HEALTHCHECK_PATH",
    "DLC_HEALTHCHECK_PORT",
    "ENTRY_NAME",
    "FAIL_ON_MISS_ENV",
    "HLO_FILE",
    "KV_SIZING_ENV",
    "LNC_ENV",
    "LOCK_METADATA",
    "METADATA_FILE",
    "METADATA_KEY_FIELD",
    "NEFF_FILE",
    "NOT_GRAPH_ENV",
    "NOT_GRAPH_PREFIXES",
    "PLUGIN_ENV",
    "RECORDED_ENV_PREFIXES",
    "REMOTE_FS_PREFIXES",
    "ROUTE_ENV",
    "TARGET_ENV",
    "PluginEnv",
    "default_route",
    "env_value_problem",
    "plugin_env",
    "plugin_line",
    "route_to_set",
    "shapes_graphs",
]
