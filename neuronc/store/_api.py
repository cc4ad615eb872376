"""``BundleStore``: what the pipeline and the CLI need from a store, local or remote.

Every store holds complete bundles keyed by (config hash, toolchain key) at the same relative path,
``<model-slug>/<toolchain-label>/<config-hash[:16]>``. Code above this package talks to a store only
through this interface (``open_store`` picks the implementation from a location).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import InvalidInputError
from neuronc.store._lock import KeyLock

if TYPE_CHECKING:
    from neuronc.bundle import BundleWriter, Manifest
    from neuronc.bundle.publish import Published
    from neuronc.store._records import GcReport, Probe, Repair, StoreEntry, Verified

HASH_PREFIX = 16
_HEX = re.compile(r"^[0-9a-f]+$")


def check_hex(value: str, what: str) -> str:
    """``value`` in lower case if it is hexadecimal; InvalidInputError (exit 2) otherwise."""
    value = value.lower()
    if not _HEX.match(value):
        msg = f"{what} must be hexadecimal, got {value!r}"
        raise InvalidInputError(msg)
    return value


def marker_rel(name: str) -> str:
    """Where marker ``name`` is in a store (``BundleStore.write_marker``); letters, digits, dashes, else exit 2."""
    if not name or not all(c.isalnum() or c == "-" for c in name):
        raise InvalidInputError(f"marker name {name!r}: letters, digits and dashes only")
    return f".neuronc/markers/{name}"


def key_name(config_hash: str, toolchain_key: str) -> str:
    """``<config[:16]>-<toolchain[:16]>``: one file name per key (locks, pending publishes)."""
    return f"{config_hash[:HASH_PREFIX]}-{toolchain_key[:HASH_PREFIX]}"


class BundleStore(ABC):
    """A store of complete bundles. Implemented by ``LocalStore`` (a directory) and ``RemoteStore`` (s3://, hf://).

    The pipeline's calls, in order: ``lookup`` (a hit is a local bundle directory); on a miss
    ``ensure_writable`` (before compiling), then ``lock``, ``lookup`` again, ``writer`` and
    ``writer.finish(fields)``, whose ``writer.published`` says whether this build's bundle was
    published or another host's was (``PublishStatus.EXISTS``). ``lookup`` and ``probe`` never
    write to the store (``--require-hit``, ``plan``).
    """

    @property
    @abstractmethod
    def location(self) -> str:
        """The store as people name it: a directory or a URL."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    # -- the pipeline ---------------------------------------------------------------------------
    @abstractmethod
    def lookup(self, config_hash: str, toolchain_key: str) -> Path | None:
        """The complete bundle for these full keys as a local directory, or None. Never writes to the store
        (a remote store downloads a hit into its local cache)."""

    @abstractmethod
    def locate(self, config_hash: str, toolchain_key: str) -> str | None:
        """Where the complete bundle for these full keys is (a directory or URL), or None; downloads nothing."""

    def probe(self, config_hash: str, toolchain_key: str) -> Probe:
        """Hit, miss or other-toolchain for a key, without downloading or writing anything."""
        from neuronc.store._records import Probe, ProbeStatus

        found = self.locate(config_hash, toolchain_key)
        if found is not None:
            return Probe(ProbeStatus.HIT, self.location, found)
        others = tuple(sorted({e.toolchain_label for e in self.find(config_hash)}))
        return Probe(ProbeStatus.OTHER_TOOLCHAIN if others else ProbeStatus.MISS, self.location, None, others)

    @contextlib.contextmanager
    def lock(
        self,
        config_hash: str,
        toolchain_key: str,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[KeyLock]:
        """Hold the per-key lock on this host: concurrent builders of one key compile once, the others wait and reuse.

        ``on_wait(holder)`` is called once if another process holds it; TimeoutError after ``timeout``.
        Once the lock is held, ``_after_lock`` runs under it (a remote store finishes an interrupted upload).
        """
        path = self.lock_path(check_hex(config_hash, "config hash"), check_hex(toolchain_key, "toolchain key"))
        key_lock = KeyLock(path)
        key_lock.acquire(timeout=timeout, on_wait=on_wait)
        try:
            self._after_lock(config_hash, toolchain_key)
            yield key_lock
        finally:
            key_lock.release()

    @abstractmethod
    def lock_path(self, config_hash: str, toolchain_key: str) -> Path:
        """The file of a key's lock on this host (hexadecimal keys, lower case)."""

    def _after_lock(self, config_hash: str, toolchain_key: str) -> None:  # noqa: B027 (a hook: no-op by default)
        """What the store does first once it holds a key's lock (nothing, unless a store says otherwise)."""

    @abstractmethod
    def writer(self, config_hash: str, toolchain_key: str, *, expected_bytes: int | None = None) -> BundleWriter:
        """A BundleWriter whose ``finish`` publishes into this store (call it while holding ``lock``)."""

    @abstractmethod
    def ensure_writable(self) -> None:
        """Raise (exit 5) unless the store is reachable and writable: run it before compiling."""

    @abstractmethod
    def publish(self, bundle_dir: str | os.PathLike[str], *, jobs: int | None = None) -> Published:
        """Copy a complete bundle into the store, checking it first (exit 4 if it is damaged)."""

    # -- seen from elsewhere (the nodes of a Ray cluster check they see the store the driver sees) ---
    def write_marker(self, name: str, data: bytes) -> None:
        """Write a small marker object ``name`` (letters, digits, dashes) beside the store's bundles."""
        raise NotImplementedError(f"{type(self).__name__} has no markers")

    def read_marker(self, name: str) -> bytes | None:
        """A marker's bytes, or None where this host does not see it."""
        raise NotImplementedError(f"{type(self).__name__} has no markers")

    def remove_marker(self, name: str) -> None:
        """Remove a marker (nothing if it is gone)."""
        raise NotImplementedError(f"{type(self).__name__} has no markers")

    @abstractmethod
    def publish_signature(self, bundle_dir: str | os.PathLike[str]) -> str | None:
        """Store the signature of a local copy of a stored bundle (``bundle.sig``) with the stored bundle.

        The stored bundle is the one with the same manifest bytes; returns where the signature now
        is, or None when the copy has no signature or the store has no such bundle.
        """

    @abstractmethod
    def fetch(self, key: str) -> Path:
        """The one bundle ``key`` names as a local directory, with its signature if it has one
        (a remote store downloads and verifies it into its cache). Exit 2 if the key names none or several."""

    # -- maintenance ----------------------------------------------------------------------------
    @abstractmethod
    def list(self) -> builtins.list[StoreEntry]:
        """Every complete bundle, newest first."""

    @abstractmethod
    def gc(self) -> GcReport:
        """Remove what no complete bundle needs (leftovers of interrupted writes, stale locks)."""

    @abstractmethod
    def verify(self, key: str, *, jobs: int | None = None) -> builtins.list[Verified]:
        """Check every file of the bundles ``key`` names against their manifests (reads every byte)."""

    @abstractmethod
    def repair(self, key: str, *, source: str | os.PathLike[str] | None = None) -> builtins.list[Repair]:
        """Verify the bundles ``key`` names and mend or drop the damaged ones.

        A damaged file is replaced from ``source`` (a bundle directory) or a verified local copy when
        one has the right bytes; otherwise the bundle is dropped, so that the next compile rebuilds it.
        """

    @abstractmethod
    def discard(self, entry: StoreEntry) -> None:
        """Remove one stored bundle (``remove`` checks the key first; a repair discards a broken one)."""

    def find(self, key: str) -> builtins.list[StoreEntry]:
        """Bundles matching a key: a config-hash prefix (4+ hex), ``HASH@TOOLCHAIN`` prefixes, or a relative path."""
        key = key.strip()
        entries = self.list()
        if "/" in key:
            rel = key.strip("/")
            return [e for e in entries if e.rel == rel or e.location.rstrip("/") == key.rstrip("/")]
        config, _, toolchain = key.lower().partition("@")
        if len(config) < 4 or not _HEX.match(config) or (toolchain and not _HEX.match(toolchain)):
            msg = f"'{key}' is not a key (a config-hash prefix of 4+ hex digits, optionally @toolchain-prefix)"
            raise InvalidInputError(msg, hint="see `neuronc store list`")
        return [
            e
            for e in entries
            if e.manifest.config_hash.startswith(config) and e.manifest.toolchain_key.startswith(toolchain)
        ]

    def select(self, key: str, *, all_matches: bool = False) -> builtins.list[StoreEntry]:
        """``find``, raising (exit 2) if the key names nothing, or several bundles without ``all_matches``."""
        matches = self.find(key)
        if not matches:
            msg = f"no bundle in {self.location} matches '{key}'"
            raise InvalidInputError(msg, hint="see `neuronc store list`")
        if len(matches) > 1 and not all_matches:
            msg = f"'{key}' matches {len(matches)} bundles"
            details = [f"{e.manifest.config_hash[:16]}@{e.manifest.toolchain_key[:8]}  {e.location}" for e in matches]
            raise InvalidInputError(msg, details=details, hint="give a longer prefix, HASH@TOOLCHAIN, or --all")
        return matches

    def remove(self, key: str, *, all_matches: bool = False) -> builtins.list[StoreEntry]:
        """Remove the bundle(s) a key names; raise if it names none, or several without ``all_matches``."""
        matches = self.select(key, all_matches=all_matches)
        for entry in matches:
            self.discard(entry)
        return matches

    def nearest(
        self,
        hashed_inputs: Mapping[str, Any],
        *,
        toolchain_key: str | None = None,
        backend: str | None = None,
    ) -> Nearest | None:
        """The stored bundle whose hashed inputs differ from ``hashed_inputs`` in the fewest fields."""
        from neuronc.keys import diff_inputs

        best: tuple[tuple[int, int, str], Nearest] | None = None
        for entry in self.list():
            m = entry.manifest
            if backend is not None and m.backend != backend:
                continue
            differences = diff_inputs(m.hashed_inputs, dict(hashed_inputs))
            same_toolchain = toolchain_key is None or m.toolchain_key == toolchain_key
            rank = (len(differences), 0 if same_toolchain else 1, m.config_hash)
            if best is None or rank < best[0]:
                best = (rank, Nearest(entry.location, m, differences, same_toolchain))
        return best[1] if best else None


@dataclass(frozen=True)
class Nearest:
    """The stored bundle closest to a missed key, and what differs."""

    location: str
    manifest: Manifest
    differences: list[dict[str, Any]]
    same_toolchain: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.location,
            "config_hash": self.manifest.config_hash,
            "toolchain_key": self.manifest.toolchain_key,
            "same_toolchain": self.same_toolchain,
            "differences": self.differences,
        }


__all__ = ["HASH_PREFIX", "BundleStore", "Nearest", "check_hex", "key_name"]
