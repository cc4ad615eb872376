"""The bench's parts that need no server: stored results, traffic sizing, GuideLLM's scenarios, finding GuideLLM."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from _demo import Demo

from neuronc.benchmark import results
from neuronc.benchmark.guidellm import Target, Traffic, find_guidellm, goodput_scenario, sweep_scenario, traffic_from
from neuronc.benchmark.report import GoodputSearch, Point
from neuronc.benchmark.slo import parse_slo
from neuronc.errors import EnvironmentIncompatibleError
from neuronc.store import open_store

TARGET = Target("http://127.0.0.1:9", "demo", "tok", 4, 64, 128)
POINT = Point("constant", 2.0, 1.9, 30.0, 20, 0, 1, {"time_to_first_token_ms": {"p99": 80.0}})


def test_results_are_stored_by_bundle_host_scenario_and_guidellm_version(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    key = results.bundle_key("a" * 64, "b" * 64)
    scenario = {"traffic": {"prompt": [24, 2, 1, 30]}, "seconds": 3}
    search = GoodputSearch(2, 4, "converged", 1.5)
    measured = results.Measured("goodput", "inf2.xlarge", scenario, "0.8.1", (POINT,), search, 12.5, results.now())
    results.save(store, key, measured)
    found = results.find(store, key, results.entry_key("goodput", "inf2.xlarge", scenario, "0.8.1"))
    assert found == measured
    for other in (
        results.entry_key("goodput", "inf2.8xlarge", scenario, "0.8.1"),  # another instance
        results.entry_key("goodput", "inf2.xlarge", {**scenario, "seconds": 4}, "0.8.1"),  # another scenario
        results.entry_key("goodput", "inf2.xlarge", scenario, "0.8.2"),  # another GuideLLM
        results.entry_key("sweep", "inf2.xlarge", scenario, "0.8.1"),
    ):
        assert results.find(store, key, other) is None
    rows = results.summary(store, "a" * 64, "b" * 64)
    assert [(r["kind"], r["host"], r["benchmarks"], r["max_requests_per_second"]) for r in rows] == [
        ("goodput", "inf2.xlarge", 1, 1.9)
    ]
    assert results.summary(store, "c" * 64, "b" * 64) == []


def test_traffic_is_sized_to_what_the_bundle_accepts() -> None:
    wide = Traffic((300, 40, 10, 900), (200, 10, 100, 400), "file")
    sized = wide.sized_for(TARGET)
    assert sized.prompt == (62, 40, 10, 62)  # at most the largest context bucket, less 2 for special tokens
    assert sized.output == (64, 10, 64, 64)  # prompt + output within the sequence length
    spec = sized.data_spec()
    assert spec["prompt_tokens_max"] + spec["output_tokens_max"] <= TARGET.max_total


def test_a_guidellm_data_spec_becomes_the_traffic() -> None:
    traffic = traffic_from("prompt_tokens=24,output_tokens=16")
    assert traffic.prompt[0] == pytest.approx(24, abs=1) and traffic.output[0] == pytest.approx(16, abs=1)


def test_the_scenarios_are_guidellm_shaped() -> None:
    traffic = Traffic((24, 2, 1, 30), (16, 0, 16, 16), "t")
    out = Path("/tmp/r.json")
    sweep = sweep_scenario(TARGET, traffic, sweep_size=4, seconds=5, out=out)["spec"]
    assert sweep["profile"] == {"kind": "sweep", "sweep_size": 4, "max_concurrency": 4}
    assert sweep["backend"]["target"] == TARGET.url and sweep["outputs"] == [{"kind": "json", "path": str(out)}]
    goodput = goodput_scenario(
        TARGET, traffic, parse_slo("ttft_p95<=1s,itl_p99<=40ms"), seconds=5, max_probes=3, out=out
    )
    assert goodput is not None
    spec = goodput["spec"]
    assert spec["profile"]["kind"] == "goodput" and spec["profile"]["target_attainment"] == 0.99
    assert spec["metrics"]["slo"] == {"ttft_ms": 1000.0, "tpot_ms": 40.0}
    assert goodput_scenario(TARGET, traffic, parse_slo("ttft_mean<=1s"), seconds=5, max_probes=3, out=out) is None


def test_no_guidellm_is_exit_5_with_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentIncompatibleError, match="GuideLLM not found") as info:
        find_guidellm(None, {"PATH": str(tmp_path)})
    assert info.value.exit_code == 5 and info.value.hint and "guidellm==0.8.1" in info.value.hint
    fake = tmp_path / "guidellm"
    fake.write_text("#!/bin/sh\necho 'guidellm version: 0.9.0'\n")
    fake.chmod(0o755)
    with pytest.raises(EnvironmentIncompatibleError, match=r"is GuideLLM 0\.9\.0"):
        find_guidellm(str(fake), {"PATH": str(tmp_path)})


def test_a_port_in_use_is_the_row_error_before_anything_starts(tmp_path: Path) -> None:
    import socket

    from neuronc.benchmark.stack import StackFailed, start_compose, start_cpu

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(StackFailed, match=f"port {port} is in use"):
            start_cpu(tmp_path, port, tmp_path / "log")
        with pytest.raises(StackFailed, match=f"port {port} is in use"):
            start_compose(tmp_path / "docker-compose.yml", "p", port, tmp_path / "log", "docker")


def test_a_server_that_exits_or_never_answers_is_stopped_with_its_children(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    from neuronc.benchmark.stack import Stack, StackFailed, free_port

    log = tmp_path / "server.log"
    log.write_text("Address already in use\n")
    exits = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], start_new_session=True)
    stack = Stack(f"http://127.0.0.1:{free_port()}", log, "neuronc serve", exits)
    with pytest.raises(StackFailed, match="neuronc serve exited 3 before it was healthy: Address already in use"):
        stack.wait_healthy(30)
    # A server (and the child it started) that never answers: the bound, then nothing left running.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    hangs = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    stack = Stack(f"http://127.0.0.1:{free_port()}", log, "neuronc serve", hangs)
    started = time.monotonic()
    with pytest.raises(StackFailed, match="not healthy within 2 s"):
        stack.wait_healthy(2)
    stack.stop()
    assert time.monotonic() - started < 60
    assert hangs.poll() is not None
    ps = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True, check=False).stdout
    assert [line for line in ps.splitlines() if line.split()[0] == str(hangs.pid) and "Z" not in line.split()[1]] == []


def test_a_stalled_guidellm_run_is_stopped_at_its_bound_with_everything_it_started(tmp_path: Path) -> None:
    """GuideLLM can stall between the benchmarks of a run (vllm-project/guidellm#431): past its bound the
    run is stopped, its worker processes with it, and the stall is its own error (bench runs it once more).
    The program here stands in for a stalled GuideLLM: it starts a worker and never exits."""
    import subprocess
    import sys
    import time

    from neuronc.benchmark.guidellm import Guidellm, GuidellmStalled, run_bound, run_scenario

    # The bound scales with the work asked: 120 s to start, then 2 x seconds + 30 s per benchmark.
    assert run_bound(3, 3.0) == 120 + 3 * 36
    assert run_bound(5, 10.0) == 120 + 5 * 50
    marker = f"stalled-guidellm-{tmp_path.name}"
    stalls = tmp_path / "guidellm"
    stalls.write_text(
        f"#!{sys.executable}\nimport subprocess, sys, time\nprint('starting benchmarks', flush=True)\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'])\ntime.sleep(600)\n"
    )
    stalls.chmod(0o755)
    log = tmp_path / "guidellm-sweep.log"
    started = time.monotonic()
    with pytest.raises(GuidellmStalled, match=r"GuideLLM ran past 5 s and was stopped \(log: .*guidellm-sweep.log\)"):
        run_scenario(Guidellm(str(stalls), "0.8.1"), tmp_path / "scenario.json", log, timeout=5)
    assert time.monotonic() - started < 60
    ps = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=False).stdout
    left = [line for line in ps.splitlines() if marker in line and not line.lstrip().startswith("Z")]
    assert left == [], f"the stalled run left {left}"


def test_inspect_shows_the_stored_results_of_a_bundle_in_its_store(demo: Demo, tmp_path: Path) -> None:
    """`inspect` of a bundle in a local store shows what `bench` stored for it (a real GuideLLM 0.8.1 sweep
    report); `--store` names another store; a bundle outside any store has no section."""
    import gzip
    import json
    import shutil

    from click.testing import CliRunner

    from neuronc.benchmark.report import parse_report
    from neuronc.bundle import read_manifest
    from neuronc.cli import app
    from neuronc.store import LocalStore

    manifest = read_manifest(demo.bundle)
    store = LocalStore(tmp_path / "store")
    bundle = store.path_for(manifest)
    shutil.copytree(demo.bundle, bundle)
    fixture = Path(__file__).parent / "fixtures" / "guidellm" / "sweep-mock-0.8.1.json.gz"
    report = parse_report(json.loads(gzip.decompress(fixture.read_bytes())))
    scenario = {"traffic": {"prompt": [24, 0, 24, 24]}, "concurrency": 1, "sweep_size": 3, "seconds": 3}
    measured = results.Measured(
        "sweep", results.cpu_host(), scenario, "0.8.1", report.points, None, 4.25, results.now()
    )
    results.save(store, results.bundle_key(manifest.config_hash, manifest.toolchain_key), measured)
    highest = max(p.requests_per_second for p in report.points)

    def inspect(*args: str) -> dict[str, Any]:
        done = CliRunner().invoke(app, ["inspect", *args, "--json"])
        assert done.exit_code == 0, done.output
        sys.path.insert(0, str(Path(__file__).parent / "docs"))
        assert importlib.import_module("_schemas").problems("inspect", json.loads(done.stdout)) == []
        return dict(json.loads(done.stdout))

    [run] = inspect(str(bundle))["bench"]
    assert (run["kind"], run["host"], run["benchmarks"]) == ("sweep", results.cpu_host(), len(report.points))
    assert run["max_requests_per_second"] == highest and run["time_to_ready_s"] == 4.25
    assert run["scenario"] == scenario and run["guidellm_version"] == "0.8.1"
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    assert "bench" not in inspect(str(copy))  # outside a store: nothing to ask
    assert inspect(str(copy), "--store", str(store.root))["bench"] == [run]
    assert inspect(str(copy), "--store", str(tmp_path / "empty"))["bench"] == []
    text = CliRunner().invoke(app, ["inspect", str(bundle)], terminal_width=200)
    assert text.exit_code == 0 and "stored bench results" in text.output and "sweep" in text.output
