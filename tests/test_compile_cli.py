"""`neuronc compile`: exit codes, --json, --report, --only, --out, and signals, end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from click.testing import CliRunner
from plugins import pipeline_backend

from neuronc._output import out
from neuronc.bundle import read_manifest, verify_bundle
from neuronc.cli import app

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# The CLI in a fresh interpreter, with the test backends registered as an installed plugin would be.
CLI = (
    f"import sys; sys.path.insert(0, {str(TESTS)!r}); from plugins import pipeline_backend; "
    "pipeline_backend.register(); from neuronc.cli import main; main(sys.argv[1:])"
)


@pytest.fixture(autouse=True)
def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    monkeypatch.setenv("NEURONC_STORE", str(tmp_path / "store"))
    yield
    pipeline_backend.unregister()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    write_tiny_llama(tmp_path / "model")
    return tmp_path


def invoke(runner: CliRunner, *args: str | Path) -> tuple[int, str, str]:
    out.reset()  # the output object keeps the consoles of the previous invocation's streams
    result = runner.invoke(app, ["compile", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_json_report_then_hit(runner: CliRunner, ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    code, stdout, stderr = invoke(runner, profile, "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert (data["schema_version"], data["exit_code"], data["summary"]["built"]) == (1, 0, 1)
    [b] = data["builds"]
    assert b["status"] == "built" and len(b["config_hash"]) == 64 and len(b["toolchain_key"]) == 64
    assert {"plan", "lookup", "resolve", "split", "model_files", "compile", "publish"} <= set(b["stage_seconds"])
    assert all(s["wall_seconds"] >= 0 and s["peak_rss_bytes"] > 0 for s in b["stages"])
    assert b["peak_rss_bytes"] > 0 and verify_bundle(b["bundle"]).ok
    assert [g["name"] for g in b["graphs"]] == ["cte-b1-s16", "cte-b1-s32", "tkg-b1-s64"]

    code, stdout, _ = invoke(runner, profile, "--json")
    again = json.loads(stdout)["builds"][0]
    assert code == 0 and again["status"] == "hit" and again["bundle"] == b["bundle"]


def test_human_output_has_a_summary_table(runner: CliRunner, ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    code, stdout, stderr = invoke(runner, profile, "--out", ws / "demo")
    assert code == 0, stderr
    assert "built" in stdout and "peak RSS" in stdout and f"→ {ws / 'demo'}" in stdout
    assert "✓" in stderr and "built" in stderr
    code, stdout, stderr = invoke(runner, profile)
    assert code == 0 and "hit" in stdout and "store hit" in stderr


def test_failure_exit_codes_and_report_file(runner: CliRunner, ws: Path) -> None:
    failing = write_profile(ws / "failing.yaml", options={"fail": True})
    good = write_profile(ws / "good.yaml")
    report = ws / "ci" / "report.json"
    code, _stdout, stderr = invoke(runner, failing, good, "--report", report)
    assert code == 3
    assert "error:" in stderr and "aten::frobnicate" in stderr and "last lines of" in stderr
    data = json.loads(report.read_text())
    assert data["exit_code"] == 3
    assert [(b["status"], b["exit_code"]) for b in data["builds"]] == [("failed", 3), ("built", 0)]
    assert data["builds"][0]["error"]["log_path"]


def test_require_hit_is_exit_6(runner: CliRunner, ws: Path) -> None:
    code, stdout, _stderr = invoke(runner, write_profile(ws / "p.yaml"), "--require-hit", "--json")
    assert code == 6
    [b] = json.loads(stdout)["builds"]
    assert b["error"]["error"] == "cache_miss"


def test_unavailable_backend_is_exit_5_and_the_report_says_why(runner: CliRunner, ws: Path) -> None:
    report = ws / "report.json"
    code, _stdout, stderr = invoke(runner, write_profile(ws / "p.yaml", backend="missing"), "--report", report)
    assert code == 5
    assert "cannot compile on this machine" in stderr and "pip install" in stderr
    data = json.loads(report.read_text())
    assert data["exit_code"] == 5 and data["builds"] == [] and data["error"]["error"] == "backend_unavailable"
    assert not (ws / "compiles.log").exists()


def test_invalid_input_is_exit_2(runner: CliRunner, ws: Path) -> None:
    code, _, stderr = invoke(runner, ws / "nope.yaml")
    assert code == 2 and "no such profile" in stderr
    code, _, stderr = invoke(runner, write_profile(ws / "p.yaml"), "--only", "zz")
    assert code == 2 and "--only" in stderr
    code, _, stderr = invoke(runner, write_profile(ws / "p.yaml"), "--store", "ftp://host/bundles")
    assert code == 2 and "unsupported scheme" in stderr


def test_only_builds_one_bundle_of_a_matrix(runner: CliRunner, ws: Path) -> None:
    profile = write_profile(ws / "m.yaml", matrix={"batch_size": [1, 2]})
    code, stdout, _ = invoke(runner, profile, "--require-hit", "--json")
    keys = [b["config_hash"] for b in json.loads(stdout)["builds"]]
    code, stdout, stderr = invoke(runner, profile, "--only", keys[1][:16], "--json")
    assert code == 0, stderr
    [b] = json.loads(stdout)["builds"]
    assert (b["build_index"], b["status"], b["config_hash"]) == (1, "built", keys[1])


def test_store_option_overrides_the_environment(runner: CliRunner, ws: Path) -> None:
    code, stdout, stderr = invoke(runner, write_profile(ws / "p.yaml"), "--store", ws / "elsewhere", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["builds"][0]["bundle"].startswith(str(ws / "elsewhere"))


# -- whole processes ------------------------------------------------------------------------------


def _spawn(ws: Path, *args: str | Path) -> subprocess.Popen[str]:
    env = {**os.environ, "NEURONC_STORE": str(ws / "store"), "XDG_CACHE_HOME": str(ws / "cache")}
    return subprocess.Popen(
        [sys.executable, "-c", CLI, "compile", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ws,
    )


def _wait_for_staging(ws: Path, timeout: float = 30) -> None:
    staging = ws / "store" / ".staging"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if staging.is_dir() and any(p.is_dir() for p in staging.iterdir()):
            return
        time.sleep(0.02)
    raise AssertionError("no staging directory appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_compile_is_exit_130_and_leaves_nothing(ws: Path, sig: signal.Signals) -> None:
    profile = write_profile(ws / "p.yaml", options={"sleep": 2})
    report = ws / "report.json"
    proc = _spawn(ws, profile, "--report", report)
    _wait_for_staging(ws)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    staging = ws / "store" / ".staging"
    assert [p.name for p in staging.iterdir() if p.is_dir()] == []
    assert json.loads(report.read_text())["interrupted"] is True
    # The next run builds normally.
    proc = _spawn(ws, write_profile(ws / "q.yaml"), "--json")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["builds"][0]["status"] == "built"


def test_hit_does_not_import_torch_or_transformers(ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    assert _spawn(ws, profile).wait(timeout=60) == 0
    # Same CLI, and at exit the heavy modules it imported, on stderr.
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted({'torch', 'transformers', 'numpy'} & set(sys.modules)), file=sys.stderr))\n"
        + CLI
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "compile", str(profile), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "NEURONC_STORE": str(ws / "store")},
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["builds"][0]["status"] == "hit"
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr


def test_out_bundle_reads_back(runner: CliRunner, ws: Path) -> None:
    code, _, stderr = invoke(runner, write_profile(ws / "p.yaml"), "-o", ws / "bundle")
    assert code == 0, stderr
    assert read_manifest(ws / "bundle").backend == "pipeline"
