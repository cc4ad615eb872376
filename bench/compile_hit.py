"""Store-hit benchmark: `neuronc compile` on an already-built profile, as a whole process, next to bare Python.

Usage: python bench/compile_hit.py [--profile P] [--store DIR] [--runs N]

Builds the profile once into the store if it is not there (default: the demo profile into a fresh
temporary store and graph cache, which takes about a minute on 2 cores), then times, in the same
run, `python -c pass`, `neuronc --version` and `neuronc compile PROFILE` (a hit) with and without
--json. It also checks that the hit imported neither torch nor transformers.
Target (issue 23): a store hit at most 0.3 s wall, as a whole process on 2 cores (issue 15 aimed at
0.25 s on a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.3


def _samples(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system) of each run; CPU time is what a busy machine cannot inflate."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return walls, cpus


def _heavy_imports(cmd: list[str], env: dict[str, str]) -> list[str]:
    proc = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    return sorted(names & {"torch", "transformers", "numpy"})


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-hit-"))
    try:
        _bench(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _bench(scratch: Path) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="profiles/tiny-llama-cpu.yaml")
    parser.add_argument("--store", help="store to use (default: a fresh temporary one)")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    env = dict(os.environ)
    # Time neuronc as an installed one runs: with bytecode caches (a shell that sets
    # PYTHONDONTWRITEBYTECODE would otherwise time the compiling of neuronc's sources on every run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NEURONC_STORE"] = args.store or str(scratch / "store")
    env.setdefault("NEURONC_GRAPH_CACHE", str(scratch / "graphs"))
    py = sys.executable
    compile_cmd = [py, "-m", "neuronc", "compile", args.profile]

    start = time.perf_counter()
    first = subprocess.run([*compile_cmd, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if first.returncode != 0:
        sys.exit(f"the first compile failed (exit {first.returncode}):\n{first.stderr[-3000:]}")
    [build] = json.loads(first.stdout)["builds"]
    print(f"first compile: {build['status']} in {time.perf_counter() - start:.1f} s → {build['bundle']}")

    cases = {
        "python -c pass": [py, "-c", "pass"],
        "neuronc --version": [py, "-m", "neuronc", "--version"],
        f"neuronc compile {args.profile}  (hit)": compile_cmd,
        f"neuronc compile {args.profile} --json  (hit)": [*compile_cmd, "--json"],
    }
    for cmd in cases.values():  # warm the page cache and .pyc files
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    results = {name: _samples(cmd, args.runs, env) for name, cmd in cases.items()}
    base = statistics.median(results["python -c pass"][0])
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'command':<58} {'wall median':>11} {'min':>6} {'max':>6} {'- python':>9} {'CPU median':>10}")
    for name, (walls, cpus) in results.items():
        median = statistics.median(walls)
        print(
            f"{name:<58} {median:11.3f} {min(walls):6.3f} {max(walls):6.3f} {median - base:+9.3f}"
            f" {statistics.median(cpus):10.3f}"
        )
    heavy = _heavy_imports(compile_cmd, env)
    print(f"heavy modules imported on a hit: {heavy or 'none'}")
    hit = statistics.median(results[f"neuronc compile {args.profile}  (hit)"][0])
    verdict = "PASS" if hit <= TARGET_SECONDS and not heavy else "FAIL"
    print(f"target: store hit at most {TARGET_SECONDS} s wall, no torch/transformers: {verdict} ({hit:.3f} s)")


if __name__ == "__main__":
    main()
