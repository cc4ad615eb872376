"""A vllm-neuron build's engine arguments, from the profile: one mapping, used to compile and to serve.

The plugin compiles one NEFF per bucket while the engine warms up, keyed by the traced graph and
its input shapes (facts.py); the KV cache shape is one of those inputs and is sized from
``gpu_memory_utilization``. So the compile (``vllm.LLM(**engine_kwargs)``) and the server
(``vllm serve <checkpoint> <engine_args>``) must get the same values, and every value whose default
differs between ``LLM`` and ``vllm serve`` (``max_num_seqs``, ``max_num_batched_tokens`` by usage
context) is always passed explicitly, and so is ``gpu_memory_utilization``: vLLM 0.21's default is 0.92
in ``LLM`` and ``EngineArgs`` alike (``vllm/entrypoints/llm.py`` ``LLM.__init__``; ``EngineArgs`` takes
``CacheConfig.gpu_memory_utilization``, ``vllm/config/cache.py``), neuronc's is its own (below).

Profile -> vLLM (``EngineArgs`` fields) and ``--additional-config '{"neuron_config": ...}'``
(vllm-neuron docs/guides/reference-configuration.md):

- ``batch_size`` -> ``max_num_seqs``; ``num_seqs_buckets`` (option, default powers of two up to it,
  the plugin's own default made explicit; the largest must equal ``max_num_seqs``);
- ``sequence.max_length`` -> ``max_model_len``;
- ``sequence.context_buckets`` -> ``num_batched_tokens_buckets`` (prefill token counts), the largest
  -> ``max_num_batched_tokens`` (which the largest bucket must equal);
- ``sequence.token_buckets`` below ``max_length`` -> ``decode_context_length_buckets`` (ascending,
  below ``max_model_len``, multiples of 128; none when the only token bucket is ``max_length``);
- ``tp_degree`` -> ``tensor_parallel_size``; ``amp`` -> ``dtype``;
- ``options.num_gpu_blocks_override`` -> ``num_gpu_blocks_override``. Without it the compile sizes the
  KV cache (CPU compile: from a static per-target HBM figure; the device: from runtime memory stats,
  design/vllm/determine_available_memory_design.md), and the count it sized is recorded and passed as
  ``--num-gpu-blocks-override`` where the bundle is served, so both agree on every graph's shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN, GraphSpec, SpecProblem
from neuronc.backends.vllm_neuron.facts import (
    BLOCKS_OVERRIDE,
    BUCKET_KEYS,
    DECODE_BUCKET_MULTIPLE,
    FAIL_ON_MISS_ENV,
    LNC_ENV,
    ROUTE_ENV,
    TARGET_ENV,
    plugin_env,
    shapes_graphs,
)
from neuronc.hardware import lnc
from neuronc.spec import PositiveInt, StrictModel, served_model_name

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

CHECKPOINT_DIR = "artifacts/checkpoint"  # the checkpoint as the plugin loads it (HF safetensors)
CACHE_DIR = "artifacts/vllm-cache"  # the VLLM_CACHE_ROOT the compile filled
CONTAINER_BUNDLE = "/bundle"  # where the bundle (and, while compiling, its staging copy) is mounted
# neuronc's choice, not vLLM's (0.92): the bundles compiled so far recorded 0.9, and the option is hashed as
# the profile gives it (unset), so another default would give an unchanged config hash other KV shapes;
# 0.9 also leaves HBM the Neuron runtime reserves outside vLLM's accounting (2.33's runtime keeps 64 MB
# per NeuronCore for DMA profiling by default: release-notes/components/runtime.rst, 2.33.0).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


class VllmNeuronOptions(StrictModel):
    """``options:`` of the vllm-neuron backend."""

    # 2 only: the plugin's neuronx-cc command passes no --lnc and its docs never name LNC (support matrix,
    # VLLM-NEURON-LNC); the profile check names that source for a 1.
    logical_nc_config: Literal[2] | None = Field(default=None, description="logical NeuronCore size: 2 (the default)")
    num_seqs_buckets: list[PositiveInt] | None = Field(
        default=None, description="decode batch buckets; the largest must be batch_size (default: powers of two)"
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="sizes the KV cache, which is part of every NEFF (default 0.9)"
    )
    block_size: PositiveInt | None = Field(default=None, description="vLLM KV block size (default: vLLM's)")
    enable_prefix_caching: bool | None = Field(default=None, description="vLLM prefix caching (default: on)")
    num_gpu_blocks_override: PositiveInt | None = Field(
        default=None,
        description="KV cache blocks (shapes every graph); default: the count the compile sizes, recorded and "
        "passed to the server",
    )
    neuron_config: dict[str, Any] = Field(
        default_factory=dict,
        description="more additional_config.neuron_config keys (e.g. on_device_sampling_config); not the buckets",
    )


def options_of(spec: BuildSpec) -> VllmNeuronOptions:
    return VllmNeuronOptions.model_validate(spec.options)


def powers_of_two_to(limit: int) -> list[int]:
    """1, 2, 4, ... below ``limit``, then ``limit`` (the plugin's default bucket progression)."""
    values = []
    value = 1
    while value < limit:
        values.append(value)
        value *= 2
    return [*values, limit]


def num_seqs_buckets(spec: BuildSpec) -> list[int]:
    given = options_of(spec).num_seqs_buckets
    return list(given) if given is not None else powers_of_two_to(spec.batch_size)


def decode_context_buckets(spec: BuildSpec) -> list[int]:
    return [b for b in spec.sequence.token_buckets if b < spec.sequence.max_length]


def neuron_config(spec: BuildSpec) -> dict[str, Any]:
    """``additional_config.neuron_config``: the buckets from the profile, then the option's extra keys."""
    config: dict[str, Any] = {
        "num_batched_tokens_buckets": list(spec.sequence.context_buckets),
        "num_seqs_buckets": num_seqs_buckets(spec),
    }
    decode = decode_context_buckets(spec)
    if decode:
        config["decode_context_length_buckets"] = decode
    config.update(options_of(spec).neuron_config)
    return config


def engine_kwargs(spec: BuildSpec, checkpoint: str) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)``: EngineArgs fields, with the checkpoint at ``checkpoint``."""
    options = options_of(spec)
    kwargs: dict[str, Any] = {
        "model": checkpoint,
        "tokenizer": checkpoint,
        "served_model_name": [served_model_name(spec.model.id)],
        "tensor_parallel_size": spec.tp_degree,
        "max_num_seqs": spec.batch_size,
        "max_model_len": spec.sequence.max_length,
        "max_num_batched_tokens": max(spec.sequence.context_buckets),
        "dtype": spec.dtype,
        "gpu_memory_utilization": options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
        "additional_config": {"neuron_config": neuron_config(spec)},
    }
    if options.block_size is not None:
        kwargs["block_size"] = options.block_size
    if options.enable_prefix_caching is not None:
        kwargs["enable_prefix_caching"] = options.enable_prefix_caching
    if options.num_gpu_blocks_override is not None:
        kwargs[BLOCKS_OVERRIDE] = options.num_gpu_blocks_override
    return kwargs


def serve_env(
    *,
    logical_nc_config: int,
    plugin: str,
    route: str | None,
    recorded_env: Mapping[str, str],
    target: str | None = None,
) -> dict[str, str]:
    """The served engine's variables (but ``VLLM_CACHE_ROOT``, a writable copy made at start): the
    compile's recorded ``VLLM_NEURON_*`` / ``NEURON_*`` variables (KV sizing included: it shapes every
    NEFF), then the route as compiled (only when the compile set it: unset is the plugin's own default
    below 0.29, facts.route_to_set), the LNC and the platform target compiled for (the plugin's key
    takes its target from ``NEURON_PLATFORM_TARGET_OVERRIDE``, else the compiler arguments, else the
    runtime's detection: 0.21 fork ``compile/cache.py``, ``_normalize_compiler_args``; pinned, the key
    cannot name the chip another way, as Trn3's ``trn3pds``), and both no-compile switches: a cache
    miss is fatal (``VLLM_NEURON_DISABLE_WARMUP_COMPILE``) and no graph is captured (the line's
    ``*_DISABLE_GRAPH_CAPTURE_BACKEND``), cpu_compilation.md. A recorded variable that shapes no graph
    (a cache switch, a location, a timeout: ``facts.shapes_graphs``) is never replayed."""
    env = {k: v for k, v in recorded_env.items() if shapes_graphs(k)}
    if route:
        env[ROUTE_ENV] = route
    env[LNC_ENV] = str(logical_nc_config)
    if target:
        env[TARGET_ENV] = target
    env[FAIL_ON_MISS_ENV] = "1"
    env[plugin_env(plugin).disable_graph_capture] = "1"
    return env


# The EngineArgs fields ``engine_kwargs`` can set besides the checkpoint, and how ``engine_cli`` writes
# each: the one list the served flags come from. ``engine_cli`` writes nothing else, and deploy lets
# through exactly these flags (``engine_args_problem``). Each is an EngineArgs field of every vLLM a
# vllm-neuron image pins (vllm/engine/arg_utils.py, tests/fixtures/vllm_neuron/engine_args.json), whose
# ``add_cli_args`` makes ``--field-name``; tests/contract/serving/test_vllm_parser.py parses each flag
# with that version's own parser.
ENGINE_FIELDS: dict[str, Literal["int", "float", "name", "names", "json", "switch"]] = {
    "served_model_name": "names",
    "tensor_parallel_size": "int",
    "max_num_seqs": "int",
    "max_model_len": "int",
    "max_num_batched_tokens": "int",
    "dtype": "name",
    "gpu_memory_utilization": "float",
    "additional_config": "json",
    "block_size": "int",
    "enable_prefix_caching": "switch",
    BLOCKS_OVERRIDE: "int",
}


def cli_flag(field: str, *, negated: bool = False) -> str:
    """``max_num_seqs`` -> ``--max-num-seqs`` (``--no-...`` for a switch turned off)."""
    return ("--no-" if negated else "--") + field.replace("_", "-")


def engine_cli(kwargs: Mapping[str, Any]) -> list[str]:
    """The same values as ``vllm serve`` arguments, without the model and tokenizer (the caller places
    the checkpoint): ``--flag value`` per EngineArgs field, JSON for ``--additional-config``."""
    args: list[str] = []
    for key, value in kwargs.items():
        if key in ("model", "tokenizer"):
            continue
        kind = ENGINE_FIELDS.get(key)
        if kind is None:
            raise ValueError(f"{key} is not an engine argument neuronc serves (add it to ENGINE_FIELDS)")
        if kind == "switch":
            args.append(cli_flag(key, negated=not value))
        elif kind == "names":
            args += [cli_flag(key), *map(str, value)]
        elif kind == "json":
            args += [cli_flag(key), json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            args += [cli_flag(key), str(value)]
    return args


def served_flags() -> dict[str, str]:
    """Every flag ``engine_cli`` can write, to its EngineArgs field (a switch: ``--x`` and ``--no-x``)."""
    flags: dict[str, str] = {}
    for field, kind in ENGINE_FIELDS.items():
        flags[cli_flag(field)] = field
        if kind == "switch":
            flags[cli_flag(field, negated=True)] = field
    return flags


_NAME = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


def _value_problem(kind: str, value: str) -> str | None:
    if kind == "int":
        return None if value.isascii() and value.isdigit() and len(value) <= 12 else "is not a whole number"
    if kind == "float":
        # str() of a float: 0.9, 1.0, 1e-05.
        return None if re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,17})?(e-?[0-9]{1,3})?", value) else "is not a number"
    if kind == "name":
        return None if _NAME.fullmatch(value) else "is not a plain name"
    if kind == "json":
        try:
            return None if isinstance(json.loads(value), dict) else "is not a JSON object"
        except ValueError:
            return "is not a JSON object"
    return None  # names: anything not flag-like (checked by the caller), quoted where it is written


def engine_args_problem(args: Sequence[str]) -> tuple[str, str] | None:
    """The first recorded ``vllm serve`` argument ``engine_cli`` would not have written, and why; or None.

    Only the exact flags of ``served_flags`` (each at most once), each followed by what ``engine_cli``
    writes after it. Exact, because vLLM's parser is argparse's, which takes an unambiguous prefix of a
    flag (``allow_abbrev``, on by default: ``--ho`` would be ``--host``) and vLLM's also reads ``_`` as
    ``-``; and no value may start with ``-``, which argparse reads as the next flag
    (``--served-model-name --trust-remote-code``).
    """
    allowed = served_flags()
    seen: set[str] = set()
    at = 0
    while at < len(args):
        flag = args[at]
        field = allowed.get(flag)
        if field is None:
            what = "a flag" if flag.startswith("-") else "a positional argument"
            return flag, f"is {what} neuronc never writes (only {', '.join(sorted(allowed))}, exactly)"
        kind = ENGINE_FIELDS[field]
        if field in seen:
            return flag, "is given twice"
        seen.add(field)
        at += 1
        if kind == "switch":
            continue
        values: list[str] = []
        while at < len(args) and not args[at].startswith("--") and (kind == "names" or not values):
            values.append(args[at])
            at += 1
        if not values:
            then = f" (then {args[at]!r}, which argparse reads as a flag)" if at < len(args) else ""
            return flag, f"has no value{then}"
        for value in values:
            problem = "looks like a flag" if value.startswith("-") else _value_problem(kind, value)
            if problem is not None:
                return value, f"(the value of {flag}) {problem}"
    return None


def plan_graphs(spec: BuildSpec) -> tuple[GraphSpec, ...]:
    """One prefill graph per token bucket, one decode graph per (sequences, context length) bucket."""
    prefill = [GraphSpec(ROLE_CONTEXT, 1, tokens) for tokens in spec.sequence.context_buckets]
    lengths = [*decode_context_buckets(spec), spec.sequence.max_length]
    decode = [GraphSpec(ROLE_TOKEN, seqs, length) for seqs in num_seqs_buckets(spec) for length in lengths]
    return tuple(prefill + decode)


def engine_problems(spec: BuildSpec) -> list[SpecProblem]:
    """The plugin's rules for the buckets, checked before anything compiles."""
    problems: list[SpecProblem] = []
    options = options_of(spec)
    for key in BUCKET_KEYS:
        if key in options.neuron_config:
            msg = "set by neuronc from the profile's sequence buckets and batch_size (options.num_seqs_buckets)"
            problems.append(SpecProblem(("options", "neuron_config", key), msg))
    seqs = options.num_seqs_buckets
    if seqs is not None:
        if seqs != sorted(set(seqs)):
            problems.append(SpecProblem(("options", "num_seqs_buckets"), "must be strictly ascending"))
        elif seqs[-1] != spec.batch_size:
            msg = f"the largest bucket must equal batch_size {spec.batch_size} (max_num_seqs)"
            problems.append(SpecProblem(("options", "num_seqs_buckets"), msg))
    odd = [b for b in decode_context_buckets(spec) if b % DECODE_BUCKET_MULTIPLE]
    if odd:
        msg = (
            f"token buckets below max_length become decode_context_length_buckets, which must be multiples of "
            f"{DECODE_BUCKET_MULTIPLE}: {', '.join(map(str, odd))} are not"
        )
        problems.append(SpecProblem(("sequence", "token_buckets"), msg))
    return problems


def logical_nc(spec: BuildSpec) -> int:
    return lnc(spec.target, spec.options)


def describe(kwargs: Mapping[str, Any], args: Sequence[str]) -> dict[str, Any]:
    """What the manifest records about the engine: the kwargs the compile used and the serve arguments."""
    return {"engine_kwargs": dict(kwargs), "engine_args": list(args)}


__all__ = [
    "CACHE_DIR",
    "CHECKPOINT_DIR",
    "CONTAINER_BUNDLE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "ENGINE_FIELDS",
    "VllmNeuronOptions",
    "cli_flag",
    "decode_context_buckets",
    "describe",
    "engine_args_problem",
    "engine_cli",
    "engine_kwargs",
    "engine_problems",
    "logical_nc",
    "neuron_config",
    "num_seqs_buckets",
    "options_of",
    "plan_graphs",
    "powers_of_two_to",
    "serve_env",
    "served_flags",
]
