"""``bench.json`` and the terminal table: the measured rows, the decision, where the numbers came from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neuronc.benchmark.pick import BundleResult, Decision, best_point
from neuronc.benchmark.prices import PRICES_AS_OF, PRICES_SOURCE
from neuronc.benchmark.slo import format_ms

TABLE_COLUMNS = ("bundle", "meets SLO", "goodput", "at", "first bound there", "max req/s", "ready", "note")


def row_json(result: BundleResult, decision: Decision, path: str | None) -> dict[str, Any]:
    best = best_point(result, decision.slo) if result.error is None else None
    return {
        "name": result.name,
        "key": result.key,
        "bundle": path,
        "instance": result.instance,
        "price_per_hour": result.price_per_hour,
        "time_to_ready_s": result.time_to_ready_s,
        "marks": list(result.marks),
        "error": result.error,
        "meets_slo": best is not None,
        "goodput_rps": None if best is None else best.requests_per_second,
        "best_at": None if best is None else best.label,
        "max_requests_per_second": max((p.requests_per_second for p in result.points), default=None),
        "points": [p.to_json() for p in result.points],
        "goodput_search": None if result.goodput_search is None else result.goodput_search.to_json(),
    }


def document(
    results: Sequence[BundleResult],
    decision: Decision,
    *,
    paths: Mapping[str, str],
    guidellm_version: str,
    prices: Mapping[str, float],
    html: str | None,
    interrupted: bool = False,
) -> dict[str, Any]:
    """The whole bench as one JSON document (``bench.json``, and stdout with ``--json``)."""
    return {
        "slo": decision.slo.to_json(),
        "guidellm_version": guidellm_version,
        "prices": {"as_of": PRICES_AS_OF, "source": PRICES_SOURCE, "overrides": dict(prices)},
        "bundles": [row_json(r, decision, paths.get(r.name)) for r in results],
        "decision": decision.to_json(),
        "html": html,
        "interrupted": interrupted,
    }


def table_rows(results: Sequence[BundleResult], decision: Decision) -> list[list[str]]:
    first = decision.slo.bounds[0]
    pick = decision.pick.result.name if decision.pick is not None else None
    rows = []
    for result in results:
        best = best_point(result, decision.slo) if result.error is None else None
        value = None if best is None else best.value_ms(first)
        top = max((p.requests_per_second for p in result.points), default=None)
        note = result.error or "; ".join(m for m in result.marks if not m.startswith("verdict"))
        rows.append(
            [
                ("→ " if result.name == pick else "") + result.name,
                "-" if result.error else ("yes" if best is not None else "no"),
                "" if best is None else f"{best.requests_per_second:.3g} req/s",
                "" if best is None else best.label,
                "" if value is None else f"{first.metric.upper()} {first.statistic} {format_ms(value)}",
                "" if top is None else f"{top:.3g} req/s",
                "" if result.time_to_ready_s is None else f"{result.time_to_ready_s:.1f} s",
                note,
            ]
        )
    return rows


__all__ = ["TABLE_COLUMNS", "document", "row_json", "table_rows"]
