"""Reading GuideLLM 0.8.1's JSON report (``GenerativeBenchmarksReport``): every number neuronc shows comes from it.

The report's shape (GuideLLM ``benchmark/schemas/report.py`` and ``generative`` metrics) as read here::

    metadata.guidellm_version
    benchmarks[i].config.strategy        {type_, rate?, streams?, max_concurrency?}
    benchmarks[i].metrics.request_totals {successful, errored, incomplete, total}
    benchmarks[i].metrics.<metric>.successful {mean, median, percentiles{p50, p90, p95, p99, p999}}
        metric: requests_per_second, output_tokens_per_second, time_to_first_token_ms,
                inter_token_latency_ms, time_per_output_token_ms, request_latency (seconds)
    benchmarks[i].metrics.slo_attainment, .request_goodput.successful.mean   (when the run had an SLO)
    conclusions[j]   the goodput profile's search: probes, best_passing_streams, stop_reason

A field that is missing or of the wrong type is an InvalidInputError (exit 2) naming its JSON path:
the report came from outside neuronc. tests/test_bench_report.py holds the contract test against a
report GuideLLM 0.8.1 wrote and against its own JSON Schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.benchmark.slo import METRICS, Bound, Slo
from neuronc.errors import InvalidInputError

SUPPORTED_MAJOR_MINOR = "0.8"
DISTRIBUTION_KEYS = ("p50", "p90", "p95", "p99", "p999")
# The field paths read from every benchmark (the contract test checks each against GuideLLM's schema).
READ_METRICS = ("requests_per_second", "output_tokens_per_second", *(m for m, _ in METRICS.values()))


@dataclass(frozen=True)
class Point:
    """One benchmark of a GuideLLM run: a rate (or concurrency) and what was measured at it."""

    strategy: str  # synchronous | throughput | constant | poisson | concurrent | async
    target: float | None  # the rate asked for (req/s), or the streams of a concurrent strategy
    requests_per_second: float  # successful requests per second (GuideLLM's "Req/s Mean")
    output_tokens_per_second: float
    successful: int
    errored: int
    incomplete: int
    # metric name (as GuideLLM names it) -> statistic (mean, p50, ...) -> value in GuideLLM's unit
    stats: Mapping[str, Mapping[str, float]]
    slo_attainment: float | None = None
    goodput: float | None = None  # GuideLLM's request_goodput: conforming requests per second

    @property
    def label(self) -> str:
        if self.target is None:
            return self.strategy
        unit = " streams" if self.strategy == "concurrent" else " req/s"
        return f"{self.strategy}@{self.target:g}{unit}"

    def value_ms(self, bound: Bound) -> float | None:
        reported = self.stats.get(bound.report_metric, {}).get(bound.report_statistic)
        return None if reported is None else bound.to_ms(reported)

    def meets(self, slo: Slo) -> bool:
        """Every bound holds at this point, on successful requests, and no request failed."""
        if self.successful == 0 or self.errored > 0:
            return False
        for bound in slo.bounds:
            value = self.value_ms(bound)
            if value is None or not bound.holds(value):
                return False
        return True

    def worst_excess(self, slo: Slo) -> tuple[float, Bound | None]:
        """The bound this point misses by the most (as a fraction of its limit), and that fraction."""
        worst, which = -float("inf"), None
        for bound in slo.bounds:
            value = self.value_ms(bound)
            excess = float("inf") if value is None else bound.excess(value)
            if excess > worst:
                worst, which = excess, bound
        return worst, which

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "target": self.target,
            "requests_per_second": self.requests_per_second,
            "output_tokens_per_second": self.output_tokens_per_second,
            "successful": self.successful,
            "errored": self.errored,
            "incomplete": self.incomplete,
            "stats": {k: dict(v) for k, v in self.stats.items()},
            "slo_attainment": self.slo_attainment,
            "goodput": self.goodput,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Point:
        return cls(
            strategy=str(data["strategy"]),
            target=None if data.get("target") is None else float(data["target"]),
            requests_per_second=float(data["requests_per_second"]),
            output_tokens_per_second=float(data["output_tokens_per_second"]),
            successful=int(data["successful"]),
            errored=int(data["errored"]),
            incomplete=int(data["incomplete"]),
            stats={str(k): {str(s): float(x) for s, x in v.items()} for k, v in data["stats"].items()},
            slo_attainment=None if data.get("slo_attainment") is None else float(data["slo_attainment"]),
            goodput=None if data.get("goodput") is None else float(data["goodput"]),
        )


@dataclass(frozen=True)
class GoodputSearch:
    """The goodput profile's conclusion: the highest concurrency meeting the objectives, as GuideLLM found it."""

    best_passing_streams: int | None
    lowest_failing_streams: int | None
    stop_reason: str | None
    best_goodput: float | None  # goodput (req/s) of the best passing probe

    def to_json(self) -> dict[str, Any]:
        return {
            "best_passing_streams": self.best_passing_streams,
            "lowest_failing_streams": self.lowest_failing_streams,
            "stop_reason": self.stop_reason,
            "best_goodput": self.best_goodput,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GoodputSearch:
        return cls(
            data.get("best_passing_streams"),
            data.get("lowest_failing_streams"),
            data.get("stop_reason"),
            data.get("best_goodput"),
        )


@dataclass(frozen=True)
class Report:
    guidellm_version: str
    points: tuple[Point, ...]
    goodput_search: GoodputSearch | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _get(node: Any, path: str, *keys: str) -> Any:
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            raise InvalidInputError(f"{path}.{key}: missing from the GuideLLM report")
        node = node[key]
        path = f"{path}.{key}"
    return node


def _number(node: Any, path: str, *keys: str) -> float:
    value = _get(node, path, *keys)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{path}.{'.'.join(keys)}: a number expected, got {type(value).__name__}")
    return float(value)


def _distribution(metrics: Any, path: str, name: str) -> dict[str, float]:
    summary = _get(metrics, path, name, "successful")
    where = f"{path}.{name}.successful"
    stats = {"mean": _number(summary, where, "mean"), "median": _number(summary, where, "median")}
    percentiles = _get(summary, where, "percentiles")
    for key in DISTRIBUTION_KEYS:
        stats[key] = _number(percentiles, f"{where}.percentiles", key)
    return stats


def _point(bench: Any, path: str) -> Point:
    strategy = _get(bench, path, "config", "strategy")
    kind = _get(strategy, f"{path}.config.strategy", "type_")
    target = strategy.get("rate") if kind in ("constant", "poisson", "async") else strategy.get("streams")
    metrics = _get(bench, path, "metrics")
    mpath = f"{path}.metrics"
    totals = _get(metrics, mpath, "request_totals")
    stats = {name: _distribution(metrics, mpath, name) for name, _ in METRICS.values()}
    goodput_node = metrics.get("request_goodput")
    goodput = (
        _number(goodput_node, f"{mpath}.request_goodput", "successful", "mean")
        if isinstance(goodput_node, Mapping)
        else None
    )
    attainment = metrics.get("slo_attainment")
    return Point(
        strategy=str(kind),
        target=float(target) if isinstance(target, int | float) and not isinstance(target, bool) else None,
        requests_per_second=_number(metrics, mpath, "requests_per_second", "successful", "mean"),
        output_tokens_per_second=_number(metrics, mpath, "output_tokens_per_second", "successful", "mean"),
        successful=int(_number(totals, f"{mpath}.request_totals", "successful")),
        errored=int(_number(totals, f"{mpath}.request_totals", "errored")),
        incomplete=int(_number(totals, f"{mpath}.request_totals", "incomplete")),
        stats=stats,
        slo_attainment=float(attainment) if isinstance(attainment, int | float) else None,
        goodput=goodput,
    )


def _goodput_search(conclusions: Any, points: tuple[Point, ...]) -> GoodputSearch | None:
    if not isinstance(conclusions, list):
        return None
    for item in conclusions:
        if isinstance(item, Mapping) and "probes" in item and "best_passing_streams" in item:
            best = item.get("best_passing_streams")
            probes = [p for p in item.get("probes") or [] if isinstance(p, Mapping)]
            best_goodput = next((p.get("goodput") for p in probes if p.get("streams") == best), None)
            return GoodputSearch(
                best if isinstance(best, int) else None,
                item.get("lowest_failing_streams") if isinstance(item.get("lowest_failing_streams"), int) else None,
                str(item["stop_reason"]) if item.get("stop_reason") is not None else None,
                float(best_goodput) if isinstance(best_goodput, int | float) else None,
            )
    return None


def parse_report(data: Any, *, origin: str = "report") -> Report:
    """A GuideLLM 0.8.x report (the parsed JSON) as a Report; InvalidInputError naming the field otherwise."""
    version = _get(data, origin, "metadata", "guidellm_version")
    if not isinstance(version, str) or not version.startswith(SUPPORTED_MAJOR_MINOR + "."):
        raise InvalidInputError(
            f"{origin}.metadata.guidellm_version: {version!r}; "
            f"neuronc reads GuideLLM {SUPPORTED_MAJOR_MINOR}.x reports",
            hint="pip install guidellm==0.8.1 in its own environment and pass it with --guidellm",
        )
    benchmarks = _get(data, origin, "benchmarks")
    if not isinstance(benchmarks, list):
        raise InvalidInputError(f"{origin}.benchmarks: a list expected")
    points = tuple(_point(b, f"{origin}.benchmarks[{i}]") for i, b in enumerate(benchmarks))
    warnings = tuple(
        str(w.get("message"))
        for b in benchmarks
        for w in (b.get("warnings") or [])
        if isinstance(w, Mapping) and w.get("message")
    )
    return Report(version, points, _goodput_search(data.get("conclusions"), points), warnings)


def read_report(path: str | Path) -> Report:
    """``parse_report`` of a report file GuideLLM wrote."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not a readable GuideLLM JSON report ({exc})") from exc
    return parse_report(data, origin=Path(path).name)


__all__ = ["READ_METRICS", "GoodputSearch", "Point", "Report", "parse_report", "read_report"]
