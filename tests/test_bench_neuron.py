"""The Neuron path of `neuronc bench`, through the stand-in container runtime.

A matrix of NxDI bundles (batch 1, 4, 8; compiled through the SDK doubles by the real pipeline) is
benchmarked from the compose files `neuronc deploy` writes; the stand-in runtime
(tests/sdk_doubles/compose_runtime.py) runs GuideLLM's own mock server in place of each DLC
container, with per-bundle time to first token, inter-token latency and slots. GuideLLM 0.8.1 itself
measures them (``NEURONC_GUIDELLM``, or ``guidellm`` on PATH; skipped without it). The test computes
the expected pick from GuideLLM's raw reports, independently of neuronc.benchmark, for three SLOs, one
of which no bundle meets (exit 8, the closest bundle named); and checks that a failing bundle is a
row's error, that a second bench reuses the stored results, and that Ctrl-C leaves no server behind.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronc.bundle import read_manifest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
DOUBLES = REPO / "tests" / "sdk_doubles"
TOKENIZER = REPO / "neuronc" / "data" / "profiles" / "models" / "tiny-llama"
GUIDELLM = shutil.which(os.environ.get("NEURONC_GUIDELLM", "guidellm"))
IMAGE = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx@sha256:" + "ab" * 32
# batch -> the mock server standing in for that bundle's container
SERVERS = {
    1: {"ttft_ms": 15, "itl_ms": 3, "output_tokens": 16, "slots": 1},
    4: {"ttft_ms": 35, "itl_ms": 6, "output_tokens": 16, "slots": 4},
    8: {"ttft_ms": 70, "itl_ms": 12, "output_tokens": 16, "slots": 8},
}
QUICK = ["--sweep-size", "3", "--seconds", "3", "--probes", "2", "--data", "prompt_tokens=24,output_tokens=16"]

needs_guidellm = pytest.mark.skipif(GUIDELLM is None, reason="GuideLLM 0.8.1 not installed (NEURONC_GUIDELLM)")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """batch -> an NxDI bundle (tp 2, vLLM-ready), compiled by `neuronc compile` through the SDK doubles."""
    sys.path.insert(0, str(REPO / "tests"))
    from _serving import VLLM_READY_OPTIONS, doubles_on_path, write_wide_llama
    from click.testing import CliRunner

    from neuronc._output import out
    from neuronc.cli import app

    work = tmp_path_factory.mktemp("bench-matrix")
    model = write_wide_llama(work / "wide-llama")
    profile = {
        "model": {"id": str(model)},
        "backend": "nxdi",
        "target": "inf2",
        "tp_degree": 2,
        "batch_size": 1,
        "amp": "bf16",
        "sequence": {"max_length": 256, "context_buckets": [64, 128], "token_buckets": [256]},
        "weights": "presharded",
        "options": VLLM_READY_OPTIONS,
        "matrix": {"batch_size": sorted(SERVERS)},
    }
    (work / "matrix.yaml").write_text(yaml.safe_dump(profile))
    with doubles_on_path(work):
        out.reset()
        result = CliRunner().invoke(
            app, ["compile", str(work / "matrix.yaml"), "--json", "--store", str(work / "store")]
        )
    assert result.exit_code == 0, result.output
    bundles = [Path(b["bundle"]) for b in json.loads(result.stdout)["builds"]]
    return {read_manifest(b).batch_size or 0: b for b in bundles}


@pytest.fixture
def runtime(tmp_path: Path, matrix: dict[int, Path]) -> Iterator[tuple[dict[str, str], Path]]:
    """The environment that puts the compose stand-in in place of docker, and its state file."""
    state = tmp_path / "compose-state.json"
    servers = {read_manifest(path).config_hash[:12]: SERVERS[batch] for batch, path in matrix.items()}
    state.write_text(json.dumps({"guidellm": GUIDELLM, "servers": servers}))
    shim = tmp_path / "bin" / "docker"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{DOUBLES / "compose_runtime.py"}" "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NEURONC_CONTAINER_RUNTIME": str(shim),
        "NEURONC_FAKE_COMPOSE_STATE": str(state),
        "NEURONC_GUIDELLM": str(GUIDELLM),
    }
    yield env, state
    for pid in json.loads(state.read_text()).get("running", {}).values():  # a failed test leaves no server
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def alive(pid: int) -> bool:
    """A process that runs (a zombie, reaped by no one in a container, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def bench(env: dict[str, str], args: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "neuronc", "bench", *args, "--image", IMAGE, "--tokenizer", str(TOKENIZER), "--json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:  # say where it stood: the bench's progress and GuideLLM's logs
        out = Path(args[args.index("--out") + 1])
        logs = [f"== {log}\n{log.read_text(errors='replace')[-1500:]}" for log in sorted(out.glob("runs/*/*.log"))]
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
        raise AssertionError(f"bench ran past {timeout} s\n{stderr[-2000:]}\n" + "\n".join(logs)) from None
    assert done.stdout.strip(), done.stderr[-3000:]  # --json: one document on stdout, success or failure
    sys.path.insert(0, str(REPO / "tests" / "docs"))
    problems = importlib.import_module("_schemas").problems
    assert problems("bench", json.loads(done.stdout)) == [], done.stdout[:3000]
    return done


# -- the independent computation: GuideLLM's raw reports, nothing from neuronc.benchmark ------------

BOUND_FIELDS = {"ttft": "time_to_first_token_ms", "itl": "inter_token_latency_ms", "tpot": "time_per_output_token_ms"}


def parse_bounds(text: str) -> list[tuple[str, str, float]]:
    """``ttft_p99<=40ms`` -> (GuideLLM metric, statistic, limit in ms)."""
    bounds = []
    for part in text.split(","):
        name, limit = part.split("<=")
        metric, stat = name.split("_")
        value = float(limit.removesuffix("ms").removesuffix("s"))
        bounds.append((BOUND_FIELDS[metric], stat, value if limit.endswith("ms") else value * 1000))
    return bounds


def statistic(summary: dict[str, Any], stat: str) -> float:
    value = summary["mean"] if stat == "mean" else summary["percentiles"][stat]
    assert isinstance(value, float | int)
    return float(value)


def raw_benchmarks(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """bundle directory name -> every benchmark of every GuideLLM report written for it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for run in sorted((out_dir / "runs").iterdir()):
        for report in run.glob("guidellm-*.json"):
            if report.name.endswith(".scenario.json"):
                continue
            found.setdefault(run.name, []).extend(json.loads(report.read_text())["benchmarks"])
    return found


def expected_pick(out_dir: Path, slo: str) -> tuple[str | None, dict[str, float], tuple[str, float] | None]:
    bounds = parse_bounds(slo)
    goodput: dict[str, float] = {}
    closest: tuple[str, float] | None = None
    for run, benchmarks in raw_benchmarks(out_dir).items():
        for b in benchmarks:
            metrics = b["metrics"]
            if metrics["request_totals"]["errored"] or not metrics["request_totals"]["successful"]:
                continue
            excess = max(statistic(metrics[m]["successful"], stat) / limit - 1 for m, stat, limit in bounds)
            if excess <= 0:
                rate = metrics["requests_per_second"]["successful"]["mean"]
                goodput[run] = max(goodput.get(run, 0.0), rate)
            if closest is None or excess < closest[1]:
                closest = (run, excess)
    pick = max(goodput, key=lambda r: goodput[r]) if goodput else None
    return pick, goodput, None if goodput else closest


def run_dir_of(document: dict[str, Any], name: str) -> str:
    index = [b["name"] for b in document["bundles"]].index(name)
    return f"{index:02d}-{Path(document['bundles'][index]['bundle']).name[:16]}"


@needs_guidellm
def test_the_pick_equals_the_one_computed_from_guidellm_reports_for_three_slos(
    runtime: tuple[dict[str, str], Path], matrix: dict[int, Path], tmp_path: Path
) -> None:
    env, state = runtime
    bundles = [str(matrix[b]) for b in sorted(matrix)]
    store, out_dir = tmp_path / "results-store", tmp_path / "out"
    common = [*bundles, "--store", str(store), "--out", str(out_dir), *QUICK]
    # One measurement, three SLOs: the percentile bounds (GuideLLM's goodput search is run for them)
    # are the same, the means differ, so the second and third benches reuse the stored results.
    loose = "ttft_p99<=2s,itl_p99<=1s"
    slos = ((loose, 0), (loose + ",ttft_mean<=40ms", None), (loose + ",tpot_mean<=1ms", 8))
    for slo, code in slos:
        done = bench(env, [*common, "--slo", slo])
        document = json.loads(done.stdout)
        assert code is None or done.returncode == code, done.stderr[-3000:]
        assert not any(b["error"] for b in document["bundles"]), document["bundles"]
        pick, goodput, closest = expected_pick(out_dir, slo)
        decision = document["decision"]
        if pick is None:
            assert done.returncode == 8 and decision["pick"] is None
            assert document["error"]["error"] == "slo_not_met"
            assert closest is not None
            assert run_dir_of(document, decision["closest"]["name"]) == closest[0]
            assert decision["closest"]["excess"] == pytest.approx(closest[1])
            assert "came closest" in decision["reason"]
        else:
            assert done.returncode == 0, done.stderr[-3000:]
            assert run_dir_of(document, decision["pick"]["name"]) == pick
            assert decision["pick"]["goodput_rps"] == pytest.approx(goodput[pick])
            meeting = {run_dir_of(document, c["name"]): c["goodput_rps"] for c in decision["meeting"]}
            assert meeting == pytest.approx(goodput)
        assert json.loads(state.read_text()).get("running") == {}  # every stack stopped
    # Each bundle's stack started once: the second and third benches measured nothing.
    calls = json.loads(state.read_text())["calls"]
    assert len([c for c in calls if c[-2:] == ["up", "-d"]]) == len(matrix)
    assert all("stored results" in b["marks"] for b in document["bundles"])


@needs_guidellm
def test_a_bundle_that_never_becomes_healthy_or_whose_guidellm_fails_is_its_row(
    runtime: tuple[dict[str, str], Path], matrix: dict[int, Path], tmp_path: Path
) -> None:
    env, state = runtime
    data = json.loads(state.read_text())
    data["servers"].pop(read_manifest(matrix[4]).config_hash[:12])  # compose up fails for batch 4
    data["servers"][read_manifest(matrix[8]).config_hash[:12]] = {"never_healthy": True}
    state.write_text(json.dumps(data))
    bundles = [str(matrix[b]) for b in (1, 4, 8)]
    args = [*bundles, "--store", str(tmp_path / "s"), "--out", str(tmp_path / "o"), *QUICK, "--health-timeout", "60"]
    done = bench(env, [*args, "--slo", "ttft_p99<=1s"])
    document = json.loads(done.stdout)
    rows = {b["name"]: b for b in document["bundles"]}
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compose up exited 1: no mock server configured" in rows["batch 4"]["error"]
    assert rows["batch 8"]["error"].startswith("docker compose not healthy within 60 s")
    assert rows["batch 1"]["error"] is None and document["decision"]["pick"]["name"] == "batch 1"
    assert json.loads(state.read_text()).get("running") == {}  # the stack that never answered is down too
    broken = tmp_path / "guidellm"
    broken.write_text(f'#!/bin/sh\n[ "$1" = --version ] && exec "{GUIDELLM}" --version\necho "boom" >&2\nexit 3\n')
    broken.chmod(0o755)
    done = bench({**env, "NEURONC_GUIDELLM": str(broken)}, [*args, "--slo", "ttft_p99<=1s", "--rerun"])
    document = json.loads(done.stdout)
    assert done.returncode == 8
    assert all(b["error"] for b in document["bundles"])
    assert "GuideLLM exited 3: boom" in document["bundles"][0]["error"]
    assert json.loads(state.read_text()).get("running") == {}


@needs_guidellm
def test_ctrl_c_stops_the_current_stack_and_keeps_finished_results(
    runtime: tuple[dict[str, str], Path], matrix: dict[int, Path], tmp_path: Path
) -> None:
    env, state = runtime
    out_dir = tmp_path / "o"
    argv = [sys.executable, "-m", "neuronc", "bench", str(matrix[1]), str(matrix[4]), "--slo", "ttft_p99<=1s"]
    argv += [
        "--store",
        str(tmp_path / "s"),
        "--out",
        str(out_dir),
        *QUICK,
        "--image",
        IMAGE,
        "--tokenizer",
        str(TOKENIZER),
    ]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # interrupt once the second bundle's server runs
        running = json.loads(state.read_text()).get("running", {})
        if any(project.endswith(read_manifest(matrix[4]).config_hash[:12]) for project in running):
            break
        assert process.poll() is None, process.communicate()
        time.sleep(0.5)
    time.sleep(2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert json.loads(state.read_text()).get("running") == {}
    started = json.loads(state.read_text())["started"]
    assert len(started) == 2 and not any(alive(pid) for pid in started)
    document = json.loads((out_dir / "bench.json").read_text())
    assert document["interrupted"] is True
    assert [b["name"] for b in document["bundles"]] == ["batch 1"]
    assert document["bundles"][0]["points"]
