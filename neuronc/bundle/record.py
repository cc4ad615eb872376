"""What the pipeline hands the bundle writer: one typed ``BuildRecord`` per bundle.

The writer adds what only it knows (the files it hashed, the stages it timed, when and where) and
turns the record into ``manifest.json``. Graphs, shards, stages and the weights source are the
manifest's own models (``Graph``, ``Shard``, ``Stage``, ``WeightsSource``), so a record is checked as
it is made and becomes a ``Manifest`` without a trip through a dict.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from neuronc.bundle._manifest import SCHEMA_VERSION, FileEntry, Graph, HostInfo, Manifest, Shard, Stage, WeightsSource

if TYPE_CHECKING:
    from neuronc.keys import ConfigKey
    from neuronc.spec import BuildSpec


@dataclass(frozen=True)
class BuildRecord:
    """Everything the manifest says about one build that the writer cannot find out itself."""

    backend: str
    target: str
    # The normalised build spec (``BuildSpec.normalized()``).
    profile: Mapping[str, Any]
    config_hash: str
    hashed_fields: Sequence[str]
    hashed_inputs: Mapping[str, Any]
    toolchain: Mapping[str, str | None]
    # The store's readable name for the toolchain (``neuronc.keys.toolchain_label``).
    toolchain_label: str | None = None
    graphs: Sequence[Graph] = ()
    shards: Sequence[Shard] = ()
    weights: WeightsSource | None = None
    stages: Sequence[Stage] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    neuronc_version: str | None = None
    created_at: str | None = None
    host: HostInfo | None = None

    @classmethod
    def for_build(
        cls,
        spec: BuildSpec,
        key: ConfigKey,
        toolchain: Mapping[str, str | None],
        *,
        toolchain_label: str | None = None,
        graphs: Sequence[Graph] = (),
        shards: Sequence[Shard] = (),
        weights: WeightsSource | None = None,
        stages: Sequence[Stage] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> BuildRecord:
        """A record for ``spec`` under ``key``: backend, target and profile from the spec."""
        return cls(
            backend=spec.backend,
            target=str(spec.target),
            profile=spec.normalized(),
            config_hash=key.hash,
            hashed_fields=tuple(key.fields),
            hashed_inputs=dict(key.inputs),
            toolchain=dict(toolchain),
            toolchain_label=toolchain_label,
            graphs=tuple(graphs),
            shards=tuple(shards),
            weights=weights,
            stages=tuple(stages),
            extra=dict(extra or {}),
        )


def host_info() -> HostInfo:
    return HostInfo(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        machine=platform.machine(),
        python=platform.python_version(),
    )


def record_manifest(
    record: BuildRecord, files: Mapping[str, FileEntry], recorded_stages: Sequence[Stage] = ()
) -> Manifest:
    """The manifest of a record, the files, and the stages timed while writing (validated as built)."""
    from neuronc import __version__
    from neuronc.keys import toolchain_key

    toolchain = dict(record.toolchain)
    return Manifest(
        schema_version=SCHEMA_VERSION,
        neuronc_version=record.neuronc_version or __version__,
        created_at=record.created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        host=record.host if record.host is not None else host_info(),
        backend=record.backend,
        target=record.target,
        profile=dict(record.profile),
        config_hash=record.config_hash,
        hashed_fields=list(record.hashed_fields),
        hashed_inputs=dict(record.hashed_inputs),
        toolchain=toolchain,
        toolchain_key=toolchain_key(toolchain),
        toolchain_label=record.toolchain_label,
        graphs=list(record.graphs),
        shards=list(record.shards),
        weights=record.weights,
        stages=[*record.stages, *recorded_stages],
        # Sort by path so the manifest is byte-identical across runs.
        files=[files[p] for p in sorted(files)],
        extra=dict(record.extra),
    )


__all__ = ["BuildRecord", "host_info", "record_manifest"]
