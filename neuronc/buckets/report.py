"""One build's buckets judged against traffic: the current profile's, the suggestion, the curve K = 1..8.

Padding is counted per request as if each ran alone (batch rows are padded to the batch's longest,
which depends on how a server groups requests: not modelled):

- context encoding: a prompt of L tokens runs in the smallest context bucket >= L and pads
  ``bucket - L`` tokens; a prompt above the largest bucket is refused;
- token generation: generating M tokens after an L-token prompt runs M - 1 decode steps, at KV
  lengths L+1 .. L+M-1, each in the smallest token bucket (KV window) that holds it, padding
  ``bucket - length`` positions; a request with L + M above the largest token bucket is truncated
  (its steps past the largest bucket do not run).

Requests whose prompt is above ``max_context_length`` can run in no build: they are left out of
the token-generation histogram and counted beyond the largest bucket for every choice.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neuronc.buckets.solve import Choice, Padding, choose, padding
from neuronc.buckets.traffic import Request, Traffic

if TYPE_CHECKING:
    from neuronc.backends.base import Backend
    from neuronc.backends.bucket_rules import BucketRule, BucketRules
    from neuronc.spec import BuildSpec

CURVE_MAX = 8
DEFAULT_MAX_GRAPHS = 4


def context_histogram(requests: Sequence[Request]) -> Counter[int]:
    return Counter(r.prompt_tokens for r in requests)


def token_histogram(requests: Sequence[Request], context_limit: int, limit: int) -> Counter[int]:
    """Decode steps per KV length (L+1 .. L+M-1, at most ``limit``), by difference array."""
    steps = [0] * (limit + 2)
    for r in requests:
        if r.prompt_tokens > context_limit:
            continue
        first, last = r.prompt_tokens + 1, min(r.prompt_tokens + r.output_tokens - 1, limit)
        if first <= last:
            steps[first] += 1
            steps[last + 1] -= 1
    histogram: Counter[int] = Counter()
    running = 0
    for length in range(limit + 1):
        running += steps[length]
        if running:
            histogram[length] = running
    return histogram


def effective(buckets: Sequence[int], rule: BucketRule) -> tuple[int, ...]:
    """The buckets the backend compiles for a profile's list (its fixed set, or with its forced largest)."""
    if rule.fixed is not None:
        return tuple(sorted(rule.fixed))
    found = set(buckets)
    if rule.largest is not None:
        found = {b for b in found if b <= rule.largest} | {rule.largest}
    return tuple(sorted(found))


@dataclass
class Figures:
    """One choice of buckets on the traffic."""

    context_buckets: tuple[int, ...]
    token_buckets: tuple[int, ...]
    context: Padding
    token: Padding
    requests_beyond: int
    requests: int
    graphs: int
    compile_seconds: float | None
    compile_basis: str

    @property
    def padded_tokens(self) -> int:
        return self.context.padded + self.token.padded

    @property
    def padded_share(self) -> float:
        total = self.padded_tokens + self.context.real + self.token.real
        return self.padded_tokens / total if total else 0.0

    @property
    def beyond_share(self) -> float:
        return self.requests_beyond / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "context_buckets": list(self.context_buckets),
            "token_buckets": list(self.token_buckets),
            "padded_tokens": self.padded_tokens,
            "padded_share": round(self.padded_share, 6),
            "context": _kind_json(self.context),
            "token": _kind_json(self.token),
            "requests_beyond": self.requests_beyond,
            "beyond_share": round(self.beyond_share, 6),
            "graphs": self.graphs,
            "compile_seconds": None if self.compile_seconds is None else round(self.compile_seconds, 1),
            "compile_basis": self.compile_basis,
        }


def _kind_json(p: Padding) -> dict[str, Any]:
    return {"padded_tokens": p.padded, "real_tokens": p.real, "padded_share": round(p.share, 6), "beyond": p.beyond}


