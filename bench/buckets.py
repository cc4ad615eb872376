"""Buckets from traffic, proven on the CPU backend: the demo's buckets against the suggested ones, in one run.

Usage: python bench/buckets.py [--traffic FILE] [--max-graphs K] [--rounds N] [--work DIR] [--json]

1. Copies the demo profile and model into a scratch directory; compiles the profile as shipped
   (context buckets 32, 64; token bucket 128) with `neuronc compile` into a fresh store and graph
   cache.
2. `neuronc buckets COPY --traffic FILE --max-graphs K --write` on a second copy of the profile
   (default traffic: bench/data/skewed-traffic.jsonl, 400 requests, 85% of them short), then
   compiles that profile the same way.
3. Loads both bundles with `neuronc.runtime.load` (the runtime `neuronc run` uses) and replays
   every request through each: a prompt of ``prompt_tokens`` token ids (from the demo corpus),
   greedy, ``output_tokens`` new tokens (EOS ignored). Padded tokens are counted from the runner's
   own routing (``context_graph_for`` / ``token_graph_for``: bucket minus the real tokens, per prefill
   and per decode step); wall and CPU time are summed over each bundle's generate calls, the two
   bundles taking each request in turn (the order alternating), ``--rounds`` times; the ratios
   are the medians of the rounds' ratios. ``--work DIR`` keeps the store and graph cache there, so a second
   run replays without compiling again (each compile of the demo is minutes on a busy machine).
4. Prints both, and the ratios suggested / default. Target (issue 31): both ratios below 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROFILE = ROOT / "profiles" / "tiny-llama-cpu.yaml"
MODEL = ROOT / "profiles" / "models" / "tiny-llama"
CORPUS = ROOT / "scripts" / "demo-corpus" / "alice29.txt"
TRAFFIC = ROOT / "bench" / "data" / "skewed-traffic.jsonl"


def _neuronc(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", *args, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"neuronc {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _compile(profile: Path, env: dict[str, str]) -> tuple[Path, float]:
    start = time.perf_counter()
    [build] = _neuronc(["compile", str(profile)], env)["builds"]
    return Path(build["bundle"]), time.perf_counter() - start


def _replay(runners: dict[str, Any], requests: list[tuple[int, int]], corpus: list[int]) -> dict[str, dict[str, Any]]:
    """Every request through every runner in turn (the order alternating request by request, so a
    machine whose speed drifts slows both alike): wall and CPU seconds of each runner's generate
    calls, the padded and real tokens by the runner's own routing, and the outputs."""
    result: dict[str, dict[str, Any]] = {
        name: {"wall": 0.0, "cpu": 0.0, "context_padded": 0, "context_real": 0, "token_padded": 0, "token_real": 0,
               "outputs": []}
        for name in runners
    }  # fmt: skip
    names = list(runners)
    for index, (prompt_tokens, output_tokens) in enumerate(requests):
        offset = (index * 37) % (len(corpus) - prompt_tokens)
        ids = corpus[offset : offset + prompt_tokens]
        for name in names if index % 2 == 0 else reversed(names):
            runner, r = runners[name], result[name]
            wall, cpu = time.perf_counter(), time.process_time()
            generated = runner.generate(ids, max_new_tokens=output_tokens, stop_at_eos=False)
            r["wall"] += time.perf_counter() - wall
            r["cpu"] += time.process_time() - cpu
            r["outputs"].append(generated.tokens)
            r["context_padded"] += runner.context_graph_for(prompt_tokens).bucket - prompt_tokens
            r["context_real"] += prompt_tokens
            for position in range(prompt_tokens, prompt_tokens + len(generated.tokens) - 1):
                r["token_padded"] += runner.token_graph_for(position).bucket - (position + 1)
                r["token_real"] += position + 1
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traffic", type=Path, default=TRAFFIC)
    parser.add_argument("--max-graphs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--work", type=Path, help="keep the store and graph cache here (default: a temporary directory)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scratch = args.work or Path(tempfile.mkdtemp(prefix="neuronc-bench-buckets-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        report = _bench(scratch.resolve(), args)
    finally:
        if args.work is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))


