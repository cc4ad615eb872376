"""The pick: among bundles that meet the SLO, the highest goodput per instance-hour; the Pareto front; the reason.

A bundle's **goodput** under an SLO is the highest successful request rate (GuideLLM's "Req/s Mean")
of any of its benchmarks (the rate sweep and the goodput search's probes) at which every bound of
the SLO holds and no request failed. **Per instance-hour**: goodput x 3600 / the instance's price
(requests per dollar), when every bundle measured has a price; otherwise (the CPU host) goodput alone.
When no bundle meets the SLO, the one that came closest is named with the bound it misses and by how much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from neuronc.benchmark.report import GoodputSearch, Point
from neuronc.benchmark.slo import Bound, Slo, format_ms

BASIS_PRICE = "goodput per instance-hour"
BASIS_GOODPUT = "goodput"


@dataclass(frozen=True)
class BundleResult:
    """What was measured for one bundle (or why it could not be)."""

    name: str  # how people tell the bundles of a matrix apart: "batch 4", "profile.yaml#2"
    key: str  # the bundle key (config hash and toolchain key)
    instance: str | None = None  # the Neuron instance type; None: this host (CPU)
    price_per_hour: float | None = None
    points: tuple[Point, ...] = ()
    goodput_search: GoodputSearch | None = None
    error: str | None = None
    time_to_ready_s: float | None = None
    marks: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Candidate:
    result: BundleResult
    goodput: float  # req/s at the best point meeting the SLO
    point: Point

    @property
    def per_dollar(self) -> float | None:
        price = self.result.price_per_hour
        return None if price is None else self.goodput * 3600.0 / price


@dataclass(frozen=True)
class Closest:
    result: BundleResult
    point: Point
    bound: Bound
    value_ms: float | None
    excess: float  # the fraction over the bound (0.2: 20 % over)


@dataclass(frozen=True)
class Decision:
    slo: Slo
    basis: str
    ranked: tuple[Candidate, ...]  # bundles meeting the SLO, best first
    closest: Closest | None  # when none meets it
    pareto: tuple[tuple[str, Point], ...]  # (bundle name, point), by throughput
    reason: str

    @property
    def pick(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def to_json(self) -> dict[str, Any]:
        pick = self.pick
        closest = self.closest
        return {
            "slo": self.slo.to_json(),
            "basis": self.basis,
            "pick": None if pick is None else _candidate_json(pick),
            "meeting": [_candidate_json(c) for c in self.ranked],
            "closest": None
            if closest is None
            else {
                "name": closest.result.name,
                "key": closest.result.key,
                "bound": closest.bound.name,
                "value_ms": closest.value_ms,
                "limit_ms": closest.bound.limit_ms,
                "excess": closest.excess,
                "at": closest.point.label,
            },
            "pareto": [
                {"name": name, "at": p.label, "requests_per_second": p.requests_per_second} for name, p in self.pareto
            ],
            "reason": self.reason,
        }


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        "name": c.result.name,
        "key": c.result.key,
        "goodput_rps": c.goodput,
        "at": c.point.label,
        "price_per_hour": c.result.price_per_hour,
        "requests_per_dollar": c.per_dollar,
    }


def best_point(result: BundleResult, slo: Slo) -> Point | None:
    """The benchmark with the highest successful request rate at which the SLO holds."""
    meeting = [p for p in result.points if p.meets(slo)]
    return max(meeting, key=lambda p: p.requests_per_second) if meeting else None


def closest_miss(result: BundleResult, slo: Slo) -> Closest | None:
    """The point of ``result`` nearest to meeting the SLO: the smallest worst excess over a bound."""
    best: Closest | None = None
    for point in result.points:
        if point.successful == 0:
            continue
        excess, bound = point.worst_excess(slo)
        if bound is None:
            continue
        if best is None or excess < best.excess:
            best = Closest(result, point, bound, point.value_ms(bound), excess)
    return best


def pareto_front(results: Sequence[BundleResult], bound: Bound) -> tuple[tuple[str, Point], ...]:
    """Points no other point beats on both throughput (higher) and ``bound``'s latency (lower)."""
    points = [
        (r.name, p, p.value_ms(bound))
        for r in results
        for p in r.points
        if p.successful > 0 and p.errored == 0 and p.value_ms(bound) is not None
    ]
    front = []
    for name, p, latency in points:
        assert latency is not None
        dominated = any(
            q.requests_per_second >= p.requests_per_second
            and other is not None
            and other <= latency
            and (q.requests_per_second > p.requests_per_second or other < latency)
            for _, q, other in points
        )
        if not dominated:
            front.append((name, p))
    return tuple(sorted(front, key=lambda item: item[1].requests_per_second))


