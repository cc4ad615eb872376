"""Which sequence buckets a backend can compile: the rules ``neuronc buckets`` chooses within.

Each backend says, through ``Backend.rules.bucket_rules(spec)``, what a context-encoding bucket and a
token-generation bucket may be: at most a limit (``max_context_length`` / ``max_length``), a
multiple of some number, a largest bucket the backend always adds, or a fixed set (nothing to
choose). The default is the profile loader's own rule: any length up to the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BucketRule:
    """What one kind of bucket (context or token generation) may be for one build."""

    # No bucket above this (sequence.max_context_length for context, sequence.max_length for token).
    limit: int
    # Buckets below ``largest`` must be multiples of this.
    multiple: int = 1
    # The backend always compiles this bucket (and it is the largest): it counts as one graph.
    largest: int | None = None
    # The backend compiles exactly these buckets whatever the profile says: nothing to choose.
    fixed: tuple[int, ...] | None = None
    # The rule in words, with where it comes from.
    source: str = "any length up to the limit"

    def round_up(self, length: int) -> int | None:
        """The smallest bucket this rule allows that holds ``length`` tokens; None when none does."""
        if self.fixed is not None:
            return next((b for b in sorted(self.fixed) if b >= length), None)
        top = self.largest if self.largest is not None else self.limit
        if length > top:
            return None
        bucket = math.ceil(length / self.multiple) * self.multiple
        if self.largest is not None and bucket >= self.largest:
            return self.largest
        return bucket if bucket <= self.limit else None

    def allows(self, buckets: tuple[int, ...]) -> bool:
        """Whether a sorted bucket list obeys the rule (the forced largest present where there is one)."""
        if self.fixed is not None:
            return tuple(sorted(self.fixed)) == tuple(buckets)
        if not buckets or buckets[-1] > self.limit:
            return False
        if self.largest is not None and buckets[-1] != self.largest:
            return False
        below = buckets[:-1] if self.largest is not None else buckets
        return all(b % self.multiple == 0 for b in below)

    def to_json(self) -> dict[str, object]:
        return {
            "limit": self.limit,
            "multiple": self.multiple,
            "largest": self.largest,
            "fixed": list(self.fixed) if self.fixed is not None else None,
            "source": self.source,
        }


@dataclass(frozen=True)
class BucketRules:
    """The rules for a build's context-encoding buckets and its token-generation buckets."""

    context: BucketRule
    token: BucketRule


__all__ = ["BucketRule", "BucketRules"]
