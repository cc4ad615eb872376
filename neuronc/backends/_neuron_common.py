"""The base of the four Neuron backends: availability, options, and a compile in its own process.

Nothing here imports torch or the Neuron SDK. The SDK calls of each backend live in its
``compile_in_process``, which runs in the child process that ``_neuron_isolated.run_isolated``
starts with the build's environment (``compile_env``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends._neuron_env import IMPORT_NAMES, PYPI_PLACEHOLDERS, build_env
from neuronc.backends._neuron_isolated import run_isolated
from neuronc.backends.base import (
    BUNDLE_PLACEHOLDER,
    BackendBase,
    CompileJob,
    CompileResult,
    distribution_version,
    module_present,
)
from neuronc.errors import BackendUnavailableError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from neuronc.spec import BuildSpec

__all__ = ["BUNDLE_PLACEHOLDER", "NeuronBackend", "recorded_env"]


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


class NeuronBackend(BackendBase):
    """A backend whose compile calls the Neuron SDK in an isolated child process."""

    # Neuron backends shard (or not) in their own format; neuronc's rank shards in weights/ are not
    # read by any of them, so the pipeline need not write them.
    consumes_rank_shards: ClassVar[bool] = False

    def missing_reason(self, package: str, version: str | None) -> str | None:
        # The Neuron SDK's PyPI names are placeholders that install but cannot run.
        module = IMPORT_NAMES.get(package, package.replace("-", "_"))
        if version is None:
            return package
        if version in PYPI_PLACEHOLDERS.get(package, ()):
            return f"{package} (found {version}, the PyPI placeholder)"
        if not module_present(module):
            return f"{package} (metadata says {version}, but module '{module}' is not importable)"
        return None

    def toolchain_versions(self) -> dict[str, str | None]:
        versions = super().toolchain_versions()
        for package in self.packages:
            if versions.get(package) is None:
                versions[package] = distribution_version(package)
        return versions

    def options(self, spec: BuildSpec) -> Any:
        """``spec.options`` parsed by this backend's options model (the spec has passed its checks)."""
        model: type[BaseModel] | None = self.options_model
        if model is None:
            return None
        return model.model_validate(spec.options)

    def compile(self, job: CompileJob) -> CompileResult:
        """Check availability, then compile in a child process with this build's environment."""
        availability = self.availability()
        if not availability.available:
            msg = f"backend '{self.name}' cannot compile here: {availability.reason}"
            raise BackendUnavailableError(msg, hint=availability.install_hint)
        self.ensure_valid(job.spec)
        return run_isolated(self, job)

    def compile_env(self, job: CompileJob) -> dict[str, str]:
        """The environment of this build's compile; backends add their own variables."""
        return build_env(job.spec, job.env, job.work_dir)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        """Run the SDK calls in this process (the child calls this; tests call it with SDK doubles)."""
        raise NotImplementedError
