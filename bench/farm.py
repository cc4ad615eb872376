"""Compile-farm benchmark: one 3-build CPU matrix three ways, all ratios from one run.

Usage: python bench/farm.py [--json]   (needs the ray extra: pip install 'neuronc[ray]')

The shipped CPU profile (the demo model) as a matrix of three batch sizes: 3 builds of 3 graphs, nine
distinct graphs. Each way starts from cold caches (a fresh graph and Inductor cache, a fresh store;
the shared precompiled headers are warmed first by an untimed compile) and uses two CPUs:

1. ``sequential``: one build after another, each with ``--jobs 2`` (how neuronc compiled a matrix
   before builds shared a pool).
2. ``pool``: the matrix in one ``compile_profiles`` call, ``--jobs 2``: the graphs of all builds in
   one pool of two workers. Reported: its speed-up over ``sequential``.
3. ``ray``: ``--executor ray`` on a local Ray cluster (``ray.cluster_utils.Cluster``: a head without
   CPUs and one node with two), each build one task with two CPUs, so the builds run one after
   another as in ``sequential``. Reported: Ray's overhead per build in seconds and the ratio of the
   ray wall to the sequential wall (the cluster's start-up is reported apart, not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROFILE = ROOT / "profiles" / "tiny-llama-cpu.yaml"
DEMO = ROOT / "profiles" / "models" / "tiny-llama"
BATCHES = (1, 2, 3)
JOBS = 2
GIB = 1024**3


def _profile(path: Path, matrix: str) -> Path:
    text = PROFILE.read_text(encoding="utf-8").replace("id: models/tiny-llama", f"id: {DEMO}")
    path.write_text(text + matrix, encoding="utf-8")
    return path


def _fresh_caches(scratch: Path, name: str) -> dict[str, str]:
    graphs = scratch / name / "graphs"
    graphs.mkdir(parents=True)
    return {"NEURONC_GRAPH_CACHE": str(graphs)}


def _timed(run: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def bench(scratch: Path) -> dict[str, Any]:
    from neuronc.pipeline import compile_profiles
    from neuronc.pipeline.farm import RayExecutor, RaySettings

    matrix = _profile(scratch / "matrix.yaml", f"matrix:\n  batch_size: {list(BATCHES)}\n")
    single_paths = []
    for batch in BATCHES:
        path = _profile(scratch / f"single-b{batch}.yaml", "")
        path.write_text(path.read_text().replace("\nbatch_size: 1\n", f"\nbatch_size: {batch}\n"))
        single_paths.append(path)

    # Untimed: the precompiled headers every Inductor compile shares.
    warm = _profile(scratch / "warm.yaml", "")
    os.environ.update(_fresh_caches(scratch, "warm"))
    compile_profiles([warm], store=scratch / "warm" / "store", jobs=JOBS)

    results: dict[str, Any] = {"builds": len(BATCHES), "graphs": 3 * len(BATCHES), "jobs": JOBS}
    os.environ.update(_fresh_caches(scratch, "sequential"))
    wall, _ = _timed(
        lambda: [compile_profiles([p], store=scratch / "sequential" / "store", jobs=JOBS) for p in single_paths]
    )
    results["sequential_seconds"] = round(wall, 2)

    os.environ.update(_fresh_caches(scratch, "pool"))
    wall, reports = _timed(lambda: compile_profiles([matrix], store=scratch / "pool" / "store", jobs=JOBS))
    assert all(r.status == "built" for r in reports), [r.error for r in reports]
    results["pool_seconds"] = round(wall, 2)
    results["pool_speedup"] = round(results["sequential_seconds"] / wall, 3)

    from ray.cluster_utils import Cluster

    node_env = {**os.environ, **_fresh_caches(scratch, "ray"), "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "memory": GIB, "include_dashboard": False, "no_monitor": True},
    )
    cluster.add_node(num_cpus=JOBS, memory=8 * GIB, env_vars=node_env)
    cluster.wait_for_nodes()
    results["ray_cluster_start_seconds"] = round(time.perf_counter() - started, 2)
    try:
        executor = RayExecutor(RaySettings(address=cluster.address, cpus=JOBS, shared_store=True))
        wall, reports = _timed(
            lambda: compile_profiles([matrix], store=scratch / "ray" / "store", jobs=JOBS, executor=executor)
        )
        assert all(r.status == "built" for r in reports), [r.error for r in reports]
    finally:
        cluster.shutdown()
    results["ray_seconds"] = round(wall, 2)
    results["ray_over_sequential"] = round(wall / results["sequential_seconds"], 3)
    results["ray_overhead_per_build_seconds"] = round((wall - results["sequential_seconds"]) / len(BATCHES), 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-farm-"))
    try:
        results = bench(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{results['builds']} builds, {results['graphs']} graphs, {results['jobs']} CPUs, cold caches each way")
    print(f"  one build after another  {results['sequential_seconds']:8.2f} s")
    print(f"  one pool for the matrix  {results['pool_seconds']:8.2f} s  speed-up {results['pool_speedup']:.2f}x")
    print(
        f"  Ray (one 2-CPU node)     {results['ray_seconds']:8.2f} s  {results['ray_over_sequential']:.2f}x sequential,"
        f" {results['ray_overhead_per_build_seconds']:+.2f} s per build"
        f" (cluster start {results['ray_cluster_start_seconds']:.1f} s, not counted)"
    )


if __name__ == "__main__":
    main()
