"""Pre-flight memory estimates: will a build fit before an hour of compile is spent on it?

``estimate(spec, model_config)`` returns an ``Estimate`` for one build; ``preflight(spec,
model_config)`` returns the same and raises ``PreflightError`` (exit 2) when the build cannot fit
the target's memory per NeuronCore, naming the numbers. Everything here is arithmetic on the
profile and the model's ``config.json``: no torch, no network, no file other than that config.

The model (documented in docs/ci.md, "Pre-flight"):

* **Parameters** are counted from ``config.json`` for the llama-like family (llama, mistral, qwen2,
  qwen3, gemma, gemma2, granite, phi3), mixtral, opt, gpt2 and gpt_neox, exactly as transformers
  instantiates them (tests compare with transformers on the meta device). Any other family, or a config
  that is not available locally, gives "unknown" rather than a failure.
* **Device memory per NeuronCore** = weights / tp + KV cache per core, where the KV cache is
  ``batch × max_length × layers × kv_heads × head_dim × 2 (K and V) × dtype bytes``. KV heads are
  sharded across tp ranks; when ``kv_heads < tp`` each rank holds a replica of one head, so a core
  holds ``ceil(kv_heads / tp)`` heads. This is compared with the target's HBM per core (16 GiB on
  inf2 and trn1, 24 GiB per logical core on trn2 at LNC=2, 12 GiB at LNC=1). Activations, scratchpad
  and instruction memory are not counted: a build above 90% of HBM gets a warning.
* **Host RAM for split** (presharded weights only) = 300 MiB + the largest tensor as stored + its
  largest converted slice: the splitter streams one tensor at a time.
* **Host RAM for compile** is a rough, backend-dependent model (see ``_COMPILE_MODELS``): a fixed
  base plus a multiple of the weights held while tracing, plus a per-graph amount for each graph
  compiled in parallel. Host RAM is reported and warned about, never an error: the planning host is
  rarely the compile host.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neuronc.errors import PreflightError

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

GIB = 1024**3
MIB = 1024**2
SPLIT_BASE_BYTES = 300 * MIB
# Above this share of HBM per core, activations and runtime scratch may not fit: warn.
HBM_WARN_FRACTION = 0.9
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp32": 4, "fp16": 2, "bf16": 2, "float64": 8}

LLAMA_LIKE = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "granite",
        "phi3",
    }
)
FAMILIES = (*sorted(LLAMA_LIKE), "mixtral", "opt", "gpt2", "gpt_neox")


@dataclass(frozen=True)
class CompileModel:
    """Host RAM while compiling: base + weights_factor × weights held + per_graph × parallel graphs."""

    base_bytes: int
    weights_factor: float
    per_graph_bytes: int
    # Whether each parallel graph process holds its own copy of the weights (inductor workers do).
    weights_per_graph: bool
    note: str


# Rough models, documented rather than measured except where a source says so.
_COMPILE_MODELS: dict[str, CompileModel] = {
    # reference/cpu-aot-inductor.md: a 254M-parameter fp32 model (1.0 GB) peaked at 3.5 GB per graph process.
    "inductor": CompileModel(
        int(0.5 * GIB), 0.0, int(1.5 * GIB), True, "each graph process loads the model and binds 2× its weights"
    ),
    # NxD traces the whole model on the host before neuronx-cc runs: Llama-3.1-8B (16 GB bf16) is killed
    # during HLO generation on a 32 GB host (reference/peers.md), so 2× weights + base.
    "nxdi": CompileModel(4 * GIB, 2.0, 2 * GIB, False, "HLO generation holds ~2× the weights; neuronx-cc per graph"),
    "optimum-neuron": CompileModel(4 * GIB, 2.0, 2 * GIB, False, "NxD tracing, as nxdi"),
    "transformers-neuronx": CompileModel(
        4 * GIB, 2.0, 2 * GIB, False, "from_pretrained loads the model on the host, then to_neuron compiles"
    ),
    # torch_neuronx.trace runs the eager model on the host, usually in fp32.
    "torch-neuronx": CompileModel(2 * GIB, 2.0, 1 * GIB, False, "trace runs the eager model on the host"),
}


@dataclass(frozen=True)
class ModelDims:
    """What the estimate needs from a model's config.json."""

    model_type: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    largest_tensor_params: int
    source_dtype_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "params": self.params,
            "layers": self.layers,
            "hidden_size": self.hidden,
            "attention_heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "largest_tensor_params": self.largest_tensor_params,
            "checkpoint_dtype_bytes": self.source_dtype_bytes,
        }


