"""Why a key from `neuronc matrix` matches no build any more: the hub model's ref has moved.

A matrix entry's key names the commit the model's revision resolved to when the matrix ran. A
`compile --only KEY` job that runs later without the entry's ``--revision`` resolves the revision
again; if ``main`` has moved meanwhile, the key no longer matches. This finds, for each hub model
whose revision is a ref (a branch or tag, ``main`` when none is given), the earlier commit of the
ref at which the build's key is the one asked for, so the error can say which ref moved, from which
commit to which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from neuronc.pipeline.context import ResolvedBuild


@dataclass(frozen=True)
class MovedRef:
    """A ``--only`` key that is a build's key at an earlier commit of its model's ref."""

    key: str
    label: str
    model: str
    ref: str
    old: str
    new: str

    def describe(self) -> str:
        return f"{self.model}@{self.ref} moved from {self.old} to {self.new}"

    def detail(self) -> str:
        return f"{self.key}: {self.label} at {self.model}@{self.old} ({self.ref} is {self.new} now)"


def moved_refs(contexts: Sequence[ResolvedBuild], keys: Sequence[str]) -> list[MovedRef]:
    """For each of ``keys`` (config hash prefixes no build matches), the build whose key it was at an
    earlier commit of its model's ref, if any (the Hub's history of the ref when it is reachable,
    and the local Hugging Face cache's snapshots)."""
    from neuronc.model.hfcache import COMMIT_RE
    from neuronc.model.source import known_commits

    found: list[MovedRef] = []
    left = list(keys)
    history: dict[tuple[str, str], list[str]] = {}
    for ctx in contexts:
        spec = ctx.spec
        ref = spec.model.revision or "main"
        if not left or ctx.model_dir is not None or ctx.revision is None or COMMIT_RE.fullmatch(ref):
            continue
        commits = history.setdefault((spec.model.id, ref), known_commits(spec.model.id, ref))
        for commit in commits:
            if commit == ctx.revision:
                continue
            key = ctx.key_at(commit)
            hits = [k for k in left if key.hash.startswith(k)]
            for k in hits:
                found.append(MovedRef(k, ctx.label, spec.model.id, ref, commit, ctx.revision))
                left.remove(k)
    return found


__all__ = ["MovedRef", "moved_refs"]
