"""A build resolved once (``ResolvedBuild``): its ``Build`` (spec and backend), toolchain, where the
model is, the commit it resolves to, the config key (graphs key, weights key, bundle key), and
(when needed) the plan.

``resolve_build`` is the one place a build's key is worked out: ``compile``, ``compile --only``,
``plan``, ``matrix``, ``validate`` and ``hash`` all call it, so they agree on every build's key.
Every later stage and executor receives the resolved build; none of them looks the backend up or
resolves anything again. What a Ray task receives is derived from it (``BuildIdentity.of``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from neuronc.backends.base import Availability, Backend, CompilePlan
from neuronc.build import Build
from neuronc.errors import BackendUnavailableError, CheckpointError
from neuronc.keys import ConfigKey
from neuronc.spec import BuildSpec

UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class ResolvedBuild:
    """One build, resolved."""

    build: Build
    availability: Availability
    versions: dict[str, str | None]
    toolchain_key: str
    toolchain_label: str
    # The model's local directory (None: a hub model, downloaded by the resolve stage on a miss).
    model_dir: Path | None
    # The commit a hub model's revision resolves to (None for a local directory, or unresolved).
    revision: str | None
    # None when the hub model's revision cannot be resolved here (offline, not in the HF cache).
    config_key: ConfigKey | None
    # Why the revision could not be resolved (with config_key None).
    unresolved: CheckpointError | None = None

    @property
    def spec(self) -> BuildSpec:
        return self.build.spec

    @property
    def backend(self) -> Backend:
        return self.build.backend

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def config(self) -> ConfigKey:
        """The config key; raises the resolution error (exit 2) for an unresolved build."""
        if self.config_key is None:
            assert self.unresolved is not None
            raise self.unresolved
        return self.config_key

    @property
    def key_text(self) -> str:
        """The full config hash, or ``unresolved``: what `plan` and `matrix` print."""
        return self.config_key.hash if self.config_key is not None else UNRESOLVED

    def key_at(self, commit: str) -> ConfigKey:
        """This hub model build's key had its revision resolved to ``commit`` instead (an earlier commit
        of a ref that moved since): the same backend inputs (keyed environment, weights binding),
        config.json at that commit. One of the two places (with ``resolve_build``) that call
        ``keys.config_key``: a new key input is passed here and there, in this module only."""
        from neuronc.keys import config_key

        key = self.config_key
        return config_key(
            self.spec,
            flags_mode=self.backend.toolchain.compiler_flags_mode,
            model_dir=None,
            revision=commit,
            environment=key.inputs.get("environment") if key is not None else None,
            model_config=hub_model_config(self.spec.model.id, commit),
            embeds_weights=key.embeds_weights if key is not None else None,
        )

    @cached_property
    def plan(self) -> CompilePlan:
        """The graphs the backend compiles (the profile loader checked the spec): computed once, when asked."""
        return self.backend.plan(self.spec)

    @cached_property
    def model_config(self) -> dict[str, Any] | None:
        """config.json at the resolved commit, if it is on this machine (the local directory or the
        Hugging Face cache's snapshot of that commit); no network.

        The one place a build is sized from: `plan`, `matrix`, the Ray driver's placement and
        `compile`'s pre-flight all read it here, so none of them sizes a build from another commit
        than the one its key names (a moved ``main`` in the local refs included).
        """
        from neuronc.model.files import find_model_config, read_model_config

        if self.model_dir is not None:
            return read_model_config(self.model_dir, required=False)
        if self.revision is None:
            return None  # unresolved: no commit to read it at (the revision as written may be another)
        return find_model_config(self.spec.model.id, self.revision, None)


def resolve_build(
    build: Build,
    *,
    availability: Availability | None = None,
    strict: bool = True,
    environ: Mapping[str, str] | None = None,
    commit: str | None = None,
) -> ResolvedBuild:
    """Resolve a build once: its backend, toolchain, model location, revision and config key.

    ``strict`` (compile): the backend must be available (exit 5) and a hub model's revision must
    resolve (exit 2). Not strict (plan, matrix, validate): an unavailable backend's toolchain is the
    versions installed here, and a revision that cannot be resolved leaves the key ``unresolved``
    rather than guessing one. ``environ`` stands for ``os.environ`` where compiler flags
    (``NEURON_CC_FLAGS``) and the backend's keyed variables (``Backend.toolchain.keyed_environment``) are
    read. Imports neither torch nor transformers: a store hit is decided from this.
    """
    from neuronc.keys import config_key, spec_model_dir, toolchain_key, toolchain_label
    from neuronc.model.source import resolve_revision

    spec, backend = build.spec, build.backend
    if availability is None:
        availability = backend.toolchain.availability()
    if strict and not availability.available:
        msg = f"backend '{spec.backend}' cannot compile on this machine: {availability.reason}"
        raise BackendUnavailableError(msg, hint=availability.install_hint)
    versions = backend.toolchain.build_versions(spec, availability)
    model_dir = spec_model_dir(spec)
    revision: str | None = None
    unresolved: CheckpointError | None = None
    key: ConfigKey | None = None
    if model_dir is None and commit is not None:
        revision = commit
    elif model_dir is None:
        try:
            revision = resolve_revision(spec.model.id, spec.model.revision)
        except CheckpointError as exc:
            if strict:
                raise
            unresolved = exc
    if unresolved is None:
        from neuronc.backends.weights_binding import weights_binding_of

        environment = backend.toolchain.keyed_environment(spec, versions, os.environ if environ is None else environ)
        key = config_key(
            spec,
            flags_mode=backend.toolchain.compiler_flags_mode,
            model_dir=model_dir,
            revision=revision,
            environ=environ,
            environment=environment,
            model_config=hub_model_config(spec.model.id, revision) if model_dir is None else None,
            embeds_weights=weights_binding_of(backend).embeds,
        )
    return ResolvedBuild(
        build=build,
        availability=availability,
        versions=versions,
        toolchain_key=toolchain_key(versions),
        toolchain_label=toolchain_label(spec.backend, backend.toolchain.toolchain_package, versions),
        model_dir=model_dir,
        revision=revision,
        config_key=key,
        unresolved=unresolved,
    )


def hub_model_config(model_id: str, commit: str | None) -> dict[str, Any] | None:
    """A hub model's config.json at ``commit``: from the Hugging Face cache, else fetched (that one
    small file, never the weights) unless offline; None when neither can give it (the graphs key is
    then the commit's: correct, shared with no other checkpoint)."""
    from neuronc.model.files import find_model_config

    if commit is None:
        return None
    found = find_model_config(model_id, commit, None)
    if found is not None:
        return found
    from neuronc.model.source import fetch_config

    return fetch_config(model_id, commit)
