"""The bench's HTML report: self-contained (nothing fetched), drawn by plotly, rendered by headless Chromium
with no console error. The numbers are GuideLLM 0.8.1's own (tests/fixtures/guidellm/)."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from neuronc.benchmark import decide, parse_report, parse_slo
from neuronc.benchmark.pick import BundleResult

DATA = Path(__file__).parent / "fixtures" / "guidellm"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _results() -> list[BundleResult]:
    sweep = parse_report(json.loads(gzip.decompress((DATA / "sweep-mock-0.8.1.json.gz").read_bytes())))
    search = parse_report(json.loads(gzip.decompress((DATA / "goodput-mock-0.8.1.json.gz").read_bytes())))
    return [
        BundleResult("batch 4 <sweep>", "k1", points=sweep.points, time_to_ready_s=1.5),
        BundleResult("batch 4 (goodput search)", "k2", points=search.points, goodput_search=search.goodput_search),
        BundleResult("batch 16", "k3", error="port 8000 is in use"),
    ]


def _page(tmp_path: Path, slo: str = "ttft_p99<=120ms,itl_p99<=30ms") -> tuple[Path, str]:
    pytest.importorskip("plotly")
    from neuronc.benchmark.page import render_page

    results = _results()
    text = render_page(results, decide(results, parse_slo(slo)), guidellm_version="0.8.1", prices={})
    path = tmp_path / "bench.html"
    path.write_text(text, encoding="utf-8")
    return path, text


def test_the_page_is_self_contained_and_says_the_pick_and_why(tmp_path: Path) -> None:
    _, text = _page(tmp_path)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)\s*=", text, re.IGNORECASE)
    assert "Plotly.newPlot" in text
    assert "Pick: batch 4" in text
    assert "batch 4 &lt;sweep&gt;" in text  # names are escaped
    assert "port 8000 is in use" in text
    assert "meets TTFT p99 ≤ 120 ms, ITL p99 ≤ 30 ms up to" in text


def test_the_page_says_when_no_bundle_meets_the_slo(tmp_path: Path) -> None:
    _, text = _page(tmp_path, "ttft_p99<=1ms")
    assert "No bundle meets the SLO" in text and "came closest" in text


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_chromium_renders_the_page_with_no_console_error(tmp_path: Path) -> None:
    page, _ = _page(tmp_path)
    assert CHROMIUM is not None
    shot = tmp_path / "bench.png"
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # Any request to the network fails (and would log an error): the page must not make one.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180, env=env, check=False
    )
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert dom.stdout.count('class="main-svg"') >= 3  # plotly drew every figure
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    done = subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1200,2600", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-3000:]
    if os.environ.get("NEURONC_BENCH_SCREENSHOT"):  # docs/choose-a-bundle.md's figure comes from here
        shutil.copyfile(shot, os.environ["NEURONC_BENCH_SCREENSHOT"])
