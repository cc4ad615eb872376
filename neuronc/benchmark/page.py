"""The bench's HTML report: one self-contained page (plotly.js inlined, nothing fetched from the network).

Plots drawn with plotly (the ``bench`` extra): the latency-throughput curve of every bundle against the
SLO's first bound, with the Pareto front and the pick; TTFT and ITL percentiles against the request
rate, with the SLO's lines. A table of the bundles and the one-sentence reason head the page.
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from neuronc.benchmark.pick import BundleResult, Decision
from neuronc.benchmark.prices import PRICES_AS_OF, PRICES_SOURCE
from neuronc.benchmark.summary import TABLE_COLUMNS, table_rows
from neuronc.errors import MISSING_LIBRARY

# plotly ships no type information: its modules are loaded by name and its objects are ``Any`` here.
Figure = Any

PERCENTILES = ("p50", "p90", "p99")
DASHES = {"p50": "dot", "p90": "dash", "p99": "solid"}
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1f2933; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; }
.reason { font-size: 1.1rem; background: #eef6ee; border-left: 4px solid #2f855a; padding: 0.6rem 0.9rem; }
.reason.none { background: #fdf0ec; border-left-color: #c05621; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { text-align: left; padding: 0.3rem 0.7rem; border-bottom: 1px solid #d9e2ec; }
th { background: #f0f4f8; }
.meta { color: #52606d; font-size: 0.85rem; }
"""


def _plotly() -> Any:
    try:
        go = importlib.import_module("plotly.graph_objects")
    except ImportError as exc:
        raise MISSING_LIBRARY.convert(
            exc, "the HTML report needs plotly", hint="pip install 'neuronc[bench]' (or --no-html)"
        ) from exc
    return go


def _sorted(points: Sequence[Any]) -> list[Any]:
    return sorted((p for p in points if p.successful > 0), key=lambda p: p.requests_per_second)


def latency_figure(results: Sequence[BundleResult], decision: Decision) -> Figure:
    go = _plotly()
    bound = decision.slo.bounds[0]
    fig = go.Figure()
    for result in results:
        points = _sorted(result.points)
        if not points:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.requests_per_second for p in points],
                y=[p.value_ms(bound) for p in points],
                mode="lines+markers",
                name=result.name,
                text=[p.label for p in points],
                hovertemplate="%{text}<br>%{x:.3g} req/s<br>%{y:.4g} ms<extra>" + html.escape(result.name) + "</extra>",
            )
        )
    if decision.pareto:
        fig.add_trace(
            go.Scatter(
                x=[p.requests_per_second for _, p in decision.pareto],
                y=[p.value_ms(bound) for _, p in decision.pareto],
                mode="lines",
                name="Pareto front",
                line={"dash": "dash", "color": "#7b8794"},
                hoverinfo="skip",
            )
        )
    pick = decision.pick
    if pick is not None:
        fig.add_trace(
            go.Scatter(
                x=[pick.point.requests_per_second],
                y=[pick.point.value_ms(bound)],
                mode="markers",
                name=f"pick: {pick.result.name}",
                marker={"symbol": "star", "size": 18, "color": "#2f855a"},
            )
        )
    fig.add_hline(y=bound.limit_ms, line_dash="dot", line_color="#c05621", annotation_text=f"SLO {bound.label()}")
    fig.update_layout(
        title=f"{bound.metric.upper()} {bound.statistic} against throughput",
        xaxis_title="successful requests per second",
        yaxis_title=f"{bound.metric.upper()} {bound.statistic} (ms)",
        template="plotly_white",
        height=460,
    )
    return fig


def percentile_figure(results: Sequence[BundleResult], decision: Decision, metric: str, title: str) -> Figure:
    """``metric`` (GuideLLM's name) at p50, p90 and p99 against the request rate, every bundle; the SLO's lines."""
    go = _plotly()
    fig = go.Figure()
    colors = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b7791f", "#2c7a7b", "#9b2c2c", "#4a5568"]
    for index, result in enumerate(results):
        points = _sorted(result.points)
        if not points:
            continue
        for percentile in PERCENTILES:
            values = [p.stats.get(metric, {}).get(percentile) for p in points]
            fig.add_trace(
                go.Scatter(
                    x=[p.requests_per_second for p in points],
                    y=[v * 1000 if metric == "request_latency" and v is not None else v for v in values],
                    mode="lines+markers",
                    name=f"{result.name} {percentile}",
                    legendgroup=result.name,
                    line={"dash": DASHES[percentile], "color": colors[index % len(colors)]},
                )
            )
    for bound in decision.slo.bounds:
        if bound.report_metric == metric:
            fig.add_hline(y=bound.limit_ms, line_dash="dot", line_color="#c05621", annotation_text=bound.label())
    fig.update_layout(
        title=title,
        xaxis_title="successful requests per second",
        yaxis_title="ms",
        template="plotly_white",
        height=420,
    )
    return fig


def _table(results: Sequence[BundleResult], decision: Decision) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in TABLE_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table_rows(results, decision)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_page(
    results: Sequence[BundleResult], decision: Decision, *, guidellm_version: str, prices: Mapping[str, float]
) -> str:
    """The whole page as text (UTF-8 HTML with plotly.js inlined)."""
    _plotly()
    get_plotlyjs = importlib.import_module("plotly.offline").get_plotlyjs

    figures = [
        latency_figure(results, decision),
        percentile_figure(results, decision, "time_to_first_token_ms", "Time to first token against the request rate"),
        percentile_figure(results, decision, "inter_token_latency_ms", "Inter-token latency against the request rate"),
    ]
    config = {"displaylogo": False, "responsive": True}
    divs = "".join(f.to_html(full_html=False, include_plotlyjs=False, config=config) for f in figures)
    pick = decision.pick
    basis = html.escape(decision.basis)
    title = f"Pick: {html.escape(pick.result.name)}" if pick is not None else "No bundle meets the SLO"
    measured = [r for r in results if r.points]
    priced = any(r.price_per_hour is not None for r in results)  # a CPU host has no price
    price_note = (
        f"Prices: {PRICES_SOURCE}, as of {PRICES_AS_OF}"
        + (f"; overridden: {html.escape(', '.join(f'{k}=${v:g}/h' for k, v in prices.items()))}" if prices else "")
        + ". "
        if priced
        else ""
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>neuronc bench: {html.escape(decision.slo.text)}</title>"
        f"<style>{_CSS}</style><script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{title}</h1>"
        f"<p class='meta'>SLO {html.escape(decision.slo.label())} · ranked by {basis} · "
        f"{len(measured)} of {len(results)} bundles measured · "
        f"every number from GuideLLM {html.escape(guidellm_version)}'s reports</p>"
        f"<p class='reason{'' if pick is not None else ' none'}'>{html.escape(decision.reason)}</p>"
        f"{_table(results, decision)}{divs}"
        f"<p class='meta'>{price_note}Generated by neuronc bench.</p>"
        "</body></html>\n"
    )


__all__ = ["latency_figure", "percentile_figure", "render_page"]
