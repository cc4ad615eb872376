"""What finishing a bundle did: the typed outcome of ``BundleWriter.finish`` and the hook that produces it.

A writer first seals its bundle at its local destination (manifest last, atomic rename); a store may
then *publish* it somewhere else (a remote store uploads it). The store passes a ``PublishHook`` to
the writer, and the writer records what the hook returns as ``writer.published``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class PublishStatus(StrEnum):
    """How a finished bundle came to be the stored one."""

    PUBLISHED = "published"  # this writer's bundle is the stored bundle
    EXISTS = "exists"  # another writer (another host) published the key first: its bundle is used


@dataclass(frozen=True)
class Published:
    """The outcome of ``BundleWriter.finish``.

    ``path`` is the local bundle directory to use. When ``status`` is ``EXISTS`` another host won the
    race to publish this key: the local copy was replaced by the published bundle (same keys, other
    bytes, since compiles are not bit-reproducible) and ``message`` says so.
    """

    path: Path
    status: PublishStatus
    location: str  # where the bundle is stored: a directory or a URL
    message: str | None = None

    @property
    def lost_race(self) -> bool:
        return self.status is PublishStatus.EXISTS

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "status": str(self.status), "location": self.location, "message": self.message}


# Called with the sealed local bundle; returns what publishing it did (or raises: the local bundle stays).
PublishHook = Callable[[Path], Published]


__all__ = ["PublishHook", "PublishStatus", "Published"]
