"""The Backend protocol and the small records that flow through it.

A backend says whether it is available (and why not), reports its toolchain versions, plans its
graphs from a BuildSpec, compiles them into a directory, and, where its runtime is present, loads a
bundle to run it. Backend modules must stay cheap to import: SDK imports go inside methods.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from neuronc.progress import NULL_PROGRESS, ProgressSink

if TYPE_CHECKING:
    from neuronc.profile import BuildSpec

ROLE_CONTEXT = "context_encoding"
ROLE_TOKEN = "token_generation"
ROLE_ENCODER = "encoder"
_ROLE_SHORT = {ROLE_CONTEXT: "cte", ROLE_TOKEN: "tkg", ROLE_ENCODER: "enc"}

LLM_TASKS = frozenset({"text-generation"})
ENCODER_TASKS = frozenset({"feature-extraction", "text-classification", "fill-mask", "token-classification"})


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; when not, what is missing and how to get it."""

    available: bool
    versions: dict[str, str | None] = field(default_factory=dict)
    reason: str | None = None
    install_hint: str | None = None


@dataclass(frozen=True, order=True)
class GraphSpec:
    """One compiled graph: a role at one (batch, bucket) shape."""

    role: str
    batch: int
    bucket: int

    @property
    def name(self) -> str:
        return f"{_ROLE_SHORT.get(self.role, self.role)}-b{self.batch}-s{self.bucket}"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role, "batch": self.batch, "bucket": self.bucket}


@dataclass(frozen=True)
class CompilePlan:
    """What a backend will compile for one BuildSpec."""

    graphs: tuple[GraphSpec, ...]
    weights_layout: str
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "graphs": [g.to_json() for g in self.graphs],
            "weights_layout": self.weights_layout,
            "notes": list(self.notes),
        }


@dataclass
class CompileJob:
    """Everything a backend's compile needs. Paths are inside the bundle's staging directory."""

    spec: BuildSpec
    plan: CompilePlan
    checkpoint_dir: Path
    artifacts_dir: Path
    logs_dir: Path
    work_dir: Path
    weights_dir: Path | None = None
    jobs: int = 1
    progress: ProgressSink = NULL_PROGRESS
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class CompiledGraph:
    """A graph the backend produced: where it is (relative to the bundle) and how long it took."""

    graph: GraphSpec
    artifact: str
    compile_seconds: float
    cache_hit: bool = False


@dataclass
class CompileResult:
    graphs: list[CompiledGraph]
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """What every backend provides; see BackendBase for the shared defaults."""

    name: ClassVar[str]
    description: ClassVar[str]
    targets: ClassVar[frozenset[str]]
    amp: ClassVar[frozenset[str]]
    tasks: ClassVar[frozenset[str]]
    weights_modes: ClassVar[frozenset[str]]
    requires_tp_divides_heads: ClassVar[bool]

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None: ...

    def availability(self) -> Availability: ...

    def toolchain_versions(self) -> dict[str, str | None]: ...

    def plan(self, spec: BuildSpec) -> CompilePlan: ...

    def compile(self, job: CompileJob) -> CompileResult: ...

    def load_snippet(self, bundle_dir: str) -> str | None: ...


# Supported tensor-parallel degrees per target, from NxD Inference's API guide
# (reference/neuron-apis.md §1.10): inf2.48xlarge has 24 NeuronCores, trn1.32xlarge 32,
# trn2.48xlarge 64 logical cores at LNC=2 (128 physical at LNC=1).
NXD_TP_DEGREES: dict[str, frozenset[int]] = {
    "inf2": frozenset({1, 2, 4, 8, 24}),
    "trn1": frozenset({1, 2, 8, 16, 32}),
    "trn2": frozenset(range(1, 65)),
}
TRN2_TP_DEGREES_LNC1 = frozenset(range(1, 129))
MAX_CORES = {"inf2": 24, "trn1": 32, "trn2": 64}
HBM_BYTES_PER_CORE = {"inf2": 16 * 1024**3, "trn1": 16 * 1024**3, "trn2": 24 * 1024**3}


def distribution_version(name: str) -> str | None:
    """Return an installed distribution's version without importing it, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_present(module: str) -> bool:
    """Whether a top-level module can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def default_graphs(spec: BuildSpec) -> tuple[GraphSpec, ...]:
    """The Neuron-style graph set: one CTE per context bucket, one TKG per token bucket."""
    seq = spec.sequence
    if spec.model.task not in LLM_TASKS:
        return tuple(GraphSpec(ROLE_ENCODER, spec.batch_size, b) for b in seq.context_buckets)
    cte = [GraphSpec(ROLE_CONTEXT, spec.batch_size, b) for b in seq.context_buckets]
    tkg = [GraphSpec(ROLE_TOKEN, spec.batch_size, b) for b in seq.token_buckets]
    return tuple(cte + tkg)


class BackendBase:
    """Shared defaults; concrete backends override the class attributes and the SDK calls."""

    name: ClassVar[str] = "base"
    description: ClassVar[str] = ""
    targets: ClassVar[frozenset[str]] = frozenset({"inf2", "trn1", "trn2"})
    amp: ClassVar[frozenset[str]] = frozenset({"fp32", "fp16", "bf16"})
    tasks: ClassVar[frozenset[str]] = LLM_TASKS
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded", "on-load", "reference"})
    requires_tp_divides_heads: ClassVar[bool] = True
    # Distributions that make up this backend's toolchain, in display order.
    packages: ClassVar[tuple[str, ...]] = ()
    # Distributions that must be present for the backend to run.
    required: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str | None] = None

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        if target == "trn2" and int(options.get("logical_nc_config", 2)) == 1:
            return TRN2_TP_DEGREES_LNC1
        return NXD_TP_DEGREES.get(target)

    def availability(self) -> Availability:
        versions = self.toolchain_versions()
        missing = [m for p in self.required if (m := self.missing_reason(p, versions.get(p))) is not None]
        if missing:
            return Availability(
                False,
                versions,
                reason="missing " + ", ".join(missing),
                install_hint=self.install_hint,
            )
        return Availability(True, versions)

    def missing_reason(self, package: str, version: str | None) -> str | None:
        """Why a required package does not count as installed (None when it does)."""
        return package if version is None else None

    def toolchain_versions(self) -> dict[str, str | None]:
        from neuronc import __version__

        versions: dict[str, str | None] = {"neuronc": __version__}
        for package in self.packages:
            versions[package] = distribution_version(package)
        return versions

    def plan(self, spec: BuildSpec) -> CompilePlan:
        layout = {
            "presharded": f"{spec.tp_degree} rank shards in weights/",
            "on-load": "sharded from the bundled checkpoint when loaded",
            "reference": "read from the original checkpoint when loaded",
        }[spec.weights]
        return CompilePlan(graphs=default_graphs(spec), weights_layout=layout)

    def compile(self, job: CompileJob) -> CompileResult:
        from neuronc.errors import BackendUnavailableError

        msg = f"backend '{self.name}' cannot compile here"
        raise BackendUnavailableError(msg, hint=self.install_hint)

    def load_snippet(self, bundle_dir: str) -> str | None:
        return None