def decide(results: Sequence[BundleResult], slo: Slo) -> Decision:
    """The pick under ``slo`` (none when no bundle meets it), the ranking, the Pareto front and the reason."""
    measured = [r for r in results if r.error is None and r.points]
    priced = bool(measured) and all(r.price_per_hour is not None for r in measured)
    basis = BASIS_PRICE if priced else BASIS_GOODPUT
    candidates = []
    for result in measured:
        point = best_point(result, slo)
        if point is not None:
            candidates.append(Candidate(result, point.requests_per_second, point))
    first = slo.bounds[0]

    def rank(c: Candidate) -> tuple[float, float, str]:
        score = c.per_dollar if priced and c.per_dollar is not None else c.goodput
        latency = c.point.value_ms(first) or 0.0
        return (-score, latency, c.result.name)

    ranked = tuple(sorted(candidates, key=rank))
    closest = None
    if not ranked:
        misses = [m for m in (closest_miss(r, slo) for r in measured) if m is not None]
        closest = min(misses, key=lambda m: (m.excess, m.result.name)) if misses else None
    draft = Decision(slo, basis, ranked, closest, pareto_front(measured, first), "")
    return replace(draft, reason=reason(draft, results))


def _rate(rps: float) -> str:
    return f"{rps:.3g} req/s"


def _miss_text(result: BundleResult, slo: Slo) -> str:
    miss = closest_miss(result, slo)
    if miss is None:
        return f"{result.name} has no measurement"
    value = "no value" if miss.value_ms is None else format_ms(miss.value_ms)
    return f"{result.name} does not ({miss.bound.metric.upper()} {miss.bound.statistic} {value} at {miss.point.label})"


def reason(decision: Decision, results: Sequence[BundleResult]) -> str:
    """One sentence: why this bundle (or why none)."""
    slo = decision.slo
    pick = decision.pick
    if pick is None:
        closest = decision.closest
        if closest is None:
            return f"No bundle meets {slo.label()}: none was measured."
        value = "no value" if closest.value_ms is None else format_ms(closest.value_ms)
        return (
            f"No bundle meets {slo.label()}: {closest.result.name} came closest, "
            f"{closest.bound.metric.upper()} {closest.bound.statistic} {value} at {closest.point.label}, "
            f"{closest.excess:.0%} over the bound."
        )
    text = f"{pick.result.name} meets {slo.label()} up to {_rate(pick.goodput)}"
    if decision.basis == BASIS_PRICE and pick.per_dollar is not None:
        text += f" ({pick.per_dollar:,.0f} requests per dollar at ${pick.result.price_per_hour:g}/h)"
    others = []
    for other in decision.ranked[1:3]:
        if decision.basis == BASIS_PRICE and other.per_dollar is not None:
            others.append(f"{other.result.name} up to {_rate(other.goodput)} ({other.per_dollar:,.0f} per dollar)")
        else:
            others.append(f"{other.result.name} only up to {_rate(other.goodput)}")
    meeting = {c.result.name for c in decision.ranked}
    for result in results:
        if len(others) >= 3:
            break
        if result.name in meeting:
            continue
        others.append(f"{result.name} failed ({result.error})" if result.error else _miss_text(result, slo))
    return text + ("; " + "; ".join(others) if others else "") + "."


__all__ = [
    "BASIS_GOODPUT",
    "BASIS_PRICE",
    "BundleResult",
    "Candidate",
    "Closest",
    "Decision",
    "best_point",
    "closest_miss",
    "decide",
    "pareto_front",
]
