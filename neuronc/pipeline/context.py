"""A build resolved once: spec, backend and toolchain, where the model is, the config key (and, on a miss, the plan).

Every later stage reads the context; none of them resolves the model directory, the revision or
the keys again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from neuronc.backends.base import Availability, Backend, CompilePlan
from neuronc.errors import BackendUnavailableError
from neuronc.keys import ConfigKey
from neuronc.spec import BuildSpec


@dataclass(frozen=True)
class BuildContext:
    """One build, resolved."""

    spec: BuildSpec
    backend: Backend
    versions: dict[str, str | None]
    toolchain_key: str
    toolchain_label: str
    # The model's local directory (None: a hub model, downloaded by the resolve stage on a miss).
    model_dir: Path | None
    # The commit a hub model's revision resolves to (None for a local directory).
    revision: str | None
    config: ConfigKey

    @property
    def label(self) -> str:
        return self.spec.label

    @cached_property
    def plan(self) -> CompilePlan:
        """The graphs the backend compiles: needed on a miss only (the profile loader checked the spec)."""
        return self.backend.plan(self.spec)

    @cached_property
    def model_config(self) -> dict[str, Any] | None:
        """config.json if it is on this machine (the local directory or the Hugging Face cache); no network."""
        from neuronc.model.files import find_model_config, read_model_config

        if self.model_dir is not None:
            return read_model_config(self.model_dir, required=False)
        return find_model_config(self.spec.model.id, self.revision or self.spec.model.revision, None)


def resolve_build(spec: BuildSpec, availability: Availability | None = None) -> BuildContext:
    """Resolve a build once: its backend (which must be available), model location, revision and keys.

    Imports neither torch nor transformers: a store hit is decided from this alone.
    """
    from neuronc.backends import get_backend
    from neuronc.keys import config_key, spec_model_dir, toolchain_key, toolchain_label
    from neuronc.model.source import resolve_revision

    backend = get_backend(spec.backend)
    if availability is None:
        availability = backend.availability()
    if not availability.available:
        msg = f"backend '{spec.backend}' cannot compile on this machine: {availability.reason}"
        raise BackendUnavailableError(msg, hint=availability.install_hint)
    versions = dict(availability.versions)
    model_dir = spec_model_dir(spec)
    revision = None if model_dir is not None else resolve_revision(spec.model.id, spec.model.revision)
    return BuildContext(
        spec=spec,
        backend=backend,
        versions=versions,
        toolchain_key=toolchain_key(versions),
        toolchain_label=toolchain_label(spec.backend, versions),
        model_dir=model_dir,
        revision=revision,
        config=config_key(spec, resolved_revision=revision, model_dir=model_dir),
    )
