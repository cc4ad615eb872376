"""What a store returns: typed records shared by the local and the remote store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.jsonfile import JsonFields

if TYPE_CHECKING:
    from neuronc.bundle import Manifest, VerifyReport


class ProbeStatus(StrEnum):
    """Whether a store holds a key, judged without downloading anything."""

    HIT = "hit"
    MISS = "miss"
    OTHER_TOOLCHAIN = "other-toolchain"  # the config is stored, built with another toolchain


@dataclass(frozen=True)
class Probe:
    """``BundleStore.probe``: a key's status, where the bundle is, and the toolchains stored for its config."""

    status: ProbeStatus
    store: str
    location: str | None = None
    other_toolchains: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "store": self.store,
            "location": self.location,
            "other_toolchains": list(self.other_toolchains),
        }


@dataclass(frozen=True)
class StoreEntry:
    """One complete bundle in a store: where it is (a directory or a URL) and its manifest."""

    location: str
    rel: str  # <model-slug>/<toolchain-label>/<config-hash[:16]>, the same in every store
    manifest: Manifest
    size: int

    @property
    def key(self) -> str:
        return self.manifest.config_hash[:12]

    @property
    def toolchain_label(self) -> str:
        return self.rel.split("/")[-2]

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        m = self.manifest
        return {
            "key": self.key,
            "config_hash": m.config_hash,
            "toolchain_key": m.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "model": m.model_id,
            "backend": m.backend,
            "target": m.target,
            "size": self.size,
            "created_at": m.created_at,
            "age_seconds": age_seconds(m.created_at, now),
            "path": self.location,
        }


@dataclass(frozen=True)
class LocalEntry(StoreEntry):
    """A bundle in a local store; ``path`` is its directory."""

    path: Path


def age_seconds(created_at: str, now: float | None = None) -> float | None:
    """Seconds since an ISO-8601 timestamp (naive means UTC); None if it does not parse."""
    try:
        created = datetime.fromisoformat(created_at)
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return round((now if now is not None else time.time()) - created.timestamp(), 1)


@dataclass(frozen=True)
class Removed(JsonFields):
    """One thing ``gc`` or ``repair`` removed."""

    path: str
    bytes: int
    reason: str


@dataclass
class GcReport:
    """What ``gc`` removed and how many bytes that freed; ``kept_young``: unreferenced objects in their grace period."""

    removed: list[Removed] = field(default_factory=list)
    kept_young: int = 0

    @property
    def bytes_freed(self) -> int:
        return sum(r.bytes for r in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes_freed": self.bytes_freed,
            "removed": [r.to_json() for r in self.removed],
            "kept_young": self.kept_young,
        }


class RepairAction(StrEnum):
    """What ``repair`` did to one stored bundle."""

    OK = "ok"  # it verified: nothing to do
    REPAIRED = "repaired"  # damaged objects were uploaded again from a verified local copy
    DROPPED = "dropped"  # damaged objects and the manifests that name them were removed


@dataclass(frozen=True)
class Verified:
    """``BundleStore.verify``: one stored bundle, every file checked against its manifest."""

    entry: StoreEntry
    report: VerifyReport

    @property
    def ok(self) -> bool:
        return self.report.ok


@dataclass
class Repair:
    """``BundleStore.repair``: what was found and done for one bundle."""

    entry: StoreEntry
    action: RepairAction
    problems: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)  # objects uploaded again (sha256)
    removed: list[Removed] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.entry.to_json(),
            "action": str(self.action),
            "problems": list(self.problems),
            "uploaded": list(self.uploaded),
            "removed": [r.to_json() for r in self.removed],
        }


__all__ = [
    "GcReport",
    "LocalEntry",
    "Probe",
    "ProbeStatus",
    "Removed",
    "Repair",
    "RepairAction",
    "StoreEntry",
    "Verified",
    "age_seconds",
]