@dataclass
class Analysis:
    spec: BuildSpec
    traffic: Traffic
    rules: BucketRules
    max_graphs: int
    current: Figures
    suggested: Figures
    curve: list[Figures]
    context_hist: Counter[int] = field(repr=False)
    token_hist: Counter[int] = field(repr=False)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "profile": spec.profile_path,
            "build": spec.build_index,
            "backend": spec.backend,
            "max_length": spec.sequence.max_length,
            "max_context_length": spec.sequence.max_context_length,
            "traffic": {
                "source": self.traffic.source,
                "format": self.traffic.format,
                "requests": len(self.traffic.requests),
                "tokenized": self.traffic.tokenized,
            },
            "rules": {"context": self.rules.context.to_json(), "token": self.rules.token.to_json()},
            "max_graphs": self.max_graphs,
            "current": self.current.to_json(),
            "suggested": self.suggested.to_json(),
            "curve": [{"max_graphs": k, **f.to_json()} for k, f in enumerate(self.curve, start=1)],
            "notes": list(self.notes),
        }


def analyse(
    spec: BuildSpec,
    backend: Backend,
    traffic: Traffic,
    *,
    max_graphs: int = DEFAULT_MAX_GRAPHS,
    records: CompileRecords | None = None,
) -> Analysis:
    """The current buckets, the optimal ones with at most ``max_graphs`` of each kind, and the curve."""
    rules = backend.rules.bucket_rules(spec)
    seq = spec.sequence
    requests = traffic.requests
    ctx_hist = context_histogram(requests)
    tok_hist = token_histogram(requests, seq.max_context_length, rules.token.limit)
    records = records or CompileRecords()
    depth = max(CURVE_MAX, max_graphs)
    ctx_choices = choose(ctx_hist, rules.context, depth)
    tok_choices = choose(tok_hist, rules.token, depth)

    def figures(context: Sequence[int], token: Sequence[int]) -> Figures:
        return _figures(spec, backend, requests, ctx_hist, tok_hist, tuple(context), tuple(token), records)

    current = figures(effective(seq.context_buckets, rules.context), effective(seq.token_buckets, rules.token))
    curve = [
        figures(c.buckets, t.buckets) for c, t in zip(ctx_choices[:CURVE_MAX], tok_choices[:CURVE_MAX], strict=True)
    ]
    pick: tuple[Choice, Choice] = (ctx_choices[max_graphs - 1], tok_choices[max_graphs - 1])
    suggested = figures(pick[0].buckets, pick[1].buckets)
    notes = _notes(spec, rules, current, suggested, max_graphs)
    return Analysis(spec, traffic, rules, max_graphs, current, suggested, curve, ctx_hist, tok_hist, notes)


def _figures(
    spec: BuildSpec,
    backend: Backend,
    requests: Sequence[Request],
    ctx_hist: Mapping[int, int],
    tok_hist: Mapping[int, int],
    context: tuple[int, ...],
    token: tuple[int, ...],
    records: CompileRecords,
) -> Figures:
    beyond = sum(1 for r in requests if r.prompt_tokens > context[-1] or r.prompt_tokens + r.output_tokens > token[-1])
    graphs = graph_list(spec, backend, context, token)
    seconds, basis = records.estimate(graphs)
    if context[-1] < spec.sequence.max_context_length:  # prompts these buckets refuse never decode
        tok_hist = token_histogram(requests, context[-1], max(tok_hist, default=0))
    return Figures(
        context, token, padding(ctx_hist, context), padding(tok_hist, token), beyond, len(requests),
        len(graphs), seconds, basis,
    )  # fmt: skip


def with_buckets(spec: BuildSpec, context: Sequence[int], token: Sequence[int]) -> BuildSpec:
    sequence = spec.sequence.model_copy(update={"context_buckets": tuple(context), "token_buckets": tuple(token)})
    return spec.model_copy(update={"sequence": sequence})


def graph_list(
    spec: BuildSpec, backend: Backend, context: Sequence[int], token: Sequence[int]
) -> list[tuple[str, int, int]]:
    """(role, batch, bucket) of every graph the backend plans with these buckets (its own plan where
    it can make one here; else one graph per bucket)."""
    from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN
    from neuronc.errors import NeuroncError

    try:
        plan = backend.plan(with_buckets(spec, context, token))
    except NeuroncError:
        graphs = [(str(ROLE_CONTEXT), spec.batch_size, b) for b in context]
        return graphs + [(str(ROLE_TOKEN), spec.batch_size, b) for b in token]
    return [(str(g.role), g.batch, g.bucket) for g in plan.graphs]


