"""What makes two builds the same: canonical JSON, the graphs key, the weights key, the bundle key,
the toolchain key.

The *graphs key* covers everything that shapes the compiled graphs (the architecture part of
config.json, task, backend, target, tp, batch, dtype, buckets, backend options, effective compiler
flags including ``NEURON_CC_FLAGS``, the environment variables the backend's compile reads,
``Backend.toolchain.keyed_environment``). The *weights key* covers the weights mode and the weights' content
(SHA-256 of every weight file, or a hub model's commit). The *bundle key* (the config hash a store
is looked up by) is derived from both. Where a backend's compiled artifacts embed the weights, or no
source says they do not, the weights fields are part of its graphs key too. Names, descriptions,
file paths, output directories and job counts are not hashed. The toolchain key covers the versions
a compiled artifact is tied to; every lookup pairs a key with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# The scheme of the keys: 2 splits a bundle key into a graphs key and a weights key and covers the
# weights' content. A bundle keyed under scheme 1 (a local model by its files' names, sizes and
# headers) is never found under a scheme-2 key: the bundle key is a hash of another text.
KEY_SCHEME = 2

# Everything that shapes the compiled graphs.
GRAPHS_FIELDS = (
    "model.architecture",
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
    "options",
    "compiler_flags",
    "environment",
)
# The weights a bundle carries: how they are staged, and their content.
WEIGHTS_FIELDS = ("weights.mode", "weights")
HASHED_FIELDS = (*GRAPHS_FIELDS, *WEIGHTS_FIELDS)
# config.json fields that name or date a checkpoint and shape nothing compiled from it.
CONFIG_UNKEYED = frozenset({"_name_or_path", "transformers_version"})


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


def model_architecture(config: Mapping[str, Any] | None, *, hub_id: str, revision: str | None) -> dict[str, Any]:
    """The architecture part of config.json (every field but those that only name or date the checkpoint).

    A hub model whose config.json is not on this machine (and cannot be fetched) is keyed by its
    commit instead: correct (the commit fixes config.json), but it shares graphs with nothing.
    """
    if config is None:
        return {"hub_id": hub_id, "revision": revision}
    return {"config": {k: v for k, v in config.items() if k not in CONFIG_UNKEYED}}


def weights_identity(spec: BuildSpec, *, model_dir: Path | None, resolved_revision: str | None) -> dict[str, Any]:
    """The weights' content: for a local directory the SHA-256 of every weight file (kept by file
    identity, ``neuronc.model.digests``); for a hub model the commit, which fixes every file's LFS
    pointer and so its SHA-256 (nothing is downloaded to key it)."""
    if model_dir is not None:
        return {"local_files": local_weight_digests(model_dir)}
    return {"hub_id": spec.model.id, "revision": resolved_revision or spec.model.revision}


def weight_files(directory: Path) -> list[Path]:
    """A checkpoint directory's weight files (safetensors, PyTorch ``.bin``, their index), sorted."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and (p.suffix in {".safetensors", ".bin"} or p.name.endswith(".index.json"))
    )


def local_weight_digests(directory: Path, *, jobs: int | None = None) -> dict[str, str]:
    """File name to SHA-256 of every weight file in ``directory`` (hashed once per file version)."""
    from neuronc.model.digests import file_digests

    files = weight_files(directory)
    return dict(zip((p.name for p in files), file_digests(files, jobs=jobs), strict=True))


@dataclass(frozen=True)
class ConfigKey:
    """A build's keys and the inputs they were computed from.

    ``hash`` is the bundle key (the config hash stores and ``--only`` name), derived from the graphs
    key and the weights key. ``graphs_hash`` covers the fields that shape the compiled graphs, and
    the weights fields too where the backend's graphs embed the weights (``embeds_weights`` not
    False): such a build is never rebound.
    """

    hash: str
    inputs: dict[str, Any]
    fields: tuple[str, ...] = HASHED_FIELDS
    graphs_hash: str = ""
    weights_hash: str = ""
    embeds_weights: bool | None = None

    @property
    def short(self) -> str:
        return self.hash[:12]

    def keys_record(self) -> dict[str, Any]:
        """What a manifest records of the keys (``extra.keys``): how the bundle key was derived."""
        return {
            "scheme": KEY_SCHEME,
            "graphs": self.graphs_hash,
            "weights": self.weights_hash,
            "embeds_weights": self.embeds_weights,
        }


def hashed_inputs(
    spec: BuildSpec,
    architecture: Mapping[str, Any],
    weights: Mapping[str, Any],
    flags_mode: CompilerFlagsMode,
    environ: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The hashed inputs; ``environment``: the backend's ``keyed_environment`` (variables that shape the
    output). It is an input only when not empty."""
    seq = spec.sequence
    inputs: dict[str, Any] = {
        "model.architecture": dict(architecture),
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
        "options": spec.options,
        "compiler_flags": effective_compiler_flags(spec, flags_mode, environ),
        "weights.mode": spec.weights,
        "weights": dict(weights),
    }
    if environment:
        inputs["environment"] = dict(sorted(environment.items()))
    return inputs


def derive_keys(inputs: Mapping[str, Any], embeds_weights: bool | None) -> tuple[str, str, str]:
    """(bundle key, graphs key, weights key) of a set of hashed inputs.

    The graphs key covers the graphs fields, and the weights fields too unless the backend's
    compiled artifacts are known not to embed the weights (``embeds_weights is False``).
    """
    graph_names = GRAPHS_FIELDS if embeds_weights is False else HASHED_FIELDS
    graphs = sha256_text(canonical_json({n: inputs[n] for n in graph_names if n in inputs}))
    weights = sha256_text(canonical_json({n: inputs[n] for n in WEIGHTS_FIELDS if n in inputs}))
    bundle = sha256_text(canonical_json({"scheme": KEY_SCHEME, "graphs": graphs, "weights": weights}))
    return bundle, graphs, weights


def config_key(
    spec: BuildSpec,
    *,
    flags_mode: CompilerFlagsMode,
    model_dir: Path | None,
    revision: str | None,
    environ: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
    model_config: Mapping[str, Any] | None = None,
    embeds_weights: bool | None = None,
) -> ConfigKey:
    """A build's bundle key (full 64 hex digits), its graphs and weights keys, and the hashed inputs.

    ``model_dir`` is the model's local directory (None: a hub model, identified by ``revision``,
    the commit its revision resolved to, and ``model_config``, its config.json at that commit when
    this machine has it); ``flags_mode`` is how the build's backend applies compiler flags;
    ``environment`` the variables the backend's compile reads that shape its output
    (``Backend.toolchain.keyed_environment``); ``embeds_weights`` the backend's ``weights_binding.embeds``.
    ``neuronc.pipeline.resolve_build`` works them out, once per build.
    """
    if model_dir is not None:
        from neuronc.model.files import read_model_config

        model_config = read_model_config(model_dir, required=False)
    architecture = model_architecture(model_config, hub_id=spec.model.id, revision=revision or spec.model.revision)
    weights = weights_identity(spec, model_dir=model_dir, resolved_revision=revision)
    inputs = hashed_inputs(spec, architecture, weights, flags_mode, environ, environment)
    fields = tuple(name for name in HASHED_FIELDS if name in inputs)
    bundle, graphs, weights_hash = derive_keys(inputs, embeds_weights)
    return ConfigKey(bundle, inputs, fields, graphs, weights_hash, embeds_weights)


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
