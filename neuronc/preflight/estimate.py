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
* **Host RAM for compile** is a rough, backend-dependent model (each backend's ``host_ram``): a fixed
  base plus a multiple of the weights held while tracing, plus a per-graph amount for each graph
  compiled in parallel. Host RAM is reported and warned about, never an error: the planning host is
  rarely the compile host.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

from neuronc.errors import PreflightError
from neuronc.fsutil import format_bytes
from neuronc.hardware import hbm_per_core
from neuronc.preflight.params import DTYPE_BYTES, ModelDims, model_dims

if TYPE_CHECKING:
    from neuronc.backends.base import Backend
    from neuronc.spec import BuildSpec

GIB = 1024**3
MIB = 1024**2
SPLIT_BASE_BYTES = 300 * MIB
# Above this share of HBM per core, activations and runtime scratch may not fit: warn.
HBM_WARN_FRACTION = 0.9


class Fit(StrEnum):
    """Whether a build's device memory per core fits the target's HBM (``Estimate.status``)."""

    FITS = "fits"
    DOES_NOT_FIT = "does-not-fit"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "n/a"  # no device memory to check: CPU


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
    def status(self) -> Fit:
        """Whether the device memory per core fits (``Fit``)."""
        if self.hbm_per_core_bytes is None and self.target == "cpu":
            return Fit.NOT_APPLICABLE
        fits = self.fits
        if fits is None:
            return Fit.UNKNOWN
        return Fit.FITS if fits else Fit.DOES_NOT_FIT

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
            "status": str(self.status),
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
    """Bytes as GiB with one decimal ("?" when unknown): memory estimates compare in one unit."""
    return format_bytes(value, unit="GiB")


# ------------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------------


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
    backend: Backend,
    graphs: int,
    jobs: int | None = None,
    host_ram: int | None = None,
) -> Estimate:
    """Estimate device and host memory for one build (``model_config`` None → unknown).

    Args:
        spec: the build.
        model_config: the model's config.json as a dict, or None when it is not available locally.
        backend: the build's backend (its host-RAM model).
        graphs: how many graphs the build compiles (its plan's).
        jobs: graphs compiled in parallel (default 1; the compile host's cores in practice).
        host_ram: physical memory to warn against (default: none; ``host_ram_bytes()`` for this host).
    """
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
    model = backend.toolchain.host_ram
    if model is not None:
        per_graph = model.per_graph_bytes + (2 * est.weights_bytes if model.weights_per_graph else 0)
        est.host_compile_per_graph_bytes = per_graph
        est.host_compile_bytes = (
            model.base_bytes + int(model.weights_factor * est.weights_bytes) + per_graph * est.compile_jobs
        )
    _warn(est, host_ram)
    return est


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


def smallest_fitting_tp(spec: BuildSpec, model_config: Mapping[str, Any], backend: Backend) -> int | None:
    """The smallest tensor-parallel degree above the build's that the backend supports on the target
    and at which the build fits (None when none does)."""
    degrees: Sequence[int] = sorted(backend.rules.supported_tp_degrees(spec.target, spec.options) or ())
    for tp in degrees:
        if tp <= spec.tp_degree:
            continue
        trial = estimate(spec.model_copy(update={"tp_degree": tp}), model_config, backend=backend, graphs=0)
        if trial.fits:
            return tp
    return None


class EstimateOptions(TypedDict):
    """``estimate``'s keyword arguments, which ``preflight`` passes on (mypy checks the two agree)."""

    backend: Backend
    graphs: int
    jobs: NotRequired[int | None]
    host_ram: NotRequired[int | None]


def preflight(spec: BuildSpec, model_config: Mapping[str, Any] | None, **options: Unpack[EstimateOptions]) -> Estimate:
    """``estimate`` the build, and raise PreflightError (exit 2) if it cannot fit the target's memory per core.

    An unknown estimate (no config.json locally, or an unsupported family) passes: only a build
    known not to fit is refused.
    """
    est = estimate(spec, model_config, **options)
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
        better = smallest_fitting_tp(spec, model_config, options["backend"])
        hint = "lower batch_size or sequence.max_length"
        if better is not None:
            hint = f"raise tp_degree to {better} (the smallest supported degree that fits), or {hint}"
        raise PreflightError(msg, details=details, hint=hint)
    return est
