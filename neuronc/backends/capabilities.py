"""The capabilities a backend is asked through, one per concern (``Backend.rules``, ``.toolchain``,
``.runtime``; the serving capability is ``neuronc.backends.serving``).

Each is implemented by the backend itself, in its own package: ``BackendBase`` gives the defaults and
hands itself out as each capability, so a backend overrides the members it changes and nothing else.
A caller holding a ``Backend`` reaches a member only through its capability: profile validation asks
``rules``, the pipeline's keys and pre-flight ask ``toolchain``, ``run``/``accuracy``/``inspect`` ask
``runtime``. Nothing here imports a backend family, torch or an SDK.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from neuronc.backends.base import Availability, HostRamModel, SpecProblem
    from neuronc.backends.bucket_rules import BucketRules
    from neuronc.backends.support import Resolution
    from neuronc.keys import CompilerFlagsMode
    from neuronc.spec import BuildSpec, WeightsMode


class BackendRules(Protocol):
    """What ``profile`` asks: which builds the backend takes, and why it refuses one (at its field)."""

    amp: ClassVar[frozenset[str]]
    tasks: ClassVar[frozenset[str]]
    weights_modes: ClassVar[frozenset[str]]
    # The weights mode of a profile that does not say (one of weights_modes).
    default_weights: ClassVar[WeightsMode]
    requires_tp_divides_heads: ClassVar[bool]
    # The pydantic model of this backend's ``options:`` (unknown keys are profile errors with positions).
    options_model: ClassVar[type[BaseModel] | None]

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None: ...

    def tp_degree_problem(self, tp: int, target: str, degrees: Collection[int]) -> str: ...

    def compiler_flags_problem(self) -> str: ...

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]: ...

    def bucket_rules(self, spec: BuildSpec) -> BucketRules: ...

    def support_problems(self, target: str, sdk: str | None) -> Sequence[SpecProblem]: ...

    def release_for(self, spec: BuildSpec) -> Resolution | None: ...


class BackendToolchain(Protocol):
    """What the pipeline asks before it compiles: the toolchain here and per build, what enters the
    keys, and what compiling costs the host."""

    # How profile compiler flags and NEURON_CC_FLAGS reach the compiler (and so enter the config hash).
    compiler_flags_mode: ClassVar[CompilerFlagsMode]
    # The memory model for compiling on the host (None: unknown, no host-RAM estimate).
    host_ram: ClassVar[HostRamModel | None]
    # The distribution whose version names the toolchain in store paths ("torch", "optimum-neuron").
    toolchain_package: ClassVar[str | None]
    # Whether compile reads neuronc's rank shards (weights/); when not, the pipeline does not write them.
    consumes_rank_shards: ClassVar[bool]
    # Whether the Hugging Face Neuron cache (optimum-neuron's registry) describes this backend's builds.
    uses_hf_neuron_cache: ClassVar[bool]

    def availability(self) -> Availability: ...

    def toolchain_versions(self) -> dict[str, str | None]: ...

    def build_versions(self, spec: BuildSpec, availability: Availability) -> dict[str, str | None]: ...

    def keyed_environment(
        self, spec: BuildSpec, versions: Mapping[str, str | None], environ: Mapping[str, str]
    ) -> dict[str, str]: ...


class BackendRuntime(Protocol):
    """What ``run``, ``verify --accuracy`` and ``inspect`` ask of a bundle the backend built."""

    # Whether bundles of this backend can be loaded and run on this kind of machine (``neuronc run``).
    can_run: ClassVar[bool]
    # Variables a process that only loads and runs this backend's bundles sets before its runtime is
    # imported (``neuronc run``; a value the user set wins). Never set by ``load``, which runs inside
    # other people's processes.
    process_env: ClassVar[Mapping[str, str]]

    def load(self, bundle_dir: str | os.PathLike[str], *, warmup: bool = True) -> Any:
        """The bundle loaded to run (``generate``; for `neuronc serve`, a ``neuronc.serve.runner.ServingRunner``);
        ``warmup=False``: the caller warms it up itself (the server's engine thread)."""
        ...

    def recognizes(self, directory: str | os.PathLike[str]) -> bool: ...

    def reference_model(self, bundle_dir: str | os.PathLike[str], dtype: str) -> Any: ...

    def load_snippet(self, bundle_dir: str) -> str | None: ...


__all__ = ["BackendRules", "BackendRuntime", "BackendToolchain"]