@dataclass
class Estimate:
    """Pre-flight numbers for one build. ``None`` means unknown (no config, or an unsupported family)."""

    label: str
    target: str
    tp_degree: int
    batch_size: int
    max_length: int
    dtype: str
    model: ModelDims | None = None
    unknown_reason: str | None = None
    weights_bytes: int | None = None
    weights_per_core_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_heads_per_core: int | None = None
    kv_cache_per_core_bytes: int | None = None
    device_per_core_bytes: int | None = None
    hbm_per_core_bytes: int | None = None
    host_split_bytes: int | None = None
    host_compile_bytes: int | None = None
    host_compile_per_graph_bytes: int | None = None
    compile_jobs: int = 1
    graphs: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        """True or False when both sides are known; None otherwise (CPU targets have no HBM)."""
        if self.device_per_core_bytes is None or self.hbm_per_core_bytes is None:
            return None
        return self.device_per_core_bytes <= self.hbm_per_core_bytes

    @property
    def hbm_fraction(self) -> float | None:
        if self.device_per_core_bytes is None or not self.hbm_per_core_bytes:
            return None
        return self.device_per_core_bytes / self.hbm_per_core_bytes

    @property
    def status(self) -> str:
        """fits | does-not-fit | unknown | n/a (no device memory to check: CPU)."""
        if self.hbm_per_core_bytes is None and self.target == "cpu":
            return "n/a"
        fits = self.fits
        if fits is None:
            return "unknown"
        return "fits" if fits else "does-not-fit"

    def summary(self) -> str:
        """One line with the numbers, for messages and tables."""
        if self.device_per_core_bytes is None:
            reason = f" ({self.unknown_reason})" if self.unknown_reason else ""
            return f"device memory per core unknown{reason}"
        assert self.weights_per_core_bytes is not None and self.kv_cache_per_core_bytes is not None
        text = (
            f"{gib(self.device_per_core_bytes)} per NeuronCore = "
            f"weights {gib(self.weights_bytes)} / tp {self.tp_degree}"
            f" ({gib(self.weights_per_core_bytes)}) + KV cache {gib(self.kv_cache_per_core_bytes)}"
            f" (batch {self.batch_size} × max_length {self.max_length} × {self._kv_shape()})"
        )
        if self.hbm_per_core_bytes is not None:
            text += f"; {self.target} has {gib(self.hbm_per_core_bytes)} per core"
        return text

    def _kv_shape(self) -> str:
        if self.model is None or self.kv_heads_per_core is None:
            return "?"
        m = self.model
        replicated = " replicated" if m.kv_heads < self.tp_degree else ""
        return (
            f"{m.layers} layers × {self.kv_heads_per_core} of {m.kv_heads} KV heads per core{replicated}"
            f" × head_dim {m.head_dim} × 2 × {DTYPE_BYTES.get(self.dtype, '?')} bytes"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "fits": self.fits,
            "unknown_reason": self.unknown_reason,
            "target": self.target,
            "tp_degree": self.tp_degree,
            "batch_size": self.batch_size,
            "max_length": self.max_length,
            "dtype": self.dtype,
            "model": self.model.to_json() if self.model else None,
            "weights_bytes": self.weights_bytes,
            "weights_per_core_bytes": self.weights_per_core_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_heads_per_core": self.kv_heads_per_core,
            "kv_cache_per_core_bytes": self.kv_cache_per_core_bytes,
            "device_per_core_bytes": self.device_per_core_bytes,
            "hbm_per_core_bytes": self.hbm_per_core_bytes,
            "hbm_fraction": None if self.hbm_fraction is None else round(self.hbm_fraction, 4),
            "host_split_bytes": self.host_split_bytes,
            "host_compile_bytes": self.host_compile_bytes,
            "host_compile_per_graph_bytes": self.host_compile_per_graph_bytes,
            "compile_jobs": self.compile_jobs,
            "graphs": self.graphs,
            "warnings": list(self.warnings),
        }


def gib(value: int | None) -> str:
    """Bytes as GiB with one decimal ("?" when unknown)."""
    if value is None:
        return "?"
    return f"{value / GIB:.1f} GiB"


