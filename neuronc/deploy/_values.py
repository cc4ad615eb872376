"""The serving values every emitter uses, read from a bundle's manifest (and nothing else)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.bundle import Manifest
from neuronc.errors import InvalidInputError

STACKS = ("vllm", "tgi", "torchserve", "sagemaker")
# Which backends' artifacts each stack can load as they are (reference/neuron-apis.md §5).
COMPATIBLE: dict[str, frozenset[str]] = {
    # vLLM's NxDI loader reuses NEURON_COMPILED_ARTIFACTS; optimum-neuron's vLLM plugin loads an export directory.
    "vllm": frozenset({"nxdi", "optimum-neuron"}),
    # TGI's neuron backend serves an optimum-neuron export (neuron_config.json) as it is.
    "tgi": frozenset({"optimum-neuron"}),
    # pytorch/serve's inf2 handlers drive transformers-neuronx.
    "torchserve": frozenset({"transformers-neuronx"}),
    # The Hugging Face TGI Neuron container on SageMaker (HF_MODEL_ID, MAX_BATCH_SIZE).
    "sagemaker": frozenset({"optimum-neuron"}),
}
_STACK_HINT = {
    "nxdi": "vllm",
    "optimum-neuron": "tgi, sagemaker or vllm",
    "transformers-neuronx": "torchserve",
}


@dataclass(frozen=True)
class ServingValues:
    """Shapes and names a serving stack needs, all from the manifest's normalised profile."""

    bundle: str  # the bundle's path as the serving host sees it
    model_id: str
    revision: str | None
    backend: str
    target: str
    tp_degree: int
    batch_size: int
    amp: str
    dtype: str
    max_length: int
    max_context_length: int
    context_buckets: tuple[int, ...]
    token_buckets: tuple[int, ...]
    compiler_flags: tuple[str, ...]
    config_hash: str
    toolchain: dict[str, str | None]
    options: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    model_type: str | None = None

    @property
    def key(self) -> str:
        return self.config_hash[:12]

    @property
    def name(self) -> str:
        """A service/model name: model name + key, lower case, [a-z0-9-] only."""
        base = self.model_id.rstrip("/").split("/")[-1].lower()
        safe = "".join(c if c.isalnum() else "-" for c in base).strip("-")[:40] or "model"
        return f"{safe}-{self.key}"


def _get(profile: dict[str, Any], *keys: str) -> Any:
    node: Any = profile
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            msg = f"manifest profile has no {'.'.join(keys)}"
            raise InvalidInputError(msg, hint="this bundle was not written by a neuronc that records its profile")
        node = node[key]
    return node


def serving_values(manifest: Manifest, bundle_dir: Path, bundle_path: str | None = None) -> ServingValues:
    """Read every serving value from the manifest (model_type from the bundle's model/config.json, if listed)."""
    profile = manifest.profile
    amp = str(_get(profile, "amp"))
    flags = manifest.hashed_inputs.get("compiler_flags")
    model_type = None
    if manifest.file("model/config.json") is not None:
        try:
            config = json.loads((bundle_dir / "model" / "config.json").read_text(encoding="utf-8"))
            model_type = config.get("model_type") if isinstance(config, dict) else None
        except (OSError, ValueError):
            model_type = None
    return ServingValues(
        bundle=bundle_path or str(bundle_dir.absolute()),
        model_id=str(_get(profile, "model", "id")),
        revision=profile.get("model", {}).get("revision"),
        backend=manifest.backend,
        target=manifest.target,
        tp_degree=int(_get(profile, "tp_degree")),
        batch_size=int(_get(profile, "batch_size")),
        amp=amp,
        dtype={"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}.get(amp, amp),
        max_length=int(_get(profile, "sequence", "max_length")),
        max_context_length=int(_get(profile, "sequence", "max_context_length")),
        context_buckets=tuple(int(b) for b in _get(profile, "sequence", "context_buckets")),
        token_buckets=tuple(int(b) for b in _get(profile, "sequence", "token_buckets")),
        compiler_flags=tuple(
            str(f) for f in (flags if isinstance(flags, list) else profile.get("compiler_flags") or ())
        ),
        config_hash=manifest.config_hash,
        toolchain=dict(manifest.toolchain),
        options=dict(profile.get("options") or {}),
        extra=dict(manifest.extra),
        model_type=model_type if isinstance(model_type, str) else None,
    )


def check_compatible(stack: str, backend: str) -> None:
    """Raise InvalidInputError (exit 2) when a stack cannot load this backend's artifacts."""
    if backend in COMPATIBLE[stack]:
        return
    suggestion = _STACK_HINT.get(backend)
    hint = f"a {backend} bundle deploys with --for {suggestion}" if suggestion else None
    loads = ", ".join(sorted(COMPATIBLE[stack]))
    msg = f"--for {stack} cannot serve a bundle built with {backend} (it loads bundles built with {loads})"
    raise InvalidInputError(msg, hint=hint)
