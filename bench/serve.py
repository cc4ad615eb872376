"""`neuronc serve` against the bare compiled graphs, in one run: decode throughput, batching, start-up.

Usage: python bench/serve.py [--bundle DIR] [--rounds N] [--json]

Without ``--bundle`` the demo profile is compiled first (untimed) with ``batch_size: 4`` (a 4-slot
bundle) into a scratch store. Then, on the same bundle:

1. **decode throughput at full batch, server vs bare graphs.** The bare loop is a process of its own
   (started with the environment `neuronc serve` sets) calling the bundle's graphs itself (``InductorRunner.prefill`` then ``step`` per token, argmax, as `neuronc
   run` does) for 4 prompts at once; the server gets the same 4 prompts as 4 concurrent
   non-streamed requests (greedy, ``ignore_eos``). Each is timed generating ``SHORT`` and ``LONG``
   tokens per row; the steady-state decode rate is the difference, ``4 x (LONG - SHORT)`` tokens over
   the difference in wall time: the prefill and each request's fixed cost (HTTP, JSON, tokenizing)
   cancel out, what is left is the cost of one more decode step for the whole batch. Also printed:
   the end-to-end rate (``4 x LONG`` tokens over the whole wall, fixed costs included).
   Target (issue 42): server >= 0.8x the bare loop.
2. **batch 4 vs batch 1 on the 4-slot bundle**: the server's steady-state decode rate with 4 concurrent
   requests against 1 request at a time. Target: batch 4 above batch 1.
3. **start-up**: `neuronc serve` from process start to ``GET /health`` answering 200, against the
   whole `neuronc run BUNDLE -n 1` process (its load: imports, graphs, warm-up, one token). Pairs run
   A B A B ...; the median of the pairwise ratios. Target: at most 1.5x.

Within a round the measurements alternate (bare, server, server at batch 1; short, long, long,
short) so that a machine whose speed drifts compares like with like; the medians of the per-round
ratios are reported. On a shared machine the speed of one run swings several-fold from second to
second: read the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _process import timed  # bench/ is sys.path[0] when a bench runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
PROFILE = ROOT / "profiles" / "tiny-llama-cpu.yaml"
PROMPTS = ["The quick brown fox", "Alice was beginning", "Down the rabbit hole", "The Queen of Hearts"]
SHORT, LONG = 8, 96
TARGETS = {"server_vs_bare": 0.8, "batch4_vs_batch1": 1.0, "startup_vs_run": 1.5}


def compile_four_slots(scratch: Path, env: dict[str, str]) -> str:
    """The demo profile with batch_size 4, compiled into a scratch store."""
    shutil.copytree(PROFILE.parent / "models" / "tiny-llama", scratch / "models" / "tiny-llama")
    text = PROFILE.read_text().replace("batch_size: 1", "batch_size: 4").replace("name: tiny-llama-cpu", "name: b4")
    profile = scratch / "tiny-llama-cpu-b4.yaml"
    profile.write_text(text)
    cmd = [sys.executable, "-m", "neuronc", "compile", str(profile), "--json"]
    out = subprocess.run(cmd, cwd=ROOT, env={**env, "NEURONC_STORE": str(scratch / "store")}, capture_output=True)
    if out.returncode != 0:
        raise SystemExit(f"compiling the 4-slot demo failed (exit {out.returncode}):\n{out.stderr.decode()[-3000:]}")
    return str(json.loads(out.stdout)["builds"][0]["bundle"])


def bare_seconds(runner: Any, prompts: list[list[int]], tokens: int) -> float:
    """Prefill then ``tokens - 1`` decode steps of every row, greedy: the graphs called directly."""
    import torch

    started = time.perf_counter()
    logits, _ = runner.prefill(prompts)
    picked = torch.argmax(logits, dim=-1).tolist()
    rows = len(prompts)
    for step in range(tokens - 1):
        positions = [len(p) + step for p in prompts]
        logits = runner.step(picked[:rows], positions)
        picked = torch.argmax(logits, dim=-1).tolist()
    return time.perf_counter() - started


class BareLoop:
    """The bare loop in a process of its own, started as `neuronc serve` starts (same environment,
    same thread that warmed the graphs up): ``seconds(n)`` times ``bare_seconds`` there."""

    def __init__(self, bundle: str, env: dict[str, str]) -> None:
        cmd = [sys.executable, __file__, "--bare-worker", bundle]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        if self._out.readline().strip() != "ready":
            raise SystemExit("the bare-loop worker did not start")

    def seconds(self, tokens: int) -> float:
        self._in.write(f"{tokens}\n")
        self._in.flush()
        return float(self._out.readline())

    def close(self) -> None:
        self._in.close()
        self.proc.wait(60)


def bare_worker(bundle: str) -> None:
    from neuronc.runtime import runnable_backend
    from neuronc.serve.server import apply_environment

    backend = runnable_backend(bundle)
    apply_environment(backend)
    runner = backend.runtime.load(bundle)
    ids = [runner.encode(p) for p in PROMPTS]
    print("ready", flush=True)
    for line in sys.stdin:
        print(bare_seconds(runner, ids, int(line)), flush=True)


def server_seconds(port: int, prompts: list[str], tokens: int, *, concurrent: bool) -> float:
    """Wall time of ``prompts`` as non-streamed requests (all at once, or one after another)."""

    def one(prompt: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = json.loads(response.read())
        conn.close()
        if response.status != 200 or data["usage"]["completion_tokens"] != tokens:
            raise SystemExit(f"request failed: {response.status} {data}")

    started = time.perf_counter()
    if concurrent:
        threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for p in prompts:
            one(p)
    return time.perf_counter() - started


def steady_rate(tokens: int, short_s: float, long_s: float) -> float:
    """Tokens per second of the decode steps alone: ``tokens`` more tokens took ``long_s - short_s`` more."""
    return tokens / max(long_s - short_s, 1e-9)


def startup_pairs(bundle: str, rounds: int, env: dict[str, str]) -> list[tuple[float, float]]:
    """(neuronc run -n 1 wall, neuronc serve start -> /health wall) pairs."""
    from _serve import start_server

    run_cmd = [sys.executable, "-m", "neuronc", "run", bundle, "--prompt", PROMPTS[0], "-n", "1"]
    pairs = []
    for i in range(rounds + 1):
        run_wall, _ = timed(run_cmd, env, ROOT)
        log = Path(tempfile.mkdtemp(prefix="neuronc-bench-serve-")) / "serve.log"
        started = time.perf_counter()
        server = start_server(Path(bundle), log, env=env)
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.005)
        serve_wall = time.perf_counter() - started
        server.stop()
        shutil.rmtree(log.parent, ignore_errors=True)
        if i:  # the first pair warms the page cache and .pyc files
            pairs.append((run_wall, serve_wall))
    return pairs


def bench(bundle: str, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    from _serve import start_server

    from neuronc.bundle import read_manifest

    if read_manifest(bundle).batch_size != 4:
        raise SystemExit(f"{bundle}: batch size {read_manifest(bundle).batch_size}; this bench needs a 4-slot bundle")
    bare_loop = BareLoop(bundle, env)
    log = Path(tempfile.mkdtemp(prefix="neuronc-bench-serve-")) / "serve.log"
    server = start_server(Path(bundle), log, env=env)
    rows: list[dict[str, float]] = []
    try:
        for i in range(rounds + 1):
            bare: dict[int, float] = dict.fromkeys((SHORT, LONG), 0.0)
            full: dict[int, float] = dict.fromkeys((SHORT, LONG), 0.0)
            single: dict[int, float] = dict.fromkeys((SHORT, LONG), 0.0)
            # A B A B in the order short, long, long, short: a machine whose speed drifts within
            # the round weighs on both sides alike.
            for n in (SHORT, LONG, LONG, SHORT):
                bare[n] += bare_loop.seconds(n) / 2
                full[n] += server_seconds(server.port, PROMPTS, n, concurrent=True) / 2
                single[n] += server_seconds(server.port, PROMPTS[:1], n, concurrent=False) / 2
            if i == 0:
                continue  # warm-up round
            more = LONG - SHORT
            rows.append(
                {
                    "bare_steady": steady_rate(4 * more, bare[SHORT], bare[LONG]),
                    "server_steady": steady_rate(4 * more, full[SHORT], full[LONG]),
                    "server_batch1_steady": steady_rate(more, single[SHORT], single[LONG]),
                    "bare_end_to_end": 4 * LONG / bare[LONG],
                    "server_end_to_end": 4 * LONG / full[LONG],
                }
            )
    finally:
        server.stop()
        bare_loop.close()
        shutil.rmtree(log.parent, ignore_errors=True)
    startup = startup_pairs(bundle, rounds, env)

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 1)

    return {
        "bundle": bundle,
        "rounds": rounds,
        "tokens": {"short": SHORT, "long": LONG, "rows": 4},
        "tokens_per_second": {k: median(k) for k in rows[0]},
        "server_vs_bare": round(statistics.median(r["server_steady"] / r["bare_steady"] for r in rows), 3),
        "server_vs_bare_end_to_end": round(
            statistics.median(r["server_end_to_end"] / r["bare_end_to_end"] for r in rows), 3
        ),
        "batch4_vs_batch1": round(statistics.median(r["server_steady"] / r["server_batch1_steady"] for r in rows), 3),
        "startup_seconds": {
            "run_median": round(statistics.median(r for r, _ in startup), 3),
            "serve_to_health_median": round(statistics.median(s for _, s in startup), 3),
        },
        "startup_vs_run": round(statistics.median(s / r for r, s in startup), 3),
        "targets": TARGETS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", help="a 4-slot CPU bundle (default: the demo compiled with batch_size 4)")
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (medians)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--bare-worker", metavar="BUNDLE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        bare_worker(args.bare_worker)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-serve-"))
    try:
        bundle = args.bundle or compile_four_slots(scratch, env)
        results = bench(bundle, args.rounds, env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["host"] = {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
        return
    r, t = results, results["tokens_per_second"]

    def verdict(key: str, above: bool = True) -> str:
        ok = r[key] >= TARGETS[key] if above else r[key] <= TARGETS[key]
        return "ok" if ok else "MISSED"

    print(
        f"steady decode, batch 4: bare graphs {t['bare_steady']} tok/s, server {t['server_steady']} tok/s: "
        f"{r['server_vs_bare']}x (target >= {TARGETS['server_vs_bare']}: {verdict('server_vs_bare')}); "
        f"end to end {t['bare_end_to_end']} vs {t['server_end_to_end']} tok/s ({r['server_vs_bare_end_to_end']}x)"
    )
    print(
        f"server steady decode: batch 4 {t['server_steady']} tok/s, batch 1 {t['server_batch1_steady']} tok/s: "
        f"{r['batch4_vs_batch1']}x (target > 1: {'ok' if r['batch4_vs_batch1'] > 1 else 'MISSED'})"
    )
    s = r["startup_seconds"]
    print(
        f"start-up: serve -> /health {s['serve_to_health_median']} s, run -n 1 {s['run_median']} s: "
        f"{r['startup_vs_run']}x (target <= {TARGETS['startup_vs_run']}: {verdict('startup_vs_run', above=False)})"
    )
    print(f"({r['rounds']} rounds, {r['host']['cpus']} CPUs, load average {r['host']['load_average'][0]})")


if __name__ == "__main__":
    main()