# ------------------------------------------------------------------------------------------------
# Parameter counts from config.json
# ------------------------------------------------------------------------------------------------


def _int(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _dtype_bytes(config: Mapping[str, Any]) -> int:
    """Bytes per value of the checkpoint as stored (HF's default, when unset, is float32)."""
    name = config.get("torch_dtype") or config.get("dtype")
    return DTYPE_BYTES.get(name, 4) if isinstance(name, str) else 4


def model_dims(config: Mapping[str, Any]) -> tuple[ModelDims | None, str | None]:
    """Count parameters and read the attention shape; (None, why) for families we cannot count."""
    text = config.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    model_type = cfg.get("model_type") or config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return None, "config.json has no model_type"
    if model_type in LLAMA_LIKE or model_type == "mixtral":
        counted = _llama_like(cfg, model_type)
    elif model_type == "opt":
        counted = _opt(cfg)
    elif model_type == "gpt2":
        counted = _gpt2(cfg)
    elif model_type == "gpt_neox":
        counted = _gpt_neox(cfg)
    else:
        return None, f"parameter count for model_type '{model_type}' is not implemented (known: {', '.join(FAMILIES)})"
    if counted is None:
        return None, f"config.json for '{model_type}' lacks a field the estimate needs"
    params, layers, hidden, heads, kv_heads, head_dim, vocab, largest = counted
    return (
        ModelDims(model_type, params, layers, hidden, heads, kv_heads, head_dim, vocab, largest, _dtype_bytes(cfg)),
        None,
    )


_Counted = tuple[int, int, int, int, int, int, int, int]


def _llama_like(cfg: Mapping[str, Any], model_type: str) -> _Counted | None:
    hidden = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    inter = _int(cfg, "intermediate_size")
    vocab = _int(cfg, "vocab_size")
    if None in (hidden, layers, heads, inter, vocab):
        return None
    assert hidden and layers and heads and inter and vocab
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim") or hidden // heads
    q = hidden * heads * head_dim
    kv = 2 * hidden * kv_heads * head_dim
    o = heads * head_dim * hidden
    bias = cfg.get("attention_bias") is True or model_type == "qwen2"
    attn = q + kv + o + ((heads + 2 * kv_heads) * head_dim if bias else 0)
    experts = _int(cfg, "num_local_experts") if model_type == "mixtral" else None
    mlp = 3 * hidden * inter * (experts or 1) + (hidden * experts if experts else 0)
    # gemma2 adds pre/post feed-forward norms; qwen3 normalises q and k per head.
    norms = (4 if model_type == "gemma2" else 2) * hidden + (2 * head_dim if model_type == "qwen3" else 0)
    embed = vocab * hidden
    tied = cfg.get("tie_word_embeddings", model_type in {"gemma", "gemma2"}) is True
    params = embed + layers * (attn + mlp + norms) + hidden + (0 if tied else embed)
    largest = max(embed, hidden * inter, hidden * heads * head_dim)
    return params, layers, hidden, heads, kv_heads, head_dim, vocab, largest


def _opt(cfg: Mapping[str, Any]) -> _Counted | None:
    hidden = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    ffn = _int(cfg, "ffn_dim")
    vocab = _int(cfg, "vocab_size")
    positions = _int(cfg, "max_position_embeddings")
    if None in (hidden, layers, heads, ffn, vocab, positions):
        return None
    assert hidden and layers and heads and ffn and vocab and positions
    proj = _int(cfg, "word_embed_proj_dim") or hidden
    embed = vocab * proj + (positions + 2) * hidden  # OPT's learned positions are offset by 2
    projections = 2 * proj * hidden if proj != hidden else 0
    layer = 4 * (hidden * hidden + hidden) + (hidden * ffn + ffn) + (ffn * hidden + hidden) + 4 * hidden
    final_norm = 2 * hidden if cfg.get("do_layer_norm_before", True) is not False else 0
    params = embed + projections + layers * layer + final_norm  # lm_head is tied to the embedding
    largest = max(vocab * proj, hidden * ffn, (positions + 2) * hidden, proj * hidden)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest


def _gpt2(cfg: Mapping[str, Any]) -> _Counted | None:
    hidden = _int(cfg, "n_embd", "hidden_size")
    layers = _int(cfg, "n_layer", "num_hidden_layers")
    heads = _int(cfg, "n_head", "num_attention_heads")
    vocab = _int(cfg, "vocab_size")
    positions = _int(cfg, "n_positions", "max_position_embeddings")
    if None in (hidden, layers, heads, vocab, positions):
        return None
    assert hidden and layers and heads and vocab and positions
    inner = _int(cfg, "n_inner") or 4 * hidden
    layer = (
        2 * hidden
        + (hidden * 3 * hidden + 3 * hidden)
        + (hidden * hidden + hidden)
        + 2 * hidden
        + (hidden * inner + inner)
        + (inner * hidden + hidden)
    )
    params = vocab * hidden + positions * hidden + layers * layer + 2 * hidden  # tied lm_head
    largest = max(vocab * hidden, 3 * hidden * hidden, hidden * inner, positions * hidden)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest


def _gpt_neox(cfg: Mapping[str, Any]) -> _Counted | None:
    hidden = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    inter = _int(cfg, "intermediate_size")
    vocab = _int(cfg, "vocab_size")
    if None in (hidden, layers, heads, inter, vocab):
        return None
    assert hidden and layers and heads and inter and vocab
    layer = (
        4 * hidden  # two layer norms
        + (hidden * 3 * hidden + 3 * hidden)
        + (hidden * hidden + hidden)
        + (hidden * inter + inter)
        + (inter * hidden + hidden)
    )
    tied = cfg.get("tie_word_embeddings", False) is True
    params = vocab * hidden + layers * layer + 2 * hidden + (0 if tied else vocab * hidden)
    largest = max(vocab * hidden, 3 * hidden * hidden, hidden * inter)
    return params, layers, hidden, heads, heads, hidden // heads, vocab, largest


# ------------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------------


def hbm_per_core(target: str, options: Mapping[str, Any] | None = None) -> int | None:
    """HBM per NeuronCore for a target (reference/neuron-apis.md §1.10); None for cpu."""
    from neuronc.backends.base import HBM_BYTES_PER_CORE

    value = HBM_BYTES_PER_CORE.get(target)
    if value is not None and target == "trn2" and int((options or {}).get("logical_nc_config", 2)) == 1:
        return value // 2  # LNC=1: one physical core, half of a logical LNC=2 core
    return value


def _label(spec: BuildSpec) -> str:
    base = spec.name or spec.model.id
    return f"{base} [build {spec.build_index}]" if spec.matrix_values else base


def host_ram_bytes() -> int | None:
    """This machine's physical memory (for warnings only)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(
    spec: BuildSpec,
    model_config: Mapping[str, Any] | None,
    *,
    jobs: int | None = None,
    graphs: int | None = None,
    host_ram: int | None = None,
) -> Estimate:
    """Estimate device and host memory for one build (``model_config`` None → unknown).

    Args:
        spec: the build.
        model_config: the model's config.json as a dict, or None when it is not available locally.
        jobs: graphs compiled in parallel (default 1; the compile host's cores in practice).
        graphs: how many graphs the build compiles (default: the backend's plan).
        host_ram: physical memory to warn against (default: none; ``host_ram_bytes()`` for this host).
    """
    if graphs is None:
        graphs = _graph_count(spec)
    jobs = max(1, jobs or 1)
    est = Estimate(
        label=_label(spec),
        target=spec.target,
        tp_degree=spec.tp_degree,
        batch_size=spec.batch_size,
        max_length=spec.sequence.max_length,
        dtype=spec.dtype,
        hbm_per_core_bytes=hbm_per_core(spec.target, spec.options),
        compile_jobs=min(jobs, max(graphs, 1)),
        graphs=graphs,
    )
    if model_config is None:
        est.unknown_reason = "the model's config.json is not available locally (no network is used)"
        return est
    dims, why = model_dims(model_config)
    if dims is None:
        est.unknown_reason = why
        return est
    est.model = dims
    tp = spec.tp_degree
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    est.weights_bytes = dims.params * dtype_bytes
    est.weights_per_core_bytes = math.ceil(est.weights_bytes / tp)
    if spec.model.task == "text-generation":
        per_head = spec.batch_size * spec.sequence.max_length * dims.layers * dims.head_dim * 2 * dtype_bytes
        est.kv_cache_bytes = per_head * dims.kv_heads
        # Heads shard across ranks; with fewer KV heads than ranks each rank holds a replica of one.
        est.kv_heads_per_core = math.ceil(dims.kv_heads / tp)
        est.kv_cache_per_core_bytes = per_head * est.kv_heads_per_core
    else:
        est.kv_cache_bytes = est.kv_cache_per_core_bytes = 0
        est.kv_heads_per_core = 0
    est.device_per_core_bytes = est.weights_per_core_bytes + est.kv_cache_per_core_bytes
    if spec.weights == "presharded":
        largest = dims.largest_tensor_params
        est.host_split_bytes = (
            SPLIT_BASE_BYTES + largest * dims.source_dtype_bytes + math.ceil(largest * dtype_bytes / tp)
        )
    else:
        est.host_split_bytes = 0
    model = _COMPILE_MODELS.get(spec.backend)
    if model is not None:
        per_graph = model.per_graph_bytes + (2 * est.weights_bytes if model.weights_per_graph else 0)
        est.host_compile_per_graph_bytes = per_graph
        est.host_compile_bytes = (
            model.base_bytes + int(model.weights_factor * est.weights_bytes) + per_graph * est.compile_jobs
        )
    _warn(est, host_ram)
    return est


def _graph_count(spec: BuildSpec) -> int:
    from neuronc.backends import get_backend

    try:
        return len(get_backend(spec.backend).plan(spec).graphs)
    except Exception:  # a plugin's plan failing is reported by validate/compile, not here
        return len(spec.sequence.context_buckets) + len(spec.sequence.token_buckets)


def _warn(est: Estimate, host_ram: int | None) -> None:
    fraction = est.hbm_fraction
    if fraction is not None and HBM_WARN_FRACTION < fraction <= 1:
        est.warnings.append(
            f"{est.label}: uses {fraction:.0%} of HBM per core before activations and runtime scratch; it may not load"
        )
    if host_ram:
        for what, value in (("split", est.host_split_bytes), ("compile", est.host_compile_bytes)):
            if value and value > host_ram:
                est.warnings.append(
                    f"{est.label}: {what} needs about {gib(value)} of host RAM; this host has {gib(host_ram)}"
                )


def load_model_config(spec: BuildSpec) -> dict[str, Any] | None:
    """The model's config.json from a local directory or the local Hugging Face cache (no network)."""
    from pathlib import Path

    from neuronc.model.files import find_model_config

    base_dir = Path(spec.profile_path).parent if spec.profile_path else None
    return find_model_config(spec.model.id, spec.model.revision, base_dir)


def smallest_fitting_tp(spec: BuildSpec, model_config: Mapping[str, Any]) -> int | None:
    """The smallest tensor-parallel degree the backend supports on the target at which the build fits."""
    from neuronc.backends import get_backend

    try:
        degrees: Sequence[int] = sorted(get_backend(spec.backend).supported_tp_degrees(spec.target, spec.options) or ())
    except Exception:
        return None
    for tp in degrees:
        if tp <= spec.tp_degree:
            continue
        trial = estimate(spec.model_copy(update={"tp_degree": tp}), model_config, graphs=0)
        if trial.fits:
            return tp
    return None


def preflight(
    spec: BuildSpec,
    model_config: Mapping[str, Any] | None,
    *,
    jobs: int | None = None,
    host_ram: int | None = None,
) -> Estimate:
    """Estimate a build and raise PreflightError (exit 2) if it cannot fit the target's memory per core.

    An unknown estimate (no config.json locally, or an unsupported family) passes: only a build
    known not to fit is refused.
    """
    est = estimate(spec, model_config, jobs=jobs, host_ram=host_ram)
    if est.fits is False:
        assert model_config is not None
        assert est.device_per_core_bytes is not None and est.hbm_per_core_bytes is not None
        assert est.model is not None
        msg = (
            f"{est.label}: does not fit {spec.target}: needs {gib(est.device_per_core_bytes)} per NeuronCore, "
            f"{spec.target} has {gib(est.hbm_per_core_bytes)}"
        )
        details = [
            f"weights: {est.model.params:,} parameters × {DTYPE_BYTES[spec.dtype]} bytes "
            f"({spec.dtype}) = {gib(est.weights_bytes)}; / tp {spec.tp_degree} = {gib(est.weights_per_core_bytes)}",
            f"KV cache: {gib(est.kv_cache_per_core_bytes)} per core (batch {spec.batch_size} × max_length "
            f"{spec.sequence.max_length} × {est._kv_shape()})",
        ]
        better = smallest_fitting_tp(spec, model_config)
        hint = "lower batch_size or sequence.max_length"
        if better is not None:
            hint = f"raise tp_degree to {better} (the smallest supported degree that fits), or {hint}"
        raise PreflightError(msg, details=details, hint=hint)
    return est


def profile_paths(arguments: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Expand arguments into profile files: a directory stands for its *.yaml and *.yml files (sorted)."""
    from pathlib import Path

    from neuronc.errors import InvalidInputError

    paths: list[str] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            if not found:
                msg = f"{argument}: directory has no *.yaml profiles"
                raise InvalidInputError(msg)
            paths.extend(str(p) for p in found)
        else:
            paths.append(str(argument))
    return list(dict.fromkeys(paths))


# ------------------------------------------------------------------------------------------------
# The plan report: store, Hugging Face Neuron cache and pre-flight for every build and graph
# ------------------------------------------------------------------------------------------------

STORE_HIT = "hit"
STORE_MISS = "miss"
STORE_OTHER_TOOLCHAIN = "other-toolchain"
UNKNOWN = "unknown"


@dataclass
class BuildPlan:
    """What `neuronc plan` says about one build."""

    spec: BuildSpec
    config_hash: str
    toolchain_key: str
    toolchain_label: str
    toolchain_missing: list[str]
    store: dict[str, Any]
    hf_cache: dict[str, Any]
    estimate: Estimate
    graphs: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return self.estimate.label

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "profile": spec.profile_path,
            "build": spec.build_index,
            "name": spec.name,
            "matrix": dict(spec.matrix_values),
            "model": spec.model.id,
            "backend": spec.backend,
            "target": spec.target,
            "tp_degree": spec.tp_degree,
            "batch_size": spec.batch_size,
            "key": self.config_hash[:12],
            "config_hash": self.config_hash,
            "toolchain_key": self.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "toolchain_missing": list(self.toolchain_missing),
            "store": dict(self.store),
            "hf_cache": dict(self.hf_cache),
            "preflight": self.estimate.to_json(),
            "graphs": list(self.graphs),
        }


def plan_builds(
    specs: Sequence[BuildSpec],
    *,
    store: Any = None,
    snapshot: str | os.PathLike[str] | None = None,
    online: bool = False,
    jobs: int | None = None,
    host_ram: int | None = None,
) -> list[BuildPlan]:
    """Describe each build: store status, HF Neuron cache status, and the pre-flight estimate.

    ``store`` is anything ``neuronc.remote_store.open_store`` accepts (None: the default store).
    The HF Neuron cache is consulted from ``snapshot`` (a local copy of the cache repo) or, with
    ``online``, the Hub; without either, or when the lookup cannot be made, its status is "unknown".
    Nothing here raises for a build that does not fit: see ``Estimate.fits``.
    """
    from neuronc.backends import get_backend
    from neuronc.keys import config_key, toolchain_key, toolchain_label
    from neuronc.remote_store import open_store, probe

    resolved = open_store(store)
    hf_statuses = hf_cache_statuses(specs, snapshot=snapshot, online=online)
    plans: list[BuildPlan] = []
    for index, spec in enumerate(specs):
        backend = get_backend(spec.backend)
        availability = backend.availability()
        versions = dict(availability.versions or backend.toolchain_versions())
        missing = sorted(name for name, version in versions.items() if version is None)
        config = config_key(spec)
        tool_key = toolchain_key(versions)
        store_status = probe(resolved, config.hash, tool_key)
        if not availability.available:
            store_status["note"] = (
                f"the {spec.backend} toolchain is not installed here ({availability.reason}); "
                "a hit is judged for the versions installed here, the compile runner's may differ"
            )
        hf = hf_statuses[index]
        plan = get_backend(spec.backend).plan(spec)
        est = estimate(spec, load_model_config(spec), jobs=jobs, graphs=len(plan.graphs), host_ram=host_ram)
        graphs = [
            {
                **graph.to_json(),
                "store": store_status["status"],
                "hf_cache": hf["status"],
                "host_compile_bytes": est.host_compile_per_graph_bytes,
            }
            for graph in plan.graphs
        ]
        plans.append(
            BuildPlan(
                spec=spec,
                config_hash=config.hash,
                toolchain_key=tool_key,
                toolchain_label=toolchain_label(spec.backend, versions),
                toolchain_missing=missing,
                store=store_status,
                hf_cache=hf,
                estimate=est,
                graphs=graphs,
            )
        )
    return plans


def hf_cache_statuses(
    specs: Sequence[BuildSpec], *, snapshot: str | os.PathLike[str] | None = None, online: bool = False
) -> list[dict[str, Any]]:
    """Whether the Hugging Face Neuron cache has each build: hit | miss | n/a | unknown (never raises).

    One registry load for all builds, through ``neuronc.hubcache.lookup_builds`` with a snapshot
    (``--snapshot DIR``) or the Hub (``--online``). A snapshot that cannot be read or an
    unreachable Hub gives "unknown" with the reason: the cache is advisory.
    """
    if snapshot is None and not online:
        return [{"status": UNKNOWN, "source": None, "detail": "not checked (pass --snapshot DIR or --online)"}] * len(
            specs
        )
    source_name = str(snapshot) if snapshot is not None else "hub"
    try:
        from neuronc.hubcache import HubSource, SnapshotSource, lookup_builds

        source: Any = SnapshotSource(snapshot) if snapshot is not None else HubSource.from_environment()
        results, _ = lookup_builds(list(specs), source)
    except Exception as exc:  # the cache is advisory: an unreachable Hub or a bad snapshot is "unknown"
        text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        first = str(text).splitlines()[0]
        return [{"status": UNKNOWN, "source": source_name, "detail": f"lookup failed: {first}"}] * len(specs)
    statuses = []
    for result in results:
        status = {"hit": STORE_HIT, "miss": STORE_MISS, "not-applicable": "n/a"}.get(result.status, UNKNOWN)
        statuses.append(
            {
                "status": status,
                "source": source_name,
                "detail": {"hits": len(result.hits), "nearest": len(result.nearest), "notes": list(result.notes)},
            }
        )
    return statuses


def hf_cache_status(
    spec: BuildSpec, *, snapshot: str | os.PathLike[str] | None = None, online: bool = False
) -> dict[str, Any]:
    """``hf_cache_statuses`` for one build."""
    return hf_cache_statuses([spec], snapshot=snapshot, online=online)[0]


# ------------------------------------------------------------------------------------------------
# The CI matrix
# ------------------------------------------------------------------------------------------------

# GitHub Actions refuses a job matrix of more than 256 combinations.
GITHUB_MATRIX_LIMIT = 256


def matrix_entries(specs: Sequence[BuildSpec]) -> list[dict[str, Any]]:
    """One entry per bundle, ready for a CI job matrix: profile, build index, key, expected runner.

    ``key`` is the config hash prefix ``neuronc compile --only`` takes; ``runner`` is the smallest
    instance of the target's family with tp NeuronCores and the estimated host RAM for compile
    (``cpu`` for the CPU target).
    """
    from neuronc.instances import choose_runner
    from neuronc.keys import config_key

    entries = []
    for spec in specs:
        config = config_key(spec)
        est = estimate(spec, load_model_config(spec))
        host = max(est.host_compile_bytes or 0, est.host_split_bytes or 0) or None
        entries.append(
            {
                "profile": spec.profile_path,
                "build": spec.build_index,
                "key": config.hash[:12],
                "config_hash": config.hash,
                "name": spec.name or spec.model.id,
                "model": spec.model.id,
                "backend": spec.backend,
                "target": spec.target,
                "tp_degree": spec.tp_degree,
                "batch_size": spec.batch_size,
                "runner": choose_runner(spec.target, spec.tp_degree, host_bytes=host, options=spec.options),
                "preflight": est.status,
                "graphs": est.graphs,
            }
        )
    return entries


__all__ = [
    "FAMILIES",
    "GIB",
    "GITHUB_MATRIX_LIMIT",
    "BuildPlan",
    "Estimate",
    "ModelDims",
    "estimate",
    "gib",
    "hbm_per_core",
    "hf_cache_status",
    "hf_cache_statuses",
    "host_ram_bytes",
    "load_model_config",
    "matrix_entries",
    "model_dims",
    "plan_builds",
    "preflight",
    "profile_paths",
    "smallest_fitting_tp",
]
