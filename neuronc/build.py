"""A build: one validated ``BuildSpec`` and the ``Backend`` that compiles it, typed together.

The profile loader makes every ``Build`` (it looks the backend up once, where it checks the
profile's backend fields). Everything below takes the ``Build`` (or the resolved build made from it,
``neuronc.pipeline.context.ResolvedBuild``) and reads ``build.backend``; nothing below looks a
backend up by a spec's name again. A spec that crosses a process boundary as JSON (a Ray task's
payload) becomes a ``Build`` again in exactly one function: ``Build.received``.

A bundle read from disk is not a build: its manifest's backend is resolved by
``neuronc.backends.backend_for_manifest``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from neuronc.backends.base import Backend
from neuronc.spec import BuildSpec


@dataclass(frozen=True)
class Build:
    """One build of a profile: what to compile and the backend that compiles it."""

    spec: BuildSpec
    backend: Backend

    @property
    def label(self) -> str:
        return self.spec.label

    def with_spec(self, spec: BuildSpec) -> Build:
        """This build with ``spec`` (a copy with fields changed, e.g. ``shown_as``), the same backend."""
        return dataclasses.replace(self, spec=spec)

    @classmethod
    def received(cls, spec: BuildSpec) -> Build:
        """The build of a spec that arrived without its backend (a Ray task's JSON payload, a test):
        the one place below the profile loader that looks a build's backend up by name."""
        from neuronc.backends import resolve_backend

        return cls(spec, resolve_backend(spec.backend))


__all__ = ["Build"]