def _bench(scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "NEURONC_STORE": str(scratch / "store"), "NEURONC_GRAPH_CACHE": str(scratch / "graphs")}
    shutil.copytree(MODEL, scratch / "models" / "tiny-llama", dirs_exist_ok=True)
    default, suggested = scratch / "default.yaml", scratch / "suggested.yaml"
    shutil.copy(PROFILE, default)
    shutil.copy(PROFILE, suggested)
    analysis = _neuronc(
        ["buckets", str(suggested), "--traffic", str(args.traffic), "--max-graphs", str(args.max_graphs), "--write"],
        env,
    )
    say = (lambda *a: None) if args.json else print
    for name, figures in (("default", analysis["current"]), ("suggested", analysis["suggested"])):
        say(
            f"{name:>9}: context {figures['context_buckets']} token {figures['token_buckets']}: "
            f"{figures['graphs']} graphs, predicted padding {figures['padded_tokens']} tokens ({figures['padded_share']:.1%})"
        )
    bundles = {}
    for name, profile in (("default", default), ("suggested", suggested)):
        bundle, seconds = _compile(profile, env)
        say(f"compiled {name} in {seconds:.1f} s: {bundle}")
        bundles[name] = bundle

    os.environ.update({k: env[k] for k in ("NEURONC_STORE", "NEURONC_GRAPH_CACHE")})
    from neuronc.buckets import load_traffic
    from neuronc.runtime import load

    requests = [(r.prompt_tokens, r.output_tokens) for r in load_traffic(args.traffic).requests]
    runners = {name: load(bundle) for name, bundle in bundles.items()}
    corpus = runners["default"].encode(CORPUS.read_text(encoding="utf-8")[:3000])
    rounds = [_replay(runners, requests, corpus) for _ in range(args.rounds)]
    last = rounds[-1]
    same = sum(a == b for a, b in zip(last["default"]["outputs"], last["suggested"]["outputs"], strict=True))
    report: dict[str, Any] = {"requests": len(requests), "max_graphs": args.max_graphs, "rounds": args.rounds}
    for name in runners:
        c = last[name]
        padded = c["context_padded"] + c["token_padded"]
        report[name] = {
            "context_buckets": runners[name].context_buckets,
            "token_buckets": runners[name].token_buckets,
            **{k: c[k] for k in ("context_padded", "context_real", "token_padded", "token_real")},
            "padded_tokens": padded,
            "padded_share": round(padded / (padded + c["context_real"] + c["token_real"]), 4),
            "wall_seconds": [round(r[name]["wall"], 3) for r in rounds],
            "cpu_seconds": [round(r[name]["cpu"], 3) for r in rounds],
        }
    d, s = report["default"], report["suggested"]
    report["padded_tokens_ratio"] = round(s["padded_tokens"] / d["padded_tokens"], 4)
    wall_ratios = [r["suggested"]["wall"] / r["default"]["wall"] for r in rounds]
    cpu_ratios = [r["suggested"]["cpu"] / r["default"]["cpu"] for r in rounds]
    report["wall_ratio"] = round(statistics.median(wall_ratios), 4)
    report["cpu_ratio"] = round(statistics.median(cpu_ratios), 4)
    report["wall_ratios_by_round"] = [round(x, 4) for x in wall_ratios]
    report["predicted_padded_tokens"] = {
        "default": analysis["current"]["padded_tokens"],
        "suggested": analysis["suggested"]["padded_tokens"],
    }
    report["identical_outputs"] = same
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    report["pass"] = report["padded_tokens_ratio"] < 1 and report["wall_ratio"] < 1
    for name in runners:
        r = report[name]
        say(
            f"{name:>9}: padded {r['padded_tokens']} tokens ({r['padded_share']:.1%}; context {r['context_padded']}, "
            f"token generation {r['token_padded']}); replay wall {r['wall_seconds']} s, CPU {r['cpu_seconds']} s"
        )
    say(
        f"suggested / default: padded tokens {report['padded_tokens_ratio']:.3f}, wall {report['wall_ratio']:.3f} "
        f"(per round {report['wall_ratios_by_round']}), CPU {report['cpu_ratio']:.3f}"
    )
    say(
        f"runner padding equals the prediction: {report['predicted_padded_tokens'] == {n: report[n]['padded_tokens'] for n in runners}}"
    )
    say(
        f"identical greedy outputs: {same} of {len(requests)}; load average {report['load_average']} on {os.cpu_count()} cores"
    )
    say(f"target: both ratios below 1: {'PASS' if report['pass'] else 'FAIL'}")
    return report


if __name__ == "__main__":
    main()
