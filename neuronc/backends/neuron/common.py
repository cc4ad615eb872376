"""The base of the four Neuron backends: availability, options, and a compile in its own process.

Nothing here imports torch or the Neuron SDK. The SDK calls of each backend live in its
``compile_in_process``, which runs in the child process that ``neuron.isolated.run_isolated``
starts with the build's environment (``compile_env``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends.base import (
    BackendBase,
    CompileJob,
    CompileResult,
    SpecProblem,
    module_present,
)
from neuronc.backends.neuron.env import IMPORT_NAMES, PYPI_PLACEHOLDERS, build_env
from neuronc.backends.neuron.isolated import run_isolated
from neuronc.backends.support import (
    TORCH_NEURONX,
    Resolution,
    backend_targets,
    detect_release,
    detect_releases,
    is_torchneuron,
    matching,
    resolve,
)
from neuronc.bundle import BUNDLE_PLACEHOLDER
from neuronc.errors import BackendUnavailableError, EnvironmentIncompatibleError
from neuronc.hardware import chip, tp_degrees

if TYPE_CHECKING:
    from collections.abc import Sequence

    from neuronc.spec import BuildSpec

__all__ = [
    "BUNDLE_PLACEHOLDER",
    "NXD_PACKAGES",
    "NeuronBackend",
    "backend_targets",
    "managed_problems",
    "neuron_extra",
    "recorded_env",
    "user_neuron_config",
    "user_section",
]


# The compiler and NxD stack that the NxD-based backends (nxdi, optimum-neuron) record in their
# toolchains, in the order their ``packages`` list them.
NXD_PACKAGES = ("neuronx-cc", "torch-neuronx", "libneuronxla", "neuronx-distributed")

# The variables of a compile's environment that the manifest records (``extra.neuron_env``).
RECORDED_ENV = (
    "NEURON_CC_FLAGS",
    "NEURON_COMPILE_CACHE_URL",
    "NEURON_PLATFORM_TARGET_OVERRIDE",
    "NEURON_LOGICAL_NC_CONFIG",
)


def recorded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the compile ran with, as the child process sees it (for the manifest)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in RECORDED_ENV if k in env}


def neuron_extra(
    load_snippet: Callable[[str], str], section: str, info: dict[str, Any], *, timing: str | None = None
) -> dict[str, Any]:
    """A Neuron build's ``extra`` in its manifest: the snippet that loads it (written for the bundle's
    placeholder directory), the backend's own record under ``section``, the environment the compile
    ran with and, where one SDK call built every graph, how its time was split (``timing``)."""
    extra = {"load_snippet": load_snippet(BUNDLE_PLACEHOLDER), section: info, "neuron_env": recorded_env()}
    if timing is not None:
        extra["timing"] = timing
    return extra


def user_section(spec: BuildSpec, section: str) -> dict[str, Any]:
    """The keys the profile sets under ``options.<section>`` (``neuron_config``, ``from_pretrained``), as written."""
    value = spec.options.get(section) or {}
    return dict(value) if isinstance(value, Mapping) else {}


def user_neuron_config(spec: BuildSpec) -> dict[str, Any]:
    """The ``options.neuron_config`` keys the profile sets, as written."""
    return user_section(spec, "neuron_config")


def managed_problems(spec: BuildSpec, section: str, managed: Mapping[str, str]) -> list[SpecProblem]:
    """A problem for each key of ``options.<section>`` that neuronc sets from a profile field."""
    given = user_section(spec, section)
    return [
        SpecProblem(("options", section, key), f"set by neuronc from the profile's {field}; set it there")
        for key, field in managed.items()
        if key in given
    ]


class NeuronBackend(BackendBase):
    """A backend whose compile calls the Neuron SDK in an isolated child process.

    Which targets it compiles for in which Neuron SDK release is the support matrix's
    (neuronc.backends.support): each subclass's ``targets`` are set from its ``name`` when it is defined.
    """

    # Neuron backends shard (or not) in their own format; neuronc's rank shards in weights/ are not
    # read by any of them, so the pipeline need not write them.
    consumes_rank_shards: ClassVar[bool] = False
    targets: ClassVar[frozenset[str]] = frozenset({"inf2", "trn1", "trn2"})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.targets = backend_targets(cls.name)  # every target any release supports the backend on

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        """What the Neuron runtime supports on the target at the build's LNC (neuronc.hardware)."""
        return tp_degrees(target, options)

    def resolve_release(self, target: str, sdk: str | None) -> Resolution:
        """The release a build is judged against: ``sdk:``, else the installed toolchain's, else the newest."""
        return resolve(self.name, target, sdk, self.toolchain_versions())

    def support_problems(self, target: str, sdk: str | None) -> Sequence[SpecProblem]:
        if chip(target) is None:
            return ()  # not a Neuron target (cpu): the profile's target check names the backend it needs
        resolution = self.resolve_release(target, sdk)
        if resolution.problem is None:
            return ()
        return (SpecProblem(("sdk",) if sdk is not None else ("target",), resolution.problem),)

    def release_for(self, spec: BuildSpec) -> Resolution:
        return self.resolve_release(spec.target, spec.sdk)

    def check_toolchain_release(self, spec: BuildSpec) -> None:
        """EnvironmentIncompatibleError (exit 5) when the profile's ``sdk:`` is not the installed release."""
        if spec.sdk is None:
            return
        versions = self.toolchain_versions()
        if any(release in matching(spec.sdk) for release in detect_releases(versions)):
            return  # what is installed is (also) a release the profile names
        installed = detect_release(versions)
        have = f"SDK {installed.version}" if installed is not None else "no release neuronc knows"
        msg = f"{spec.label}: the profile asks for Neuron SDK {spec.sdk}; the toolchain installed here is {have}"
        hint = f"compile where SDK {spec.sdk} is installed (a Neuron DLAMI or DLC), or change sdk:"
        raise EnvironmentIncompatibleError(msg, hint=hint)

    def missing_reason(self, package: str, version: str | None) -> str | None:
        # The Neuron SDK's PyPI names are placeholders that install but cannot run.
        module = IMPORT_NAMES.get(package, package.replace("-", "_"))
        if version is None:
            return package
        if version in PYPI_PLACEHOLDERS.get(package, ()):
            return f"{package} (found {version}, the PyPI placeholder)"
        if package == TORCH_NEURONX and is_torchneuron(version):
            # From PyTorch 2.10 the torch-neuronx name carries TorchNeuron, the native backend
            # (neuronc.backends.support.is_torchneuron): its metadata and module look the same.
            return f"{package} (found {version}: TorchNeuron, the native PyTorch backend, not the XLA torch-neuronx)"
        if not module_present(module):
            return f"{package} (metadata says {version}, but module '{module}' is not importable)"
        return None

    def compile(self, job: CompileJob) -> CompileResult:
        """Check availability, then compile in a child process with this build's environment."""
        availability = self.availability()
        if not availability.available:
            msg = f"backend '{self.name}' cannot compile here: {availability.reason}"
            raise BackendUnavailableError(msg, hint=availability.install_hint)
        self.ensure_valid(job.spec)
        self.check_toolchain_release(job.spec)
        return run_isolated(self, job)

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        """The environment of this build's compile; backends add their own variables."""
        return build_env(job.spec, job.env, job.work_dir)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        """Run the SDK calls in this process (the child calls this; tests call it with SDK doubles)."""
        raise NotImplementedError