def _notes(spec: BuildSpec, rules: BucketRules, current: Figures, suggested: Figures, k: int) -> list[str]:
    notes = []
    for name, rule in (("context", rules.context), ("token", rules.token)):
        if rule.fixed is not None:
            notes.append(f"{spec.backend}: {rule.source}; nothing to choose for {name} buckets")
    if suggested.padded_tokens > current.padded_tokens:
        if current.requests_beyond > suggested.requests_beyond:
            notes.append(
                "the suggestion pads more than the current buckets because it serves the requests they refuse "
                f"or truncate ({current.requests_beyond} of {current.requests})"
            )
        else:
            notes.append(f"the current buckets use more than {k} graphs of a kind; raise --max-graphs to match them")
    if suggested.context_buckets[-1] < spec.sequence.max_context_length:
        notes.append(
            f"the largest suggested context bucket ({suggested.context_buckets[-1]}) is the longest prompt seen, "
            f"below max_context_length {spec.sequence.max_context_length}: longer prompts would be refused"
        )
    return notes


class CompileRecords:
    """Seconds each graph took in earlier builds of the same model, backend, target and tp (the store's
    manifests; cache hits and zero timings left out)."""

    def __init__(self, by_role: Mapping[tuple[str, int], Mapping[int, list[float]]] | None = None) -> None:
        self.by_role = {key: dict(value) for key, value in (by_role or {}).items()}

    @classmethod
    def from_store(cls, spec: BuildSpec, store: Any = None) -> tuple[CompileRecords, str | None]:
        """The records of the store (``--store``, else the default); a note when it cannot be read."""
        from neuronc.errors import NeuroncError
        from neuronc.store import open_store

        by_role: dict[tuple[str, int], dict[int, list[float]]] = {}
        try:
            entries = open_store(store).list()
        except (NeuroncError, OSError) as exc:
            return cls(), f"no compile-time estimate: the store cannot be read ({exc})"
        for entry in entries:
            m = entry.manifest
            same = (m.backend, m.target, m.model_id, m.tp_degree) == (
                spec.backend, spec.target, spec.model.id, spec.tp_degree,
            )  # fmt: skip
            if not same:
                continue
            for g in m.graphs:
                if not g.cache_hit and g.compile_seconds > 0:
                    by_role.setdefault((g.role, g.batch), {}).setdefault(g.bucket, []).append(g.compile_seconds)
        return cls(by_role), None

    def estimate(self, graphs: Sequence[tuple[str, int, int]]) -> tuple[float | None, str]:
        """Summed seconds (one graph at a time): a recorded bucket's median, else linear between the
        nearest recorded buckets of the role (the nearest one's beyond them); None when a role has none."""
        if not self.by_role:
            return None, "no earlier builds of this model, backend, target and tp in the store"
        total = 0.0
        exact = 0
        for role, batch, bucket in graphs:
            recorded = self.by_role.get((role, batch))
            if not recorded:
                return None, f"no recorded {role} graph at batch {batch} in the store"
            medians = sorted((b, statistics.median(s)) for b, s in recorded.items())
            total += _interpolate(medians, bucket)
            exact += bucket in recorded
        return total, f"from {sum(len(s) for r in self.by_role.values() for s in r.values())} recorded graphs " + (
            f"({exact} of {len(graphs)} buckets recorded exactly, the others interpolated)"
        )


def _interpolate(points: Sequence[tuple[int, float]], x: int) -> float:
    below = [p for p in points if p[0] <= x]
    above = [p for p in points if p[0] >= x]
    if not below:
        return above[0][1]
    if not above:
        return below[-1][1]
    (x0, y0), (x1, y1) = below[-1], above[0]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


__all__ = [
    "CURVE_MAX",
    "DEFAULT_MAX_GRAPHS",
    "Analysis",
    "CompileRecords",
    "Figures",
    "analyse",
    "context_histogram",
    "effective",
    "graph_list",
    "token_histogram",
    "with_buckets",
]
