"""Registry file paths of a Neuron cache repository, versions, and the names neuronc normalises.

A cache repository (``aws-neuron/optimum-neuron-cache`` or a private one) mirrors libneuronxla's
compile cache: one ``neuronxcc-<compiler version>/`` folder per compiler, each with
``0_REGISTRY/<optimum-neuron version>/`` holding one small JSON per compiled configuration. The
layouts read here, newest first (see docs/cache-lookup.md):

- ``arch-digest``: ``<ver>/<arch_digest>/<hash>.json`` (optimum-neuron 0.4.5 and later);
- ``alias``: ``<ver>/<model_type>/<org>/<name>/<hash>.json`` beside it (0.4.5; incomplete by design);
- ``model-type``: the same shape as the only index (0.2 to 0.4.4, and 0.0.18);
- ``model-type-mode``: ``<ver>/{inference,training}/<model_type>/<org>/<name>/<hash>.json`` (0.0.19 to 0.1.x).

The file name is the entry hash, ``sha512(file bytes)[:20]``, so an alias and its primary file are
the same entry: entries are de-duplicated by (compiler folder, optimum-neuron version, hash).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from neuronc.errors import printable as printable  # the one escaping of names from files and caches

COMPILER_PREFIX = "neuronxcc-"
REGISTRY_DIR = "0_REGISTRY"
# What `neuronc cache mirror` writes last in a snapshot: repository, revision, time, paths written.
MIRROR_METADATA = ".neuronc-mirror.json"
# optimum-neuron 0.4.5 pins neuronx-cc==2.21.33363.0 and reads only its own registry folder
# (optimum/neuron/cache/hub_cache.py: REGISTRY_FOLDER, hub_registry_path).
OPTIMUM_NEURON_VERSION = "0.4.5"
PINNED_COMPILER = "2.21.33363.0"
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
# Every name in a real registry path (versions, model types, Hub org/name, hashes) uses these; a
# name outside them (control characters, bytes that are not UTF-8, spaces) is not an entry's.
_NAMES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(?:/[A-Za-z0-9_][A-Za-z0-9._+-]*)*\Z")
_MODES = ("inference", "training")
_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "torch.float16": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "torch.float32": "float32",
}
# optimum-neuron's INSTANCE_VALUE_MAP: inf2 and trn1n run trn1 artifacts (same NeuronCore-v2).
_TARGETS = {"inf2": "trn1", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2"}


class Layout(StrEnum):
    """Where in a registry an entry file sits (docs/cache-lookup.md, "Registry layouts")."""

    ARCH_DIGEST = "arch-digest"
    ALIAS = "alias"
    MODEL_TYPE = "model-type"
    MODEL_TYPE_MODE = "model-type-mode"


def normalize_dtype(value: str) -> str:
    """Canonical dtype name: bf16/bfloat16/torch.bfloat16 -> bfloat16, fp16 -> float16, fp32 -> float32."""
    return _DTYPES.get(value.strip().lower(), value.strip().lower())


def normalize_target(value: str) -> str:
    """optimum-neuron's target for an instance type: inf2, trn1n and trn1 -> trn1; trn2 -> trn2."""
    return _TARGETS.get(value.strip().lower(), value.strip().lower())


@functools.lru_cache(maxsize=1024)
def version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a version string such as 0.4.5, 0.0.25.dev0 or 2.21.33363.0+82129205."""
    release = version.split("+", 1)[0]
    return tuple(int(part) for part in re.findall(r"\d{1,18}", release.split(".dev")[0]))


def version_matches(version: str | None, wanted: str) -> bool:
    """Whether ``version`` starts with the dotted components of ``wanted`` (2.21 matches 2.21.33363.0+82...)."""
    if version is None:
        return False
    if version == wanted:
        return True
    have = re.split(r"[.+]", version)
    want = re.split(r"[.+]", wanted)
    return have[: len(want)] == want


def json_safe(value: Any) -> Any:
    """A JSON-ready value whose every string (keys too) encodes as UTF-8: lone surrogates escaped."""
    if isinstance(value, str):
        return value if value.isascii() or _encodes(value) else printable(value)
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class RegistryPath:
    """A registry file's path, parsed."""

    path: str
    compiler_folder: str
    optimum_version: str
    layout: Layout
    stem: str
    digest: str | None = None
    model_type: str | None = None
    model_id: str | None = None

    @property
    def compiler_version(self) -> str:
        return self.compiler_folder[len(COMPILER_PREFIX) :]

    @property
    def registry(self) -> str:
        """The registry folder: ``neuronxcc-<ver>/0_REGISTRY/<optimum-neuron ver>``."""
        return f"{self.compiler_folder}/{REGISTRY_DIR}/{self.optimum_version}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.compiler_folder, self.optimum_version, self.stem)


NOT_AN_ENTRY = "not a registry entry path (neuronxcc-*/0_REGISTRY/<version>/<digest or model>/<hash>.json)"


def path_problem(path: str) -> str:
    """Why a ``.json`` file under a registry is not an entry (for a path ``parse_registry_path`` refused)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8: not a registry entry"
    if not path.isprintable():
        return "its name has control characters: not a registry entry"
    if not _NAMES.match(path) or ".." in path:
        return "its name has characters no registry name has (letters, digits and . _ + - only)"
    return NOT_AN_ENTRY


def is_digest(name: str) -> bool:
    """An arch digest folder's name (64 hex digits)."""
    return _HEX64.match(name) is not None


def is_registry_candidate(path: str) -> bool:
    """A ``.json`` file somewhere under ``neuronxcc-*/0_REGISTRY/``: an entry, or a file that claims to be one."""
    return path.startswith(COMPILER_PREFIX) and path.endswith(".json") and f"/{REGISTRY_DIR}/" in path


def parse_registry_path(path: str) -> RegistryPath | None:
    """Parse ``neuronxcc-*/0_REGISTRY/<ver>/.../<hash>.json``; None for anything else."""
    if not path.startswith(COMPILER_PREFIX) or not path.endswith(".json"):
        return None
    parts = path.split("/")
    if len(parts) < 5 or parts[1] != REGISTRY_DIR:
        return None
    # Paths come from a server or a directory listing and may be written to disk: plain names only.
    if not _NAMES.match(path) or ".." in path:
        return None
    compiler, version, rest = parts[0], parts[2], parts[3:]
    stem = rest[-1][: -len(".json")]
    if not stem:
        return None
    if len(rest) == 2 and _HEX64.match(rest[0]):
        return RegistryPath(path, compiler, version, Layout.ARCH_DIGEST, stem, digest=rest[0])
    layout = Layout.ALIAS if version_key(version) >= version_key(OPTIMUM_NEURON_VERSION) else Layout.MODEL_TYPE
    if rest[0] in _MODES:
        layout = Layout.MODEL_TYPE_MODE
        rest = rest[1:]
    if len(rest) < 3:
        return None
    model_type, model_id = rest[0], "/".join(rest[1:-1])
    return RegistryPath(path, compiler, version, layout, stem, model_type=model_type, model_id=model_id)


def registry_sort_key(registry: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Registries ordered by optimum-neuron version, then compiler version."""
    compiler, _, version = registry.split("/", 2)
    return (version_key(version.split("/")[-1]), version_key(compiler[len(COMPILER_PREFIX) :]))
