"""`neuronc run` of the demo bundle as a whole process, against `python -c "import torch"` in the same run.

Usage: python bench/run.py [--bundle DIR] [--runs N] [--tokens N] [--json]

Without ``--bundle`` the shipped demo profile (profiles/tiny-llama-cpu.yaml) is compiled first,
untimed, into a scratch store (its graphs come from the graph cache when it has them). Then the two
commands run in turn, A B A B ..., after one untimed warm-up each (page cache, .pyc files); each
pair gives one ratio, so a machine whose speed drifts still compares like with like. Printed: the
median wall and CPU (user + sys of the process and its children, from the kernel's accounting) of
each command, and the median of the pairwise ratios.
Target (issue 33): the whole `neuronc run` at most 1.5x `import torch` (wall).
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
from pathlib import Path
from typing import Any

from _process import timed  # bench/ is sys.path[0] when a bench runs

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "profiles" / "tiny-llama-cpu.yaml"
PROMPT = "The quick brown fox"
TARGET = 1.5


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    return timed(cmd, env, ROOT)


def _compile_demo(scratch: Path, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "neuronc", "compile", str(PROFILE), "--json"]
    out = subprocess.run(cmd, cwd=ROOT, env={**env, "NEURONC_STORE": str(scratch / "store")}, capture_output=True)
    if out.returncode != 0:
        raise SystemExit(f"compiling the demo failed (exit {out.returncode}):\n{out.stderr.decode()[-3000:]}")
    return str(json.loads(out.stdout)["builds"][0]["bundle"])


def bench(bundle: str, runs: int, tokens: int, env: dict[str, str]) -> dict[str, Any]:
    torch_cmd = [sys.executable, "-c", "import torch"]
    run_cmd = [sys.executable, "-m", "neuronc", "run", bundle, "--prompt", PROMPT, "-n", str(tokens)]
    for cmd in (torch_cmd, run_cmd):
        _timed(cmd, env)
    pairs = []
    for _ in range(runs):
        base = _timed(torch_cmd, env)
        run = _timed(run_cmd, env)
        pairs.append((base, run))
    base_wall = [b[0] for b, _ in pairs]
    base_cpu = [b[1] for b, _ in pairs]
    run_wall = [r[0] for _, r in pairs]
    run_cpu = [r[1] for _, r in pairs]
    return {
        "bundle": bundle,
        "runs": runs,
        "new_tokens": tokens,
        "import_torch_wall_median": round(statistics.median(base_wall), 3),
        "import_torch_cpu_median": round(statistics.median(base_cpu), 3),
        "run_wall_median": round(statistics.median(run_wall), 3),
        "run_cpu_median": round(statistics.median(run_cpu), 3),
        "wall_ratio_median": round(statistics.median(r / b for b, r in zip(base_wall, run_wall, strict=True)), 3),
        "wall_ratio_min": round(min(r / b for b, r in zip(base_wall, run_wall, strict=True)), 3),
        "wall_ratio_max": round(max(r / b for b, r in zip(base_wall, run_wall, strict=True)), 3),
        "cpu_ratio_median": round(statistics.median(r / b for b, r in zip(base_cpu, run_cpu, strict=True)), 3),
        "target": TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", help="a compiled demo bundle (default: compile the demo profile first)")
    parser.add_argument("--runs", type=int, default=7, help="pairs of runs (medians)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens `neuronc run` generates")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    env = dict(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-run-"))
    try:
        bundle = args.bundle or _compile_demo(scratch, env)
        results = bench(bundle, args.runs, args.tokens, env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["host"] = {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
        return
    r = results
    print(f"python -c 'import torch': {r['import_torch_wall_median']} s wall, {r['import_torch_cpu_median']} s CPU")
    print(f"neuronc run ({r['new_tokens']} tokens): {r['run_wall_median']} s wall, {r['run_cpu_median']} s CPU")
    verdict = "ok" if r["wall_ratio_median"] <= TARGET else "ABOVE TARGET"
    print(
        f"run / import torch: wall {r['wall_ratio_median']}x (min {r['wall_ratio_min']}, max {r['wall_ratio_max']}), "
        f"CPU {r['cpu_ratio_median']}x; target <= {TARGET}x wall: {verdict} "
        f"({r['runs']} pairs, {r['host']['cpus']} CPUs, load average {r['host']['load_average'][0]})"
    )


if __name__ == "__main__":
    main()
