"""GuideLLM 0.8.1 as a separate program: its scenarios (a rate sweep, the goodput search) and its runs.

neuronc never imports GuideLLM: it runs ``guidellm run --scenario FILE`` from its own environment
(``--guidellm PATH``, else ``$NEURONC_GUIDELLM``, else ``guidellm`` on PATH) and reads the JSON report
it writes (``neuronc.benchmark.report``). The scenario is GuideLLM's own shape (``spec`` with backend,
tokenizer, profile, data, constraints, metrics, outputs), as ``neuronc deploy`` writes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.benchmark.slo import Slo
from neuronc.errors import EnvironmentIncompatibleError, InvalidInputError

GUIDELLM_ENV = "NEURONC_GUIDELLM"
WANTED_VERSION = "0.8.1"
_VERSION = re.compile(r"(\d+\.\d+\.\d+\S*)")


@dataclass(frozen=True)
class Guidellm:
    executable: str
    version: str


def find_guidellm(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> Guidellm:
    """The GuideLLM program and its version; EnvironmentIncompatibleError (exit 5) when there is none."""
    env = os.environ if environ is None else environ
    named = explicit or env.get(GUIDELLM_ENV) or "guidellm"
    path = shutil.which(named, path=env.get("PATH"))
    hint = (
        f"python -m venv guidellm && guidellm/bin/pip install guidellm=={WANTED_VERSION}; "
        "then --guidellm guidellm/bin/guidellm"
    )
    if path is None:
        raise EnvironmentIncompatibleError(f"GuideLLM not found ({named})", hint=hint)
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        raise EnvironmentIncompatibleError(f"{path} --version failed: {exc}", hint=hint) from exc
    except subprocess.TimeoutExpired:
        raise EnvironmentIncompatibleError(f"{path} --version did not answer within 120 s", hint=hint) from None
    match = _VERSION.search(done.stdout + done.stderr)
    if done.returncode != 0 or match is None:
        raise EnvironmentIncompatibleError(f"{path} --version said no version (exit {done.returncode})", hint=hint)
    version = match.group(1)
    if not version.startswith("0.8."):
        raise EnvironmentIncompatibleError(f"{path} is GuideLLM {version}; neuronc reads 0.8.x reports", hint=hint)
    return Guidellm(path, version)


@dataclass(frozen=True)
class Target:
    """One serving endpoint, as GuideLLM reaches it, and the shapes it accepts."""

    url: str
    model: str
    tokenizer: str  # a tokenizer directory or Hub id for GuideLLM's synthetic data
    concurrency: int  # the most sequences the deployment runs at once (batch x replicas)
    max_prompt: int
    max_total: int


@dataclass(frozen=True)
class Traffic:
    """GuideLLM synthetic data: prompt and output lengths (mean, stdev, min, max)."""

    prompt: tuple[int, int, int, int]
    output: tuple[int, int, int, int]
    source: str

    def sized_for(self, target: Target) -> Traffic:
        """Within what ``target`` accepts: prompts at most its longest, prompt + output within its total."""
        margin = 2  # BOS and special tokens the server may add
        p_mean, p_sd, p_min, p_max = self.prompt
        o_mean, o_sd, o_min, o_max = self.output
        p_max = max(1, min(p_max, target.max_prompt - margin))
        o_max = max(1, min(o_max, target.max_total - p_max - margin))
        p_min, o_min = min(p_min, p_max), min(o_min, o_max)
        return Traffic(
            (min(max(p_mean, p_min), p_max), p_sd, p_min, p_max),
            (min(max(o_mean, o_min), o_max), o_sd, o_min, o_max),
            self.source,
        )

    def data_spec(self) -> dict[str, Any]:
        p_mean, p_sd, p_min, p_max = self.prompt
        o_mean, o_sd, o_min, o_max = self.output
        spec: dict[str, Any] = {
            "kind": "synthetic_text",
            "prompt_tokens": p_mean,
            "prompt_tokens_min": p_min,
            "prompt_tokens_max": p_max,
            "output_tokens": o_mean,
            "output_tokens_min": o_min,
            "output_tokens_max": o_max,
        }
        if p_sd:
            spec["prompt_tokens_stdev"] = p_sd
        if o_sd:
            spec["output_tokens_stdev"] = o_sd
        return spec

    def to_json(self) -> dict[str, Any]:
        return {"prompt": list(self.prompt), "output": list(self.output), "source": self.source}


def default_traffic(target: Target) -> Traffic:
    """neuronc deploy's sizing (``neuronc.deploy.benchmark.token_counts``): prompts 3/4 of the longest."""
    from neuronc.deploy.benchmark import Endpoint, token_counts

    counts = token_counts(Endpoint(target.url, target.model, target.concurrency, target.max_prompt, target.max_total))
    stdev = max(1, counts.prompt // 10)
    return Traffic(
        (counts.prompt, stdev, 1, counts.prompt_max), (counts.output, 0, counts.output, counts.output), "neuronc"
    )


def traffic_from(path_or_spec: str) -> Traffic:
    """``--data`` / ``--traffic``: a GuideLLM synthetic spec or a traffic file (``buckets --traffic`` reads both),
    as lengths GuideLLM's synthetic data reproduces (mean, stdev, min, max of prompt and output)."""
    import statistics

    from neuronc.buckets.traffic import load_traffic

    traffic = load_traffic(path_or_spec)
    prompts = [r.prompt_tokens for r in traffic.requests]
    outputs = [max(1, r.output_tokens) for r in traffic.requests]
    if not prompts:
        raise InvalidInputError(f"{path_or_spec}: no requests in the traffic")

    def shape(values: list[int]) -> tuple[int, int, int, int]:
        stdev = round(statistics.pstdev(values)) if len(values) > 1 else 0
        return (round(statistics.fmean(values)), stdev, min(values), max(values))

    return Traffic(shape(prompts), shape(outputs), f"{traffic.format}:{traffic.source}")


def _spec(target: Target, traffic: Traffic, profile: dict[str, Any], seconds: float, out: Path) -> dict[str, Any]:
    return {
        "backend": {
            "kind": "openai_http",
            "target": target.url,
            "model": target.model,
            "request_format": "/v1/completions",
            "stream": True,
            "validate_backend": True,
        },
        "tokenizer": {"kind": "huggingface_auto", "model": target.tokenizer},
        "profile": profile,
        "data": [traffic.data_spec()],
        "constraints": [{"kind": "max_duration", "seconds": seconds}],
        "outputs": [{"kind": "json", "path": str(out)}],
    }


def sweep_scenario(
    target: Target, traffic: Traffic, *, sweep_size: int, seconds: float, out: Path, slo: Slo | None = None
) -> dict[str, Any]:
    """A rate sweep (synchronous, throughput, then constant rates between), concurrency capped at the target's."""
    profile = {"kind": "sweep", "sweep_size": sweep_size, "max_concurrency": target.concurrency}
    spec = _spec(target, traffic, profile, seconds, out)
    objectives = None if slo is None else slo.goodput_objectives()
    if objectives is not None:
        spec["metrics"] = {"kind": "generative", "slo": objectives[0], "sample_size": 8}
    else:
        spec["metrics"] = {"kind": "generative", "sample_size": 8}
    return {"metadata": {"name": f"neuronc-bench-sweep-{target.model}"}, "spec": spec}


def goodput_scenario(
    target: Target, traffic: Traffic, slo: Slo, *, seconds: float, max_probes: int, out: Path
) -> dict[str, Any] | None:
    """GuideLLM's goodput search (the highest concurrency meeting the SLO's per-request objectives), or None
    when the SLO has no bound it can search on (means only, or tpot only)."""
    objectives = slo.goodput_objectives()
    if objectives is None:
        return None
    slo_fields, attainment = objectives
    profile = {
        "kind": "goodput",
        "target_attainment": attainment,
        "initial_streams": 1,
        "max_streams": max(1, 2 * target.concurrency),
        "max_probes": max_probes,
    }
    spec = _spec(target, traffic, profile, seconds, out)
    spec["metrics"] = {"kind": "generative", "slo": slo_fields, "sample_size": 8}
    return {"metadata": {"name": f"neuronc-bench-goodput-{target.model}"}, "spec": spec}


class GuidellmFailed(Exception):
    """One GuideLLM run failed: the row's error, not the whole bench."""


class GuidellmStalled(GuidellmFailed):
    """One GuideLLM run went past its bound (``run_bound``) and was stopped."""


# GuideLLM's own start (imports, tokenizer, backend validation) and, per benchmark, its warm-up, the
# cancelling of requests in flight at the end and the report. Generous: a bound is for a run that hangs
# (GuideLLM can stall between the benchmarks of a run: vllm-project/guidellm#431, #1152), never for a slow one.
_START_ALLOWANCE_S = 120.0
_PER_BENCHMARK_ALLOWANCE_S = 30.0


def run_bound(benchmarks: int, seconds: float) -> float:
    """Seconds a GuideLLM run of ``benchmarks`` benchmarks of ``seconds`` each may take before it counts as
    stalled: its start, then twice each benchmark's duration plus a fixed allowance."""
    return _START_ALLOWANCE_S + benchmarks * (2 * seconds + _PER_BENCHMARK_ALLOWANCE_S)


def run_scenario(
    guidellm: Guidellm,
    scenario: Path,
    log: Path,
    *,
    timeout: float,
    on_line: Callable[[str], None] | None = None,
) -> None:
    """``guidellm run --scenario FILE`` with its output in ``log``; GuidellmFailed on a non-zero exit,
    GuidellmStalled past ``timeout`` seconds.

    GuideLLM runs in its own process group: a Ctrl-C here stops it (SIGINT, then SIGKILL) before it propagates.
    """
    argv = [guidellm.executable, "run", "--scenario", str(scenario), "--disable-console-interactive"]
    env = {**os.environ, "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "WARNING"}
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    stop_group(proc)
                    raise GuidellmStalled(f"GuideLLM ran past {timeout:.0f} s and was stopped (log: {log})")
                time.sleep(0.2)
        except BaseException:
            stop_group(proc)
            raise
        stop_group(proc)  # workers GuideLLM left behind (its own group, nothing else)
    if proc.returncode != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        said = f": {tail[0].strip()[:200]}" if tail else ""
        raise GuidellmFailed(f"GuideLLM exited {proc.returncode}{said} (log: {log})")


def stop_group(proc: subprocess.Popen[Any], grace: float = 10.0, first: int = signal.SIGINT) -> None:
    """Stop a process started with ``start_new_session=True`` and everything it started: ``first`` (SIGINT),
    then SIGKILL after ``grace`` seconds; then whatever is left of its group."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    for sig, wait in ((first, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


__all__ = [
    "GUIDELLM_ENV",
    "Guidellm",
    "GuidellmFailed",
    "GuidellmStalled",
    "Target",
    "Traffic",
    "default_traffic",
    "find_guidellm",
    "goodput_scenario",
    "run_bound",
    "run_scenario",
    "stop_group",
    "sweep_scenario",
    "traffic_from",
]
