"""Start-up benchmark: `neuronc --help` and `neuronc validate` next to bare Python, in one run.

Usage: python bench/startup.py [--runs N]

Prints the median wall time of each command and its difference from `python -c pass` measured in
the same run (the machine is noisy, so only same-run comparisons mean anything).
Target (issue 23): `neuronc --help` within 0.15 s of bare Python.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE = "profiles/llama3.1-8b-instruct-nxdi-inf2.yaml"


def _median_wall(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    py = sys.executable
    cli = [py, "-m", "neuronc"]
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "neuronc --help": [*cli, "--help"],
        f"neuronc validate {PROFILE}": [*cli, "validate", PROFILE],
        "neuronc backends --json": [*cli, "backends", "--json"],
    }
    for cmd in cases.values():  # warm the page cache and .pyc files
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    results = {name: _median_wall(cmd, args.runs) for name, cmd in cases.items()}
    base = results["python -c pass"]
    print(f"{'command':<70} {'median s':>9} {'- python':>9}")
    for name, seconds in results.items():
        print(f"{name:<70} {seconds:9.3f} {seconds - base:+9.3f}")
    verdict = "PASS" if results["neuronc --help"] - base <= 0.15 else "FAIL"
    print(f"target: --help within 0.15 s of bare Python: {verdict}")


if __name__ == "__main__":
    main()
