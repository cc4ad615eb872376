"""What makes two builds the same: canonical JSON, the config hash, the toolchain key.

The config hash covers exactly the inputs that change the compiled output (model identity, task,
backend, target, tp, batch, dtype, buckets, weights mode, backend options, effective compiler flags
including ``NEURON_CC_FLAGS``). Names, descriptions, file paths, output directories and job counts
are not hashed. The toolchain key covers the versions a compiled artifact is tied to.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

HASHED_FIELDS = (
    "model.identity",
    "model.task",
    "backend",
    "target",
    "tp_degree",
    "batch_size",
    "dtype",
    "sequence.max_length",
    "sequence.max_context_length",
    "sequence.context_buckets",
    "sequence.token_buckets",
    "weights",
    "options",
    "compiler_flags",
)


def canonical_json(data: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 as is: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def effective_compiler_flags(spec: BuildSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """The compiler flags that reach the compiler, as the backend applies them (cache-location flags aside).

    The profile's ``compiler.flags`` count where the backend passes them on; ``NEURON_CC_FLAGS``
    from the environment counts where the backend's compiler reads it. A flag nothing applies is
    not hashed (it would make two identical builds look different).
    """
    from neuronc.backends import get_backend
    from neuronc.backends.base import applied_compiler_flags

    mode = get_backend(spec.backend).compiler_flags_mode
    return applied_compiler_flags(mode, spec.compiler_flags, os.environ if environ is None else environ)


def model_identity(spec: BuildSpec, *, model_dir: Path | None, resolved_revision: str | None) -> dict[str, Any]:
    """Hub id + revision, or for a local directory a fingerprint of config.json and checkpoint headers."""
    if model_dir is not None:
        return {"local_fingerprint": local_checkpoint_fingerprint(model_dir)}
    return {"hub_id": spec.model.id, "revision": resolved_revision or spec.model.revision}


def local_checkpoint_fingerprint(directory: Path) -> str:
    """SHA-256 over config.json and, per weight file, its name, size and (for safetensors) header.

    Reading only headers keeps this instant on multi-GB checkpoints; tensor values are recorded
    separately, per file, in the manifest's weights source.
    """
    digest = hashlib.sha256()
    config = directory / "config.json"
    if config.is_file():
        digest.update(b"config.json\0" + config.read_bytes() + b"\0")
    weight_files = sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and (p.suffix in {".safetensors", ".bin"} or p.name.endswith(".index.json"))
    )
    for path in weight_files:
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        if path.suffix == ".safetensors":
            digest.update(_safetensors_header(path))
        elif path.name.endswith(".index.json"):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _safetensors_header(path: Path) -> bytes:
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            return b""
        (length,) = struct.unpack("<Q", prefix)
        if length > 100 * 1024 * 1024:
            return b""
        return f.read(length)


@dataclass(frozen=True)
class ConfigKey:
    """The config hash and the inputs it was computed from."""

    hash: str
    inputs: dict[str, Any]
    fields: tuple[str, ...] = HASHED_FIELDS

    @property
    def short(self) -> str:
        return self.hash[:12]


def hashed_inputs(
    spec: BuildSpec, identity: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    seq = spec.sequence
    return {
        "model.identity": dict(identity),
        "model.task": spec.model.task,
        "backend": spec.backend,
        "target": spec.target,
        "tp_degree": spec.tp_degree,
        "batch_size": spec.batch_size,
        "dtype": spec.dtype,
        "sequence.max_length": seq.max_length,
        "sequence.max_context_length": seq.max_context_length,
        "sequence.context_buckets": list(seq.context_buckets),
        "sequence.token_buckets": list(seq.token_buckets),
        "weights": spec.weights,
        "options": spec.options,
        "compiler_flags": effective_compiler_flags(spec, environ),
    }


def config_key(
    spec: BuildSpec,
    *,
    resolved_revision: str | None = None,
    model_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConfigKey:
    """Compute a build's config hash (full 64 hex digits) and keep the hashed inputs.

    ``model_dir`` is the model's local directory when the pipeline has resolved it; otherwise it is
    looked up from the profile (relative to the profile's directory, then the working directory).
    """
    if model_dir is None:
        model_dir = spec_model_dir(spec)
    identity = model_identity(spec, model_dir=model_dir, resolved_revision=resolved_revision)
    inputs = hashed_inputs(spec, identity, environ)
    return ConfigKey(hash=sha256_text(canonical_json(inputs)), inputs=inputs)


def spec_model_dir(spec: BuildSpec) -> Path | None:
    """The build's model as a local directory, if it is one (relative paths start at the profile)."""
    from neuronc.model.files import local_model_dir

    base_dir = Path(spec.profile_path).parent if spec.profile_path else None
    return local_model_dir(spec.model.id, base_dir)


def toolchain_key(versions: Mapping[str, str | None]) -> str:
    """SHA-256 of the toolchain versions a compiled artifact is tied to."""
    return sha256_text(canonical_json(dict(versions)))


def toolchain_label(backend: str, versions: Mapping[str, str | None]) -> str:
    """A short, human-readable name for a toolchain (store directory names); not an identity.

    ``<backend>-<main package><version>-<toolchain key[:8]>``; the main package is the one the
    backend names (``toolchain_package``). Lookups match on the key suffix only, so the readable
    part may differ between hosts without the backend installed.
    """
    from neuronc.backends import get_backend, is_registered

    main = get_backend(backend).toolchain_package if is_registered(backend) else None
    version = versions.get(main) if main else None
    label = f"{backend}-{main}{version}" if version and main else backend
    safe = "".join(c if c.isalnum() or c in ".-_" else "_" for c in label)
    return f"{safe}-{toolchain_key(versions)[:8]}"


def diff_inputs(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Which hashed fields differ between two input sets, in HASHED_FIELDS order."""
    names = list(dict.fromkeys([*HASHED_FIELDS, *a, *b]))
    return [
        {"field": name, "a": a.get(name), "b": b.get(name)}
        for name in names
        if canonical_json(a.get(name)) != canonical_json(b.get(name))
    ]
