"""A build resolved once: spec, backend and toolchain, plan, where the model is, and the config key.

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

# What the pipeline asks of a bundle store, local or remote: the store interface itself.


@dataclass(frozen=True)
class BuildContext:
    """One build, resolved."""

    spec: BuildSpec
    backend: Backend
    versions: dict[str, str | None]
    toolchain_key: str
    toolchain_label: str
    plan: CompilePlan
    # The model's local directory (None: a hub model, downloaded by the resolve stage on a miss).
    model_dir: Path | None
    # The commit a hub model's revision resolves to (None for a local directory).
    revision: str | None
    config: ConfigKey

    @property
    def label(self) -> str:
        return self.spec.label

    @cached_property
    def model_config(self) -> dict[str, Any] | None:
        """config.json if it is on this machine (the local directory or the Hugging Face cache); no network."""
        from neuronc.model.files import find_model_config, read_model_config

        if self.model_dir is not None:
            return read_model_config(self.model_dir, required=False)
        return find_model_config(self.spec.model.id, self.revision or self.spec.model.revision, None)


def resolve_build(spec: BuildSpec, availability: Availability | None = None) -> BuildContext:
    """Resolve a build once: its backend (which must be available), plan, model location, revision and keys.

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
    plan = backend.plan(spec)
    model_dir = spec_model_dir(spec)
    revision = None if model_dir is not None else resolve_revision(spec.model.id, spec.model.revision)
    return BuildContext(
        spec=spec,
        backend=backend,
        versions=versions,
        toolchain_key=toolchain_key(versions),
        toolchain_label=toolchain_label(spec.backend, versions),
        plan=plan,
        model_dir=model_dir,
        revision=revision,
        config=config_key(spec, resolved_revision=revision, model_dir=model_dir),
    )
