"""One part of a serving stack's key, as the pre-boot verdict judges it.

A part is *compared* (the bundle's value against the serving side's: same or differs), *unchecked*
(the serving side's value is not known: why, and how to check it) or *pinned* (neuronc's own serve
files set it to the bundle's value: not evidence about the image; when the bundle is served with
another command it is unchecked). Nothing here imports another part of neuronc but the error tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict


class Status(StrEnum):
    SAME = "same"
    DIFFERS = "differs"
    UNCHECKED = "unchecked"
    PINNED = "pinned"


class PartJSON(TypedDict):
    field: str
    bundle: str
    image: str
    checked: bool
    status: str
    note: str


NOT_RECORDED = "not recorded"
UNKNOWN = "unknown"
PINNED_BY = "pinned by the serve files `neuronc deploy` writes (unchecked if you serve it with your own command)"


@dataclass(frozen=True)
class Part:
    field: str
    bundle: str
    image: str
    status: Status
    # compared: where the serving side's value comes from, when not the side's own source; unchecked:
    # why, and how to check it; pinned: what pins it.
    note: str = ""

    @property
    def checked(self) -> bool:
        return self.status in (Status.SAME, Status.DIFFERS)

    @property
    def differs(self) -> bool:
        return self.status is Status.DIFFERS

    def line(self) -> str:
        """``field: bundle X, image Y`` (and the note: why it is unchecked and how to check it)."""
        text = f"{self.field}: bundle {self.bundle}, image {self.image}"
        return f"{text} ({self.note})" if self.note and self.status is Status.UNCHECKED else text

    def to_json(self) -> PartJSON:
        return {
            "field": self.field,
            "bundle": self.bundle,
            "image": self.image,
            "checked": self.checked,
            "status": self.status.value,
            "note": self.note,
        }


def compare(field: str, bundle: str, image: str, note: str = "") -> Part:
    return Part(field, bundle, image, Status.SAME if bundle == image else Status.DIFFERS, note)


def unchecked(field: str, bundle: str, image: str, why: str) -> Part:
    return Part(field, bundle, image, Status.UNCHECKED, why)


def pinned(field: str, value: str, by: str = PINNED_BY) -> Part:
    return Part(field, value, value, Status.PINNED, by)


def text(value: object) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def env_text(env: dict[str, str] | None) -> str:
    if env is None:
        return UNKNOWN
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"


__all__ = [
    "NOT_RECORDED",
    "PINNED_BY",
    "UNKNOWN",
    "Part",
    "PartJSON",
    "Status",
    "compare",
    "env_text",
    "pinned",
    "text",
    "unchecked",
]
