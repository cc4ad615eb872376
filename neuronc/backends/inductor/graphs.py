"""The CTE/TKG wrappers the inductor backend exports, and the export + AOTInductor compile of one graph.

The wrappers reuse Hugging Face's own decoder modules unchanged (``causal_lm.model`` and
``causal_lm.lm_head``). Only two things are swapped in:

- an explicit cache object (a ``transformers`` ``Cache`` whose layers subclass ``StaticLayer``) that
  scatters new K/V into caller-owned static tensors ``[B, KVH, MAX, D]`` at explicit positions, one
  position per row, so the runtime owns one KV set shared by every graph;
- a prebuilt 4-D boolean attention mask (HF's masking utilities pass 4-D masks through unchanged).

Context encoding (CTE), one graph per (batch, S):
    ``(input_ids [B,S] int64, position_ids [B,S] int64, last_token_idx [B] int64, *kv) -> logits [B,V] f32``
    right-padded prompt; attends to the S new tokens only; K/V written at positions 0..S-1.
Token generation (TKG), one graph per (batch, T) with T a KV-length bucket (T <= MAX):
    ``(input_ids [B,1] int64, position_ids [B,1] int64, *kv) -> logits [B,V] f32``
    attends to cache positions 0..T-1 with ``kv_pos <= pos``; K/V written at ``position_ids``.

``kv`` is ``k_0, v_0, k_1, v_1, ...`` for every layer, each ``[B, KVH, MAX, D]`` in the model dtype,
mutated in place. This module imports torch and transformers at import time; it is only imported
by the compile worker, the runtime and tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoConfig
from transformers.cache_utils import Cache, StaticLayer

from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN
from neuronc.backends.inductor.format import GRAPH_FORMAT, SUPPORTED_MODEL_TYPES

_AUTO_MODEL: Any = transformers.AutoModelForCausalLM
DTYPES: dict[str, Any] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES: dict[Any, str] = {v: k for k, v in DTYPES.items()} | {torch.int64: "int64", torch.int32: "int32"}


# ------------------------------------------------------------------------------------------------
# Model construction
# ------------------------------------------------------------------------------------------------


def load_config(model_dir: Path) -> Any:
    """The HF config of a model directory, forced to SDPA attention (what the graphs are built from)."""
    # attn_implementation: PretrainedConfig's public keyword (not the private attribute).
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="sdpa")
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        msg = f"model_type '{config.model_type}' is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        raise ValueError(msg)
    return config


def build_model(config: Any, dtype: Any) -> Any:
    """An HF causal LM from ``config`` in ``dtype``, with uninitialised weights (fast; values unused).

    Non-persistent buffers (rotary ``inv_freq``) are computed in the modules' constructors, so they
    are real values; they are the only constants a graph owns (see ``graph_owned_constants``).
    """
    try:  # transformers 5 moved it
        from transformers.initialization import no_init_weights  # type: ignore[import-not-found, unused-ignore]
    except ImportError:  # transformers 4.57.x (the Neuron SDK's pin)
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined, unused-ignore]

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with no_init_weights():
            model = _AUTO_MODEL.from_config(config, dtype=dtype, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(previous)
    # no_init_weights also skips tying: tie explicitly, so tied checkpoints (one stored copy) bind.
    model.tie_weights()
    model.eval()
    model.requires_grad_(False)
    return model


# ------------------------------------------------------------------------------------------------
# Cache and masks
# ------------------------------------------------------------------------------------------------


class _PositionLayer(StaticLayer):
    """A StaticLayer over caller-owned tensors that writes each row's K/V at that row's positions."""

    def __init__(self, keys: Any, values: Any, position_ids: Any, window: int | None, return_cache: bool) -> None:
        super().__init__(max_cache_len=keys.shape[2])
        self.keys = keys
        self.values = values
        self.max_batch_size, self.num_heads, _, self.head_dim = keys.shape
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._position_ids = position_ids
        self._window = window
        self._return_cache = return_cache

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        # Whatever else the caller passes is ignored: positions come from ``position_ids``. The
        # call shape changed across transformers releases (4.57 passes ``cache_kwargs`` positionally,
        # 5.24 ``kwargs=``), so this accepts every call the base class accepts
        # (tests/test_inductor.py checks that against the installed release).
        keys: Any = self.keys
        values: Any = self.values
        batch, heads, length, dim = key_states.shape
        index = self._position_ids[:, None, :, None].expand(batch, heads, length, dim)
        keys.scatter_(2, index, key_states)
        values.scatter_(2, index, value_states)
        if not self._return_cache:
            return key_states, value_states
        if self._window is None:
            return keys, values
        return keys[:, :, : self._window], values[:, :, : self._window]


class PositionCache(Cache):
    """The explicit cache handed to HF's decoder: one ``_PositionLayer`` per decoder layer."""

    is_compileable = True

    def __init__(self, kv: Sequence[Any], position_ids: Any, window: int | None, return_cache: bool) -> None:
        layers: list[Any] = [
            _PositionLayer(kv[2 * i], kv[2 * i + 1], position_ids, window, return_cache) for i in range(len(kv) // 2)
        ]
        super().__init__(layers=layers)


def _attention_mask(config: Any, causal: Any, sliding: Any) -> Any:
    """What to pass as ``attention_mask``: one 4-D mask, or qwen2-style a mapping per layer type."""
    layer_types = getattr(config, "layer_types", None)
    if config.model_type == "qwen2" and layer_types is not None:
        return {"full_attention": causal, "sliding_attention": sliding}
    if getattr(config, "sliding_window", None) is not None:
        return sliding
    return causal


def _masks(config: Any, q_pos: Any, kv_pos: Any) -> tuple[Any, Any]:
    """Causal (and sliding-window) boolean masks ``[B, 1, Q, K]`` from query and key positions."""
    causal = kv_pos[:, None, None, :] <= q_pos[:, None, :, None]
    window = getattr(config, "sliding_window", None)
    if window is None:
        return causal, causal
    sliding = causal & (kv_pos[:, None, None, :] > q_pos[:, None, :, None] - window)
    return causal, sliding


def _decode(causal_lm: Any, input_ids: Any, position_ids: Any, kv_pos: Any, cache: Any) -> Any:
    """The decoder stack over ``cache`` with neuronc's masks: the last hidden states ``[B, Q, H]``."""
    config = causal_lm.config
    causal, sliding = _masks(config, position_ids, kv_pos)
    out = causal_lm.model(
        input_ids=input_ids,
        attention_mask=_attention_mask(config, causal, sliding),
        position_ids=position_ids,
        past_key_values=cache,
        cache_position=position_ids[0],
        use_cache=True,
    )
    return out.last_hidden_state


# ------------------------------------------------------------------------------------------------
# The two wrappers
# ------------------------------------------------------------------------------------------------


class ContextEncoding(torch.nn.Module):
    """Prefill of a right-padded bucket: logits of each row's last real token."""

    def __init__(self, causal_lm: Any) -> None:
        super().__init__()
        self.model = causal_lm

    def forward(self, input_ids: Any, position_ids: Any, last_token_idx: Any, *kv: Any) -> Any:
        cache = PositionCache(kv, position_ids, None, return_cache=False)
        hidden = _decode(self.model, input_ids, position_ids, position_ids, cache)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        last = hidden[rows, last_token_idx]
        return self.model.lm_head(last).float()


class TokenGeneration(torch.nn.Module):
    """One decode step per row against the first ``window`` positions of the static cache."""

    def __init__(self, causal_lm: Any, window: int) -> None:
        super().__init__()
        self.model = causal_lm
        self.window = window

    def forward(self, input_ids: Any, position_ids: Any, *kv: Any) -> Any:
        kv_pos = torch.arange(self.window, device=input_ids.device)[None, :].expand(input_ids.shape[0], -1)
        max_length = kv[0].shape[2]
        cache = PositionCache(kv, position_ids, None if self.window == max_length else self.window, return_cache=True)
        hidden = _decode(self.model, input_ids, position_ids, kv_pos, cache)
        return self.model.lm_head(hidden[:, -1]).float()


# ------------------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------------------


def kv_shape(config: Any, batch: int, max_length: int) -> tuple[int, int, int, int]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return (batch, kv_heads, max_length, head_dim)


def input_specs(config: Any, role: str, batch: int, bucket: int, max_length: int, dtype: Any) -> list[dict[str, Any]]:
    """Name, shape and dtype of every graph input, in call order (recorded in the graph's metadata)."""
    if role == ROLE_CONTEXT:
        specs: list[dict[str, Any]] = [
            {"name": "input_ids", "shape": [batch, bucket], "dtype": "int64"},
            {"name": "position_ids", "shape": [batch, bucket], "dtype": "int64"},
            {"name": "last_token_idx", "shape": [batch], "dtype": "int64"},
        ]
    else:
        specs = [
            {"name": "input_ids", "shape": [batch, 1], "dtype": "int64"},
            {"name": "position_ids", "shape": [batch, 1], "dtype": "int64"},
        ]
    shape = list(kv_shape(config, batch, max_length))
    for layer in range(config.num_hidden_layers):
        for kind in ("k", "v"):
            specs.append({"name": f"{kind}_{layer}", "shape": shape, "dtype": DTYPE_NAMES[dtype]})
    return specs


def example_inputs(specs: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    tensors = []
    for spec in specs:
        dtype = DTYPES.get(spec["dtype"], torch.int64)
        tensors.append(torch.zeros(spec["shape"], dtype=dtype))
    return tuple(tensors)


def wrapper_for(causal_lm: Any, role: str, bucket: int) -> torch.nn.Module:
    if role == ROLE_CONTEXT:
        return ContextEncoding(causal_lm)
    if role == ROLE_TOKEN:
        return TokenGeneration(causal_lm, bucket)
    msg = f"unknown graph role {role!r}"
    raise ValueError(msg)


# ------------------------------------------------------------------------------------------------
# Constants: what each compiled graph needs bound at load time
# ------------------------------------------------------------------------------------------------


def constant_sources(wrapper: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Every parameter and buffer of ``wrapper`` by FQN, with the checkpoint keys that can supply it.

    Tied weights (``lm_head.weight`` and ``model.embed_tokens.weight``) are one tensor with several
    names; each FQN lists all of them (checkpoints store tied weights once). Non-persistent buffers
    are marked ``graph_owned``: they are not in any checkpoint, so the graph ships their values.
    """
    aliases: dict[int, list[str]] = {}
    named = list(wrapper.named_parameters(remove_duplicate=False)) + list(wrapper.named_buffers(remove_duplicate=False))
    for name, tensor in named:
        aliases.setdefault(id(tensor), []).append(_checkpoint_key(name))
    persistent = set(wrapper.state_dict(keep_vars=True))
    result: dict[str, dict[str, Any]] = {}
    for name, tensor in named:
        result[name] = {
            "keys": sorted(set(aliases[id(tensor)])),
            "shape": list(tensor.shape),
            "dtype": DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype)),
            "graph_owned": name not in persistent,
        }
    return result


def _checkpoint_key(fqn: str) -> str:
    """Wrapper FQN -> HF checkpoint key: the wrapper holds the causal LM as ``model``."""
    return fqn.removeprefix("model.")


def graph_owned_constants(wrapper: torch.nn.Module) -> dict[str, Any]:
    """Non-persistent buffers (e.g. rotary ``inv_freq``) by wrapper FQN, as contiguous CPU tensors."""
    persistent = set(wrapper.state_dict())
    return {
        name: buf.detach().contiguous().clone()
        for name, buf in wrapper.named_buffers(remove_duplicate=False)
        if name not in persistent
    }


# ------------------------------------------------------------------------------------------------
# Export + AOTInductor compile of one graph (runs in the worker process)
# ------------------------------------------------------------------------------------------------


# AOTInductor settings that cut the C++ compile of every graph and do not change what it computes
# (a profile's ``options.inductor_config`` may still set each). Measured on the demo (torch 2.13, 2
# cores): a graph's AOTInductor step 15.6 s -> 12.0 s, and the logits of a bundle built with these
# were bit-identical to one built without, prefill and decode (greedy, 6 prompts x 20 steps).
# - precompile_headers: precompiled headers (torch/_inductor/codecache.py ``_precompile_header``)
#   cost a first compile two extra compiles of the runtime header set (about 7 s of CPU) and did not
#   make a wrapper compile cheaper (8.1 s of CPU with the 140 MB header, 7.9 s without).
# - compile_wrapper_opt_level O0: only the wrapper's ``run_impl`` (tensor bookkeeping and the calls
#   into the kernels, which stay at -O3) is built at -O0 instead of -O1: 8 s -> 5 s of the wrapper's
#   compile. No arithmetic of the model is in it.
# - enable_line_tables / enable_frame_pointer: debug line tables and frame pointers, for profilers.
# A setting this torch does not have is left out (an older torch has no such knob to turn).
OUTPUT_NEUTRAL_SETTINGS: dict[str, Any] = {
    "aot_inductor.precompile_headers": False,
    "aot_inductor.compile_wrapper_opt_level": "O0",
    "aot_inductor.enable_line_tables": False,
    "aot_inductor.enable_frame_pointer": False,
}


@dataclass
class ExportedGraph:
    """One graph exported (``torch.export``) and ready for AOTInductor: what ``compile_exported`` needs."""

    name: str
    wrapper: torch.nn.Module
    program: Any  # torch.export.ExportedProgram
    metadata: dict[str, Any]  # the fields of ``<name>.json`` known once the graph is exported


def export_graph(
    model: Any, *, role: str, batch: int, bucket: int, max_length: int, dtype_name: str, name: str
) -> ExportedGraph:
    """Export one graph of ``model`` (built by ``build_model``; several graphs may share it)."""
    config = model.config
    wrapper = wrapper_for(model, role, bucket)
    specs = input_specs(config, role, batch, bucket, max_length, DTYPES[dtype_name])
    started = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(wrapper, example_inputs(specs), strict=False)
    metadata = {
        "format": GRAPH_FORMAT,
        "name": name,
        "role": role,
        "batch": batch,
        "bucket": bucket,
        "max_length": max_length,
        "dtype": dtype_name,
        "model_type": config.model_type,
        "inputs": specs,
        "output": {"shape": [batch, config.vocab_size], "dtype": "float32"},
        "export_seconds": round(time.perf_counter() - started, 3),
    }
    return ExportedGraph(name, wrapper, program, metadata)


def compile_exported(
    graph: ExportedGraph, out_dir: Path, inductor_config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """AOT-compile an exported graph into ``out_dir/<name>.pt2`` without weights.

    Also writes ``<name>.constants.safetensors`` (the graph-owned constants) and returns the graph
    metadata that the caller stores as ``<name>.json``.
    """
    import torch._inductor
    from safetensors.torch import save_file

    from neuronc.backends.inductor.options import inductor_settings

    name = graph.name
    options: dict[str, Any] = {"aot_inductor.package_constants_in_so": False}
    settings = inductor_settings() or {}
    options.update({key: value for key, value in OUTPUT_NEUTRAL_SETTINGS.items() if key in settings})
    options.update(dict(inductor_config or {}))
    started = time.perf_counter()
    package = out_dir / f"{name}.pt2"
    torch._inductor.aoti_compile_and_package(graph.program, package_path=str(package), inductor_configs=options)
    aoti_seconds = time.perf_counter() - started

    # The FQNs the compiled graph asks for; each must come from the checkpoint or the graph itself.
    compiled = torch._inductor.aoti_load_package(str(package))
    fqns = sorted(compiled.get_constant_fqns())
    sources = constant_sources(graph.wrapper)
    owned = graph_owned_constants(graph.wrapper)
    constants: dict[str, dict[str, Any]] = {}
    for fqn in fqns:
        if fqn not in sources:
            msg = f"compiled graph needs constant '{fqn}' that the wrapper does not have"
            raise RuntimeError(msg)
        constants[fqn] = sources[fqn]
    save_file({k: v for k, v in owned.items() if k in constants}, str(out_dir / f"{name}.constants.safetensors"))

    return {
        **graph.metadata,
        "package": f"{name}.pt2",
        "owned_constants": f"{name}.constants.safetensors",
        "constants": constants,
        "aoti_seconds": round(aoti_seconds, 3),
        "torch": torch.__version__,
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
