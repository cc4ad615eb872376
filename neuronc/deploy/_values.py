"""The serving values every emitter uses, read from a bundle's manifest (and nothing else)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.bundle import Manifest
from neuronc.errors import InvalidInputError

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class NxdiRecord:
    """What the nxdi backend recorded in ``manifest.extra["nxdi"]``: the NeuronConfig it compiled with."""

    neuron_config: Mapping[str, Any]

    @property
    def continuous_batching(self) -> bool:
        return bool(self.neuron_config.get("is_continuous_batching"))

    @property
    def ctx_batch_size(self) -> int | None:
        value = self.neuron_config.get("ctx_batch_size")
        return int(value) if isinstance(value, int) else None

    @property
    def block_kv_layout(self) -> bool:
        nc = self.neuron_config
        return any(bool(nc.get(k)) for k in ("is_block_kv_layout", "is_prefix_caching", "is_chunked_prefill"))


@dataclass(frozen=True)
class TnxRecord:
    """What the transformers-neuronx backend recorded: the class, the exact from_pretrained kwargs, the NEFFs."""

    model_class: str  # the class name exported at transformers_neuronx's top level, e.g. LlamaForSampling
    from_pretrained: Mapping[str, Any]  # batch_size, tp_degree, amp ('f32'/'f16'/'bf16'), n_positions, ...
    neuron_config: Mapping[str, Any] | None
    neffs: tuple[str, ...]


@dataclass(frozen=True)
class ServingValues:
    """Shapes, names and versions a serving stack needs, all from the manifest."""

    bundle: str  # the bundle's path as the serving host sees it
    model_id: str
    backend: str
    target: str
    tp_degree: int
    batch_size: int
    amp: str
    max_length: int
    max_context_length: int
    context_buckets: tuple[int, ...]
    config_hash: str
    weights: str
    toolchain: Mapping[str, str | None]
    bundle_bytes: int = 0  # every file the manifest lists
    options: Mapping[str, Any] = field(default_factory=dict)
    nxdi: NxdiRecord | None = None
    tnx: TnxRecord | None = None

    @property
    def dtype(self) -> str:
        return DTYPES.get(self.amp, self.amp)

    @property
    def key(self) -> str:
        return self.config_hash[:12]

    @property
    def name(self) -> str:
        """A service/model name: model name + key, lower case, [a-z0-9-] only."""
        base = self.model_id.rstrip("/").split("/")[-1].lower()
        safe = "".join(c if c.isalnum() else "-" for c in base).strip("-")[:40] or "model"
        return f"{safe}-{self.key}"

    @property
    def longest_prompt(self) -> int:
        """The longest prompt a context-encoding graph of this bundle takes (its largest context bucket)."""
        return max(self.context_buckets) if self.context_buckets else self.max_context_length

    @property
    def max_model_len(self) -> int:
        """The longest sequence vLLM may admit: the sequence length, or the largest context bucket when shorter.

        A prompt longer than the largest compiled context would fail inside the model; with
        ``--max-model-len`` at this value vLLM's API layer refuses it first (vllm-neuron and
        optimum-neuron's server both pass it on).
        """
        return min(self.max_length, self.longest_prompt)

    def version(self, package: str) -> str | None:
        value = self.toolchain.get(package)
        return value if isinstance(value, str) and value else None


def _get(profile: Mapping[str, Any], *keys: str) -> Any:
    node: Any = profile
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            msg = f"manifest profile has no {'.'.join(keys)}"
            raise InvalidInputError(msg, hint="this bundle was not written by a neuronc that records its profile")
        node = node[key]
    return node


def _nxdi(extra: Mapping[str, Any]) -> NxdiRecord | None:
    info = extra.get("nxdi")
    if not isinstance(info, Mapping):
        return None
    neuron_config = info.get("neuron_config")
    return NxdiRecord(neuron_config=dict(neuron_config) if isinstance(neuron_config, Mapping) else {})


def _tnx(extra: Mapping[str, Any]) -> TnxRecord | None:
    info = extra.get("transformers_neuronx")
    if not isinstance(info, Mapping):
        return None
    kwargs = info.get("from_pretrained")
    kwargs = dict(kwargs) if isinstance(kwargs, Mapping) else {}
    neuron_config = kwargs.pop("neuron_config", None)
    neffs = info.get("neffs")
    return TnxRecord(
        model_class=str(info.get("model_class", "")).rpartition(".")[2],
        from_pretrained=kwargs,
        neuron_config=dict(neuron_config) if isinstance(neuron_config, Mapping) else None,
        neffs=tuple(str(n) for n in neffs) if isinstance(neffs, list) else (),
    )


def serving_values(manifest: Manifest, bundle_dir: Path, bundle_path: str | None = None) -> ServingValues:
    """Read every serving value from the manifest."""
    profile = manifest.profile
    return ServingValues(
        bundle=(bundle_path or str(bundle_dir.absolute())).rstrip("/") or "/",
        model_id=str(_get(profile, "model", "id")),
        backend=manifest.backend,
        target=manifest.target,
        tp_degree=int(_get(profile, "tp_degree")),
        batch_size=int(_get(profile, "batch_size")),
        amp=str(_get(profile, "amp")),
        max_length=int(_get(profile, "sequence", "max_length")),
        max_context_length=int(_get(profile, "sequence", "max_context_length")),
        context_buckets=tuple(int(b) for b in _get(profile, "sequence", "context_buckets")),
        config_hash=manifest.config_hash,
        weights=str(profile.get("weights") or "presharded"),
        toolchain=dict(manifest.toolchain),
        bundle_bytes=sum(entry.size for entry in manifest.files),
        options=dict(profile.get("options") or {}),
        nxdi=_nxdi(manifest.extra),
        tnx=_tnx(manifest.extra),
    )


__all__ = ["DTYPES", "NxdiRecord", "ServingValues", "TnxRecord", "serving_values"]
