"""A build's identity as the process that selected it resolved it: what travels with a build to
another process (a Ray task), so that the process that builds it never resolves it again. It is
derived from the ``ResolvedBuild`` (``BuildIdentity.of``) and turns back into one on the node
(``BuildIdentity.resolve``), checked to have the same key.

The Ray driver resolves each build once (``resolve_build``): the commit a hub model's revision
points at, the config key and the toolchain it expects. A node builds at that commit and checks that
its own view gives the same key: a node whose toolchain (or environment: ``NEURON_CC_FLAGS``, the
model's local files) would give another key fails that build with exit 5, naming what differs,
instead of building and publishing a key the driver never selected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neuronc.backends.base import Availability
from neuronc.build import Build
from neuronc.errors import EnvironmentIncompatibleError
from neuronc.pipeline.context import ResolvedBuild


@dataclass(frozen=True)
class BuildIdentity:
    """The selecting process's resolution of one build."""

    # The commit a hub model's revision resolved to (None: a local model directory).
    revision: str | None
    config_hash: str
    # The hashed inputs, to name the fields a node's key differs in.
    config_inputs: Mapping[str, Any]
    toolchain_key: str
    # The toolchain versions the key expects; only those the selecting process knows (where its
    # backend is not installed, the packages it lacks are the node's to say).
    toolchain: Mapping[str, str | None]
    # Whether ``toolchain`` is the backend's whole toolchain (its backend is installed there).
    toolchain_complete: bool = field(default=True)

    @classmethod
    def of(cls, ctx: ResolvedBuild) -> BuildIdentity:
        """The identity of a resolved build (raises the resolution error, exit 2, for an unresolved one)."""
        key = ctx.config
        complete = ctx.availability.available
        versions = dict(ctx.versions) if complete else {k: v for k, v in ctx.versions.items() if v is not None}
        return cls(ctx.revision, key.hash, dict(key.inputs), ctx.toolchain_key, versions, complete)

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "config_hash": self.config_hash,
            "config_inputs": dict(self.config_inputs),
            "toolchain_key": self.toolchain_key,
            "toolchain": dict(self.toolchain),
            "toolchain_complete": self.toolchain_complete,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildIdentity:
        return cls(
            revision=data.get("revision"),
            config_hash=str(data["config_hash"]),
            config_inputs=dict(data.get("config_inputs") or {}),
            toolchain_key=str(data["toolchain_key"]),
            toolchain={str(k): (None if v is None else str(v)) for k, v in (data.get("toolchain") or {}).items()},
            toolchain_complete=bool(data.get("toolchain_complete", True)),
        )

    def resolve(self, build: Build, *, availability: Availability | None = None) -> ResolvedBuild:
        """``spec`` resolved here at this identity's commit (nothing is asked of the Hub or the local
        refs), checked against it (``check``). Raises what ``resolve_build`` raises when it is strict."""
        from neuronc.keys import spec_model_dir
        from neuronc.pipeline.context import resolve_build

        spec = build.spec
        if self.revision is None and spec_model_dir(spec) is None:
            msg = f"{spec.label}: the model directory {spec.model.id} is not on this node"
            hint = "a local model must be at the same path on every node (a shared mount), or use a Hub model"
            raise EnvironmentIncompatibleError(msg, hint=hint)
        ctx = resolve_build(build, availability=availability, commit=self.revision)
        self.check(ctx)
        return ctx

    def toolchain_differences(self, versions: Mapping[str, str | None]) -> list[tuple[str, str | None, str | None]]:
        """(package, expected, here) for each toolchain package ``versions`` has otherwise."""
        names = list(dict.fromkeys([*self.toolchain, *(versions if self.toolchain_complete else ())]))
        return [(n, self.toolchain.get(n), versions.get(n)) for n in names if self.toolchain.get(n) != versions.get(n)]

    def check(self, ctx: ResolvedBuild, where: str = "this node") -> None:
        """EnvironmentIncompatibleError (exit 5) unless ``ctx`` is this build: the same config key and,
        for every package this identity knows, the same toolchain version."""
        from neuronc.keys import canonical_json, diff_inputs

        short = self.config_hash[:12]
        differing = self.toolchain_differences(ctx.versions)
        if differing:
            names = ", ".join(name for name, _, _ in differing)
            msg = f"{ctx.label}: {where} has another toolchain than the one key {short} was selected for: {names}"
            details = [
                f"{name}: expected {want or 'not installed'}, here {got or 'not installed'}"
                for name, want, got in differing
            ]
            hint = (
                "run the build where the selecting host's toolchain is installed (an SDK-release label in "
                "--ray-resources, the cluster's image), or select it where the nodes' toolchain is"
            )
            raise EnvironmentIncompatibleError(msg, details=details, hint=hint)
        key = ctx.config
        if key.hash != self.config_hash:
            diffs = diff_inputs(self.config_inputs, key.inputs)
            names = ", ".join(str(d["field"]) for d in diffs) or "the hashed inputs"
            msg = f"{ctx.label}: {where} would build config {key.short}, not the selected {short}: {names} differ"
            details = [f"{d['field']}: selected {canonical_json(d['a'])}, here {canonical_json(d['b'])}" for d in diffs]
            hint = "give the nodes the selecting host's environment (NEURON_CC_FLAGS, the model's files)"
            raise EnvironmentIncompatibleError(msg, details=details, hint=hint)


__all__ = ["BuildIdentity"]
