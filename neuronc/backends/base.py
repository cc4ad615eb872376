"""The Backend protocol and the small records that flow through it.

A backend says whether it is available (and why not), reports its toolchain versions, plans its
graphs from a BuildSpec, compiles them into a directory, and, where its runtime is present, loads a
bundle to run it. Backend modules must stay cheap to import: SDK imports go inside methods.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from neuronc.keys import CompilerFlagsMode
from neuronc.progress import NULL_PROGRESS, ProgressSink
from neuronc.resources import WorkPool

if TYPE_CHECKING:
    from pydantic import BaseModel

    from neuronc.backends.bucket_rules import BucketRules
    from neuronc.backends.capabilities import BackendRules, BackendRuntime, BackendToolchain
    from neuronc.backends.serving import ServingCapability
    from neuronc.backends.support import Resolution
    from neuronc.backends.weights_binding import WeightsBinding
    from neuronc.spec import BuildSpec, ServingStack, WeightsMode


class GraphRole(StrEnum):
    """What a compiled graph does (``GraphSpec.role``; the manifest records the value). A third-party
    backend may name a role of its own: ``GraphSpec.role`` is any string, these are the built-in ones."""

    CONTEXT = "context_encoding"
    TOKEN = "token_generation"
    ENCODER = "encoder"


ROLE_CONTEXT = GraphRole.CONTEXT
ROLE_TOKEN = GraphRole.TOKEN
ROLE_ENCODER = GraphRole.ENCODER
_ROLE_SHORT: dict[str, str] = {ROLE_CONTEXT: "cte", ROLE_TOKEN: "tkg", ROLE_ENCODER: "enc"}

LLM_TASKS = frozenset({"text-generation"})
ENCODER_TASKS = frozenset({"feature-extraction", "text-classification", "fill-mask", "token-classification"})


GIB = 1024**3


@dataclass(frozen=True)
class HostRamModel:
    """Host RAM while compiling: base + weights_factor × weights held + per_graph × parallel graphs."""

    base_bytes: int
    weights_factor: float
    per_graph_bytes: int
    # Whether each parallel graph process holds its own copy of the weights (inductor workers do).
    weights_per_graph: bool
    note: str


@dataclass(frozen=True)
class SpecProblem:
    """A backend's objection to a build, at a field of the profile (``("options", "neuron_config", "x")``)."""

    path: tuple[str | int, ...]
    message: str


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
    # The run's worker slots, shared with the other builds of a matrix (``neuronc.backends.worker.Workers``
    # holds one per worker process); None: this build's ``jobs`` alone bound it.
    pool: WorkPool | None = None
    # The pre-flight's host-RAM estimate (None: unknown): the whole build, and one graph process.
    host_compile_bytes: int | None = None
    host_compile_per_graph_bytes: int | None = None


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
    """What every backend provides: its identity, its capabilities (one per concern, each implemented
    in the backend's own package: neuronc.backends.capabilities, neuronc.backends.serving) and its
    compile.

    See BackendBase for the shared defaults. Nothing outside ``neuronc.backends`` names a backend:
    profile checks ask ``rules``; keys and the memory pre-flight ``toolchain``; the pipeline ``plan``
    and ``compile``; ``run``, accuracy and ``inspect`` ``runtime``; deploy and the verdict ``serving``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    targets: ClassVar[frozenset[str]]
    # The serving stacks (`neuronc deploy --for`) that load this backend's bundles, the usual one first.
    serving_stacks: ClassVar[tuple[ServingStack, ...]]
    # What the pre-boot verdict asks the stack serving its bundles (None: no key neuronc compares);
    # implemented in the backend's own package (neuronc.backends.serving).
    serving: ClassVar[ServingCapability | None]
    # Whether the compiled artifacts embed the weights, with the upstream source (neuronc.backends.weights_binding).
    weights_binding: ClassVar[WeightsBinding]

    @property
    def rules(self) -> BackendRules: ...

    @property
    def toolchain(self) -> BackendToolchain: ...

    @property
    def runtime(self) -> BackendRuntime: ...

    def plan(self, spec: BuildSpec) -> CompilePlan: ...

    def compile(self, job: CompileJob) -> CompileResult: ...


def distribution_version(name: str) -> str | None:
    """Return an installed distribution's version without importing it, or None."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    # importlib.metadata.version() runs the whole METADATA file through the email parser (about 10 ms
    # for three distributions, on every store hit); the Version header sits in the header block,
    # which ends at the first blank line.
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line:
            break
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
    return dist.version


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
    targets: ClassVar[frozenset[str]] = frozenset()
    amp: ClassVar[frozenset[str]] = frozenset({"fp32", "fp16", "bf16"})
    tasks: ClassVar[frozenset[str]] = LLM_TASKS
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded", "on-load", "reference"})
    default_weights: ClassVar[WeightsMode] = "presharded"
    requires_tp_divides_heads: ClassVar[bool] = True
    consumes_rank_shards: ClassVar[bool] = True
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.PROFILE_AND_ENV
    host_ram: ClassVar[HostRamModel | None] = None
    toolchain_package: ClassVar[str | None] = None
    options_model: ClassVar[type[BaseModel] | None] = None
    can_run: ClassVar[bool] = False
    process_env: ClassVar[Mapping[str, str]] = {}
    uses_hf_neuron_cache: ClassVar[bool] = False
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = ()
    serving: ClassVar[ServingCapability | None] = None
    # Distributions that make up this backend's toolchain, in display order.
    packages: ClassVar[tuple[str, ...]] = ()
    # Distributions that must be present for the backend to run.
    required: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str | None] = None

    # The capabilities are the backend itself: a backend overrides the members it changes, here and in
    # its own package, and callers reach each member through its capability.
    @property
    def rules(self) -> BackendRules:
        return self

    @property
    def toolchain(self) -> BackendToolchain:
        return self

    @property
    def runtime(self) -> BackendRuntime:
        return self

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        """None: any tp degree (a backend without a device); NeuronBackend reads neuronc.hardware."""
        return None

    def tp_degree_problem(self, tp: int, target: str, degrees: Collection[int]) -> str:
        """Why ``tp`` is refused on ``target`` (the profile loader puts it at ``tp_degree``)."""
        return f"{tp} is not supported on {target} by '{self.name}'; allowed: {format_ranges(degrees)}"

    def compiler_flags_problem(self) -> str:
        """Why ``compiler.flags`` is refused when ``compiler_flags_mode`` is NONE (at ``compiler.flags``)."""
        return f"the {self.name} backend takes no compiler flags; remove compiler.flags"

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        """Backend-specific checks of a build that the profile schema cannot express.

        The profile loader calls this only for a build whose other fields, ``options`` included,
        passed; each problem names the field it is about.
        """
        return ()

    def bucket_rules(self, spec: BuildSpec) -> BucketRules:
        """The buckets this backend can compile for ``spec`` (``neuronc buckets`` chooses within them).

        The default is the profile loader's rule (neuronc.profile._checks.resolve_buckets): any
        length up to sequence.max_context_length (context) or sequence.max_length (token), which is
        also NxD Inference's (``context_encoding_buckets``' last <= max_context_length,
        ``token_generation_buckets``' last <= max_length).
        """
        from neuronc.backends.bucket_rules import BucketRule, BucketRules

        seq = spec.sequence
        return BucketRules(BucketRule(seq.max_context_length), BucketRule(seq.max_length))

    def support_problems(self, target: str, sdk: str | None) -> Sequence[SpecProblem]:
        """Why no Neuron SDK release supports this backend on ``target`` (the profile's ``sdk:``, else
        the installed toolchain's release); the Neuron backends read neuronc.backends.support. A
        backend outside the Neuron SDK takes no ``sdk:``."""
        if sdk is None:
            return ()
        return (SpecProblem(("sdk",), f"the {self.name} backend is not part of the Neuron SDK; remove sdk"),)

    def release_for(self, spec: BuildSpec) -> Resolution | None:
        """The Neuron SDK release a build is judged against (None for a backend outside the SDK)."""
        return None

    def spec_problems(self, spec: BuildSpec) -> list[SpecProblem]:
        """Everything the profile loader would say about this backend's part of ``spec``."""
        problems: list[SpecProblem] = []
        if self.options_model is not None:
            from pydantic import ValidationError

            try:
                self.options_model.model_validate(spec.options)
            except ValidationError as exc:
                # check_spec reads the options through the model: it runs only on valid options.
                return [SpecProblem(("options", *e["loc"]), e["msg"]) for e in exc.errors()]
        if spec.compiler_flags and self.compiler_flags_mode is CompilerFlagsMode.NONE:
            problems.append(SpecProblem(("compiler", "flags"), self.compiler_flags_problem()))
        problems += self.support_problems(spec.target, spec.sdk)
        problems += self.check_spec(spec)
        return problems

    def ensure_valid(self, spec: BuildSpec) -> None:
        """Raise InvalidInputError (exit 2) if ``spec`` is not a build this backend can compile.

        Profiles are checked when they load; this guards BuildSpecs made in Python.
        """
        problems = self.spec_problems(spec)
        if problems:
            from neuronc.errors import InvalidInputError

            details = [f"{'.'.join(str(p) for p in problem.path)}: {problem.message}" for problem in problems]
            msg = f"{spec.label}: not a build the '{self.name}' backend can compile"
            raise InvalidInputError(msg, details=details)

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

    def build_versions(self, spec: BuildSpec, availability: Availability) -> dict[str, str | None]:
        """The toolchain one build compiles with (its toolchain key): by default what is installed here."""
        return dict(availability.versions or self.toolchain_versions())

    def keyed_environment(
        self, spec: BuildSpec, versions: Mapping[str, str | None], environ: Mapping[str, str]
    ) -> dict[str, str]:
        """The variables of ``environ`` this build's compile reads that shape its output, besides
        ``NEURON_CC_FLAGS`` (hashed as ``compiler_flags`` where ``compiler_flags_mode`` reads it): they
        enter the config hash as ``environment`` (neuronc.keys). Whatever a backend records in the
        manifest because it shapes the output must be here. ``versions``: the build's toolchain
        (``build_versions``). None by default."""
        return {}

    def toolchain_versions(self) -> dict[str, str | None]:
        from neuronc import __version__

        versions: dict[str, str | None] = {"neuronc": __version__}
        for package in self.packages:
            versions[package] = distribution_version(package)
        return versions

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.ensure_valid(spec)
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

    def load(self, bundle_dir: str | os.PathLike[str], *, warmup: bool = True) -> Any:
        from neuronc.errors import BackendUnavailableError

        msg = f"bundles of backend '{self.name}' cannot run here: neuronc has no runtime for them"
        raise BackendUnavailableError(
            msg, hint="run it on its target with the backend's own runtime (see `neuronc inspect`)"
        )

    def reference_model(self, bundle_dir: str | os.PathLike[str], dtype: str) -> Any:
        """The eager model `verify --accuracy` compares a loaded bundle with (in ``dtype``); a backend
        whose bundles run here provides it. The default has none."""
        from neuronc.errors import BackendUnavailableError

        msg = f"backend '{self.name}' has no accuracy check on this machine"
        raise BackendUnavailableError(msg, hint="check accuracy on the target, with the backend's own runtime")

    def recognizes(self, directory: str | os.PathLike[str]) -> bool:
        """Whether ``directory`` holds this backend's compiled artifacts without a manifest (what
        ``compile`` writes into a CompileJob's directory before the pipeline adds one)."""
        return False

    def load_snippet(self, bundle_dir: str) -> str | None:
        return None


def check_import_reference(value: str, what: str) -> str:
    """``value`` if it is ``module.path:Name``; the ValueError message says what was expected."""
    module, sep, attribute = value.partition(":")
    names = [*module.split("."), attribute]
    if not sep or not all(name.isidentifier() for name in names):
        msg = f"expected 'module:{what}'"
        raise ValueError(msg)
    return value


def format_ranges(values: Collection[int]) -> str:
    """``1 to 64`` for a contiguous run longer than six, else ``1, 2, 4, 8``."""
    ordered = sorted(values)
    if len(ordered) > 6 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]} to {ordered[-1]}"
    return ", ".join(str(v) for v in ordered)
