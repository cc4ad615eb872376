"""Bench results stored with the bundles in the store: by bundle key, host or instance, scenario, GuideLLM version.

One small object per bundle beside the store's bundles (``BundleStore.write_marker``, so local and
remote stores alike): ``bench-<config hash>-<toolchain key>``, a JSON document whose ``entries`` are
keyed ``<kind>|<host>|<scenario key>|<guidellm version>``. ``kind`` is ``sweep`` (the rate sweep: its
scenario is the traffic and the sweep's size and duration) or ``goodput`` (GuideLLM's goodput search:
its scenario also holds the SLO's objectives), so a new SLO re-runs only the search. A bench finds an
entry and measures nothing (``--rerun`` measures again and replaces it). ``neuronc inspect`` lists them.
The bundle's own files are never written: its manifest and signature stay valid.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from neuronc.benchmark.report import GoodputSearch, Point

if TYPE_CHECKING:
    from neuronc.bundle import Manifest
    from neuronc.store import BundleStore

SCHEMA = 1
PREFIX = "bench"


def bundle_key(config_hash: str, toolchain_key: str) -> str:
    return f"{config_hash}-{toolchain_key}"


def marker_name(key: str) -> str:
    return f"{PREFIX}-{key}"


def cpu_host() -> str:
    """This host, for a CPU bench: its name, its processor and how many cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return f"cpu:{socket.gethostname()}:{platform.machine()}:{cores}c"


def scenario_key(scenario: dict[str, Any]) -> str:
    """SHA-256 (16 hex digits) of the scenario's canonical JSON."""
    text = json.dumps(scenario, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Measured:
    """One stored GuideLLM run of one bundle."""

    kind: str  # sweep | goodput
    host: str
    scenario: dict[str, Any]
    guidellm_version: str
    points: tuple[Point, ...]
    goodput_search: GoodputSearch | None
    time_to_ready_s: float | None
    measured_at: str

    @property
    def entry_key(self) -> str:
        return entry_key(self.kind, self.host, self.scenario, self.guidellm_version)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "host": self.host,
            "scenario": self.scenario,
            "scenario_key": scenario_key(self.scenario),
            "guidellm_version": self.guidellm_version,
            "measured_at": self.measured_at,
            "time_to_ready_s": self.time_to_ready_s,
            "points": [p.to_json() for p in self.points],
            "goodput_search": None if self.goodput_search is None else self.goodput_search.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measured:
        search = data.get("goodput_search")
        return cls(
            kind=str(data["kind"]),
            host=str(data["host"]),
            scenario=dict(data["scenario"]),
            guidellm_version=str(data["guidellm_version"]),
            points=tuple(Point.from_json(p) for p in data["points"]),
            goodput_search=None if search is None else GoodputSearch.from_json(search),
            time_to_ready_s=data.get("time_to_ready_s"),
            measured_at=str(data.get("measured_at", "")),
        )


def entry_key(kind: str, host: str, scenario: dict[str, Any], guidellm_version: str) -> str:
    return f"{kind}|{host}|{scenario_key(scenario)}|{guidellm_version}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_entries(store: BundleStore, key: str) -> dict[str, dict[str, Any]]:
    """Every stored entry of bundle ``key`` (empty when none, or when the object is unreadable)."""
    try:
        raw = store.read_marker(marker_name(key))
    except NotImplementedError:
        return {}
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return {str(k): v for k, v in entries.items() if isinstance(v, dict)} if isinstance(entries, dict) else {}


def find(store: BundleStore, key: str, wanted: str) -> Measured | None:
    entry = load_entries(store, key).get(wanted)
    if entry is None:
        return None
    try:
        return Measured.from_json(entry)
    except (KeyError, TypeError, ValueError):
        return None  # written by another version: measured again


def save(store: BundleStore, key: str, measured: Measured) -> None:
    """Add (or replace) one entry of bundle ``key``. Read, change, write: two benches of one bundle at once
    may lose one of their entries (never corrupt the object: the write is atomic); it is measured again."""
    entries = load_entries(store, key)
    entries[measured.entry_key] = measured.to_json()
    document = {"schema": SCHEMA, "bundle_key": key, "entries": entries}
    store.write_marker(marker_name(key), (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())


class StoredRunJSON(TypedDict):
    """One stored GuideLLM run of a bundle, as ``inspect`` shows it."""

    kind: str
    host: str
    scenario_key: str
    scenario: dict[str, Any]
    guidellm_version: str
    measured_at: str
    time_to_ready_s: float | None
    benchmarks: int
    max_requests_per_second: float | None


def summary(store: BundleStore, config_hash: str, toolchain_key: str) -> list[StoredRunJSON]:
    """What ``inspect`` shows: per stored run, its kind, host, scenario, GuideLLM version, when, and its
    highest measured successful request rate (GuideLLM's own number)."""
    rows: list[StoredRunJSON] = []
    for entry in load_entries(store, bundle_key(config_hash, toolchain_key)).values():
        try:
            measured = Measured.from_json(entry)
        except (KeyError, TypeError, ValueError):
            continue  # written by another version: `bench` measures it again
        rates = [p.requests_per_second for p in measured.points]
        rows.append(
            {
                "kind": measured.kind,
                "host": measured.host,
                "scenario_key": scenario_key(measured.scenario),
                "scenario": measured.scenario,
                "guidellm_version": measured.guidellm_version,
                "measured_at": measured.measured_at,
                "time_to_ready_s": measured.time_to_ready_s,
                "benchmarks": len(measured.points),
                "max_requests_per_second": max(rates) if rates else None,
            }
        )
    return sorted(rows, key=lambda r: (r["measured_at"], r["kind"]))


def store_holding(bundle: Path, manifest: Manifest) -> BundleStore | None:
    """The local store ``bundle`` lies in (``<store>/<model>/<toolchain>/<hash>``, where that store would put
    this manifest's bundle), or None for a bundle outside a store (a copy, ``--out``)."""
    from neuronc.store import LocalStore

    resolved = bundle.resolve()
    if len(resolved.parents) < 3:
        return None
    store = LocalStore(resolved.parents[2])
    try:
        return store if store.path_for(manifest).resolve() == resolved else None
    except (OSError, ValueError):
        return None


__all__ = [
    "Measured",
    "StoredRunJSON",
    "bundle_key",
    "cpu_host",
    "entry_key",
    "find",
    "load_entries",
    "save",
    "scenario_key",
    "store_holding",
    "summary",
]
