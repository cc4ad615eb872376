"""``neuronc bench``: serve each bundle of a matrix, measure it with GuideLLM, pick the one that meets an SLO.

- ``slo``: ``ttft_p99<=2s,itl_p99<=50ms`` as bounds on GuideLLM's metrics;
- ``report``: GuideLLM 0.8.1's JSON report, read (every number shown comes from it);
- ``guidellm``: GuideLLM run as a separate program (its scenarios: a rate sweep, the goodput search);
- ``stack``: a bundle's serving stack (``neuronc serve``, or deploy's compose file), started and stopped;
- ``results``: results stored with the bundles in the store, by bundle key, host, scenario, GuideLLM version;
- ``run``: the loop over the bundles; ``pick``: the pick, the Pareto front, the reason; ``prices``:
  the Neuron instances' prices; ``page``: the HTML report, ``summary``: bench.json and the table.

Importing this package imports none of its modules' heavy dependencies (plotly loads only to draw).
"""

from __future__ import annotations

from neuronc.benchmark.pick import BundleResult, Decision, decide
from neuronc.benchmark.report import Point, Report, parse_report, read_report
from neuronc.benchmark.slo import Bound, Slo, parse_slo

__all__ = [
    "Bound",
    "BundleResult",
    "Decision",
    "Point",
    "Report",
    "Slo",
    "decide",
    "parse_report",
    "parse_slo",
    "read_report",
]
