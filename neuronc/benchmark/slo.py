"""Service-level objectives: ``ttft_p99<=2s,itl_p99<=50ms`` parsed into bounds on GuideLLM's metrics.

A bound is ``<metric>_<statistic> <op> <value><unit>``:

- metric: ``ttft`` (time to first token), ``itl`` (inter-token latency), ``tpot`` (time per output
  token, first token included, as GuideLLM defines it) or ``e2e`` (request latency; ``e2el`` and
  ``latency`` are the same);
- statistic: ``p50 p90 p95 p99 p999``, ``median`` or ``mean`` (GuideLLM reports exactly these);
- op: ``<=`` or ``<``; value: a number with ``ms`` or ``s``.

Each bound is checked against the statistic GuideLLM's report gives for that benchmark (successful
requests). GuideLLM's own goodput profile takes per-request objectives and an attainment fraction
instead of percentiles: ``goodput_objectives`` maps the bounds onto it (docs/choose-a-bundle.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neuronc.errors import InvalidInputError

# metric -> (GuideLLM's metric name in a report, the unit GuideLLM reports it in)
METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("time_to_first_token_ms", "ms"),
    "itl": ("inter_token_latency_ms", "ms"),
    "tpot": ("time_per_output_token_ms", "ms"),
    "e2e": ("request_latency", "s"),
}
ALIASES = {"e2el": "e2e", "latency": "e2e"}
# statistic -> (the key in GuideLLM's distribution summary, the fraction of requests it covers)
STATISTICS: dict[str, tuple[str, float | None]] = {
    "p50": ("p50", 0.5),
    "median": ("p50", 0.5),
    "p90": ("p90", 0.9),
    "p95": ("p95", 0.95),
    "p99": ("p99", 0.99),
    "p999": ("p999", 0.999),
    "mean": ("mean", None),
}
_BOUND = re.compile(r"^\s*([a-z0-9]+)_([a-z0-9]+)\s*(<=|<)\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*$")
# GuideLLM's goodput objective for each metric (GoodputSLO: ttft_ms, tpot_ms compared with the
# inter-token latency, e2el_ms); time per output token with the first token has none.
_GOODPUT_FIELD = {"ttft": "ttft_ms", "itl": "tpot_ms", "e2e": "e2el_ms"}


@dataclass(frozen=True)
class Bound:
    """One objective: ``statistic(metric) op limit``, the limit in milliseconds."""

    metric: str
    statistic: str
    op: str
    limit_ms: float
    text: str

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.statistic}"

    @property
    def report_metric(self) -> str:
        return METRICS[self.metric][0]

    @property
    def report_statistic(self) -> str:
        return STATISTICS[self.statistic][0]

    def to_ms(self, reported: float) -> float:
        """A value of this metric as GuideLLM reports it, in milliseconds."""
        return reported * 1000.0 if METRICS[self.metric][1] == "s" else reported

    def holds(self, value_ms: float) -> bool:
        return value_ms <= self.limit_ms if self.op == "<=" else value_ms < self.limit_ms

    def excess(self, value_ms: float) -> float:
        """How far a value is beyond the limit, as a fraction of it (0 or less: within it)."""
        return value_ms / self.limit_ms - 1.0

    def label(self) -> str:
        symbol = "≤" if self.op == "<=" else "<"
        return f"{self.metric.upper()} {self.statistic} {symbol} {format_ms(self.limit_ms)}"


@dataclass(frozen=True)
class Slo:
    bounds: tuple[Bound, ...]
    text: str

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "bounds": [
                {"metric": b.metric, "statistic": b.statistic, "op": b.op, "limit_ms": b.limit_ms} for b in self.bounds
            ],
        }

    def label(self) -> str:
        return ", ".join(b.label() for b in self.bounds)

    def goodput_objectives(self) -> tuple[dict[str, float], float] | None:
        """GuideLLM's goodput profile arguments for this SLO: per-request objectives (GoodputSLO) and the
        attainment target, the highest percentile named (p99 -> 0.99). None when no bound maps onto it
        (only means, or only ``tpot``). A ``mean`` bound is left to the percentile check."""
        objectives: dict[str, float] = {}
        target = 0.0
        for bound in self.bounds:
            field = _GOODPUT_FIELD.get(bound.metric)
            fraction = STATISTICS[bound.statistic][1]
            if field is None or fraction is None:
                continue
            objectives[field] = min(objectives.get(field, bound.limit_ms), bound.limit_ms)
            target = max(target, fraction)
        if not objectives:
            return None
        return objectives, min(target, 0.999)


def format_ms(ms: float) -> str:
    """``2 s``, ``50 ms``, ``1.5 s``: the unit people read."""
    if ms >= 1000.0:
        return f"{ms / 1000.0:.3g} s"
    return f"{ms:.3g} ms"


def parse_slo(text: str, *, origin: str = "--slo") -> Slo:
    """``ttft_p99<=2s,itl_p99<=50ms`` as an Slo; InvalidInputError (exit 2) naming the bound and its field."""
    parts = [p for p in text.split(",")]
    if not text.strip():
        raise InvalidInputError(f"{origin}: empty", hint='e.g. --slo "ttft_p99<=2s,itl_p99<=50ms"')
    bounds: list[Bound] = []
    seen: set[str] = set()
    for index, part in enumerate(parts, start=1):
        bound = _parse_bound(part, f"{origin} bound {index} ({part.strip()!r})")
        if bound.name in seen:
            raise InvalidInputError(f"{origin}: {bound.name} is bounded twice", hint="give each metric_statistic once")
        seen.add(bound.name)
        bounds.append(bound)
    return Slo(tuple(bounds), ",".join(p.strip() for p in parts))


def _parse_bound(part: str, where: str) -> Bound:
    match = _BOUND.match(part.lower())
    if match is None:
        raise InvalidInputError(
            f"{where}: not <metric>_<statistic><=<value><unit>",
            hint="e.g. ttft_p99<=2s, itl_p99<=50ms, e2e_p95<30s",
        )
    metric, statistic, op, number, unit = match.groups()
    metric = ALIASES.get(metric, metric)
    if metric not in METRICS:
        known = ", ".join([*METRICS, *ALIASES])
        raise InvalidInputError(f"{where}: metric {metric!r} is not one GuideLLM reports; choose one of {known}")
    if statistic not in STATISTICS:
        raise InvalidInputError(
            f"{where}: statistic {statistic!r} is not one GuideLLM reports; choose one of {', '.join(STATISTICS)}"
        )
    if unit is None:
        raise InvalidInputError(f"{where}: value {number} has no unit", hint=f"write {number}ms or {number}s")
    limit_ms = float(number) * (1000.0 if unit == "s" else 1.0)
    if limit_ms <= 0:
        raise InvalidInputError(f"{where}: value must be above 0")
    return Bound(metric, statistic, op, limit_ms, part.strip())


__all__ = ["METRICS", "STATISTICS", "Bound", "Slo", "format_ms", "parse_slo"]
