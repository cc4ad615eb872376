"""What makes two builds the same: canonical JSON, the config hash, the toolchain key.

The config hash covers exactly the inputs that change the compiled output (model identity, task,
backend, target, tp, batch, dtype, buckets, weights mode, backend options, effective compiler flags
including ``NEURON_CC_FLAGS``, and the environment variables the backend's compile reads that shape
its output, ``Backend.keyed_environment``): everything recorded because it shapes the output is
hashed. Names, descriptions, file paths, output directories and job counts are not hashed. The
toolchain key covers the versions a compiled artifact is tied to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
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
    "environment",
)


def canonical_json(data: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 as is: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CompilerFlagsMode(StrEnum):
    """How a backend applies compiler flags (what the config hash may count as applied)."""

    # Nothing reads compiler flags: ``compiler.flags`` in a profile is refused at validate time.
    NONE = "none"
    # The profile's ``compiler.flags`` reach the compiler; NEURON_CC_FLAGS is not read.
    PROFILE = "profile"
    # The profile's flags and NEURON_CC_FLAGS from the environment both reach the compiler.
    PROFILE_AND_ENV = "profile+env"


# Flags that choose where libneuronxla's persistent cache lives; libneuronxla consumes them and
# neuronx-cc never sees them (aws-neuron/aws-neuron-sdk
# about-neuron/arch/neuron-features/neuron-caching.rst). They never change what is compiled.
CACHE_LOCATION_FLAGS = ("--cache_dir", "--no_cache", "--no-cache", "--retry_failed_compilation")


def applied_compiler_flags(
    mode: CompilerFlagsMode, profile_flags: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """The compiler flags a compile applies, as the backend's ``compiler_flags_mode`` says.

    What the config hash should cover: profile flags where they reach the compiler, NEURON_CC_FLAGS
    where the backend reads it, never the cache-location flags.
    """
    if mode is CompilerFlagsMode.NONE:
        flags: list[str] = []
    elif mode is CompilerFlagsMode.PROFILE:
        flags = list(profile_flags)
    else:
        flags = [*profile_flags, *shlex.split(environ.get("NEURON_CC_FLAGS", ""))]
    return [f for f in flags if not f.startswith(CACHE_LOCATION_FLAGS)]


def effective_compiler_flags(
    spec: BuildSpec, mode: CompilerFlagsMode, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The compiler flags that reach the compiler, as the build's backend applies them (``mode``).

    The profile's ``compiler.flags`` count where the backend passes them on; ``NEURON_CC_FLAGS``
    from the environment counts where the backend's compiler reads it. A flag nothing applies is
    not hashed (it would make two identical builds look different).
    """
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
    spec: BuildSpec,
    identity: Mapping[str, Any],
    flags_mode: CompilerFlagsMode,
    environ: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The hashed inputs; ``environment``: the backend's ``keyed_environment`` (variables that shape the
    output). It is an input only when not empty, so a build whose compile reads no such variable keeps
    the key it had before the field existed (the stored bundles stay hits)."""
    seq = spec.sequence
    inputs: dict[str, Any] = {
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
        "compiler_flags": effective_compiler_flags(spec, flags_mode, environ),
    }
    if environment:
        inputs["environment"] = dict(sorted(environment.items()))
    return inputs


def config_key(
    spec: BuildSpec,
    *,
    flags_mode: CompilerFlagsMode,
    model_dir: Path | None,
    revision: str | None,
    environ: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> ConfigKey:
    """A build's config hash (full 64 hex digits) and the hashed inputs.

    ``model_dir`` is the model's local directory (None: a hub model, identified by ``revision``,
    the commit its revision resolved to); ``flags_mode`` is how the build's backend applies
    compiler flags; ``environment`` the variables the backend's compile reads that shape its output
    (``Backend.keyed_environment``). ``neuronc.pipeline.resolve_build`` works them out, once per build.
    """
    identity = model_identity(spec, model_dir=model_dir, resolved_revision=revision)
    inputs = hashed_inputs(spec, identity, flags_mode, environ, environment)
    fields = tuple(name for name in HASHED_FIELDS if name in inputs)
    return ConfigKey(hash=sha256_text(canonical_json(inputs)), inputs=inputs, fields=fields)


def spec_model_dir(spec: BuildSpec) -> Path | None:
    """The build's model as a local directory, if it is one (relative paths start at the profile)."""
    from neuronc.model.files import local_model_dir

    base_dir = Path(spec.profile_path).parent if spec.profile_path else None
    return local_model_dir(spec.model.id, base_dir)


def toolchain_key(versions: Mapping[str, str | None]) -> str:
    """SHA-256 of the toolchain versions a compiled artifact is tied to."""
    return sha256_text(canonical_json(dict(versions)))


def toolchain_label(backend: str, main_package: str | None, versions: Mapping[str, str | None]) -> str:
    """A short, human-readable name for a toolchain (store directory names); not an identity.

    ``<backend>-<main package><version>-<toolchain key[:8]>``; the main package is the one the
    backend names (``toolchain_package``). Lookups match on the key suffix only, so the readable
    part may differ between hosts without the backend installed.
    """
    version = versions.get(main_package) if main_package else None
    label = f"{backend}-{main_package}{version}" if version and main_package else backend
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
