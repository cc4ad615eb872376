"""The contract with GuideLLM 0.8.1's report: neuronc reads what GuideLLM itself wrote.

The reports under tests/fixtures/guidellm/ were written by GuideLLM 0.8.1 (``guidellm run --scenario``
with the scenarios beside them, which ``neuronc.benchmark.guidellm`` built) against ``guidellm
mock-server --ttft-ms 40 --itl-ms 8 --output-tokens 16 --max-concurrent-requests 4``;
report-0.8.1.schema.json.gz is ``GenerativeBenchmarksReport.model_json_schema()`` of that release.
Every field path neuronc reads must exist in that schema; where GuideLLM is installed
(``NEURONC_GUIDELLM``, or ``guidellm`` on PATH) its own model validates the stored reports too.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from neuronc.benchmark.report import DISTRIBUTION_KEYS, READ_METRICS, parse_report
from neuronc.errors import InvalidInputError

DATA = Path(__file__).parent / "fixtures" / "guidellm"
REPORTS = ("sweep-mock-0.8.1.json.gz", "goodput-mock-0.8.1.json.gz")


def _load(name: str) -> Any:
    return json.loads(gzip.decompress((DATA / name).read_bytes()))


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas ``node`` can be: $ref followed, anyOf/oneOf/allOf spread."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return _resolve(schema, schema["$defs"][name])
    found = []
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, []):
            found += _resolve(schema, option)
    return found or [node]


def _has_path(schema: dict[str, Any], node: dict[str, Any], path: list[str]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    for option in _resolve(schema, node):
        if head == "[]" and "items" in option and _has_path(schema, option["items"], rest):
            return True
        child = option.get("properties", {}).get(head)
        if child is not None and _has_path(schema, child, rest):
            return True
        extra = option.get("additionalProperties")
        if isinstance(extra, dict) and _has_path(schema, extra, rest):
            return True
    return False


def test_every_field_neuronc_reads_is_in_guidellm_0_8_1_schema() -> None:
    schema = _load("report-0.8.1.schema.json.gz")
    metrics = ["benchmarks", "[]", "metrics"]
    paths = [
        ["metadata", "guidellm_version"],
        ["benchmarks", "[]", "config", "strategy"],
        [*metrics, "request_totals", "successful"],
        [*metrics, "request_totals", "errored"],
        [*metrics, "request_totals", "incomplete"],
        [*metrics, "slo_attainment"],
        [*metrics, "request_goodput", "successful", "mean"],
        ["conclusions"],
    ]
    for metric in READ_METRICS:
        paths += [[*metrics, metric, "successful", "mean"], [*metrics, metric, "successful", "median"]]
        paths += [[*metrics, metric, "successful", "percentiles", key] for key in DISTRIBUTION_KEYS]
    missing = [".".join(p) for p in paths if not _has_path(schema, schema, p)]
    assert missing == []


@pytest.mark.parametrize("name", REPORTS)
def test_reports_guidellm_wrote_are_read_with_its_numbers(name: str) -> None:
    data = _load(name)
    report = parse_report(data)
    assert report.guidellm_version == "0.8.1"
    assert len(report.points) == len(data["benchmarks"]) > 0
    for point, raw in zip(report.points, data["benchmarks"], strict=True):
        metrics = raw["metrics"]
        assert point.strategy == raw["config"]["strategy"]["type_"]
        assert point.requests_per_second == metrics["requests_per_second"]["successful"]["mean"]
        assert point.successful == metrics["request_totals"]["successful"] > 0
        ttft = metrics["time_to_first_token_ms"]["successful"]
        assert point.stats["time_to_first_token_ms"]["p99"] == ttft["percentiles"]["p99"]
        latency = metrics["request_latency"]["successful"]
        assert point.stats["request_latency"]["mean"] == latency["mean"]


def test_the_sweep_report_has_the_sweep_and_the_goodput_report_its_search() -> None:
    sweep = parse_report(_load(REPORTS[0]))
    assert [p.strategy for p in sweep.points][:2] == ["synchronous", "throughput"]
    assert sweep.goodput_search is None
    goodput = parse_report(_load(REPORTS[1]))
    assert {p.strategy for p in goodput.points} == {"concurrent"}
    assert goodput.goodput_search is not None
    assert goodput.goodput_search.stop_reason


def test_a_report_missing_a_field_is_an_error_naming_its_path() -> None:
    data = _load(REPORTS[0])
    del data["benchmarks"][1]["metrics"]["inter_token_latency_ms"]["successful"]["percentiles"]["p99"]
    with pytest.raises(
        InvalidInputError, match=r"benchmarks\[1\]\.metrics\.inter_token_latency_ms\.successful\.percentiles\.p99"
    ):
        parse_report(data)


def test_a_report_of_another_guidellm_series_is_refused() -> None:
    data = _load(REPORTS[0])
    data["metadata"]["guidellm_version"] = "0.9.0"
    with pytest.raises(InvalidInputError, match="guidellm_version"):
        parse_report(data)


def _guidellm_python() -> str | None:
    program = shutil.which(os.environ.get("NEURONC_GUIDELLM", "guidellm"))
    if program is None:
        return None
    python = Path(program).resolve().parent / "python"
    return str(python) if python.exists() else None


@pytest.mark.slow
@pytest.mark.skipif(
    _guidellm_python() is None, reason="GuideLLM is not installed (NEURONC_GUIDELLM or guidellm on PATH)"
)
@pytest.mark.parametrize("name", REPORTS)
def test_guidellm_own_model_validates_the_stored_reports(name: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    code = (
        "import sys; from guidellm.benchmark.schemas import GenerativeBenchmarksReport as R; "
        "r = R.model_validate_json(open(sys.argv[1]).read()); print(len(r.benchmarks))"
    )
    python = _guidellm_python()
    assert python is not None
    done = subprocess.run([python, "-c", code, str(report)], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) == len(_load(name)["benchmarks"])
