"""Compile-farm benchmark: one 3-build CPU matrix, locally and through Ray, all ratios from one run.

Usage: python bench/farm.py [--json]   (needs the ray extra: pip install 'neuronc[ray]')

The shipped CPU profile (the demo model) as a matrix of three batch sizes: 3 builds of 3 graphs, nine
distinct graphs, two CPUs for graph workers.

1. Cold caches (a fresh graph and Inductor cache and store each; the shared precompiled headers are
   warmed first by an untimed compile): ``sequential``, one build after another with ``--jobs 2``
   (how neuronc compiled a matrix before its builds shared a pool), then ``pool``, the matrix in one
   call with ``--jobs 2`` (the graphs of all builds in one pool of two workers). Reported: the pool's
   speed-up.
2. Ray's overhead per build: the same matrix with the graph cache the pool filled (every graph a
   hit, so what differs is the executor and not the compiler on a machine whose load drifts), into a
   fresh store, locally and with ``--executor ray`` on a local cluster (``ray.cluster_utils.Cluster``:
   a head without CPUs, one node with two CPUs per build so that the three run side by side as they
   do locally), alternating, median of three each. Reported: the ratio of the walls and the seconds
   Ray adds per build (connect, the store probe on every node, scheduling, a worker that imports
   neuronc, the event log). The cluster's start-up is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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
ROUNDS = 3
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

    # Ray's overhead: the same matrix from the graph cache the pool filled (every graph a cache hit),
    # so that what differs is the executor, not the compiler on a machine whose load drifts; local
    # and Ray runs alternate, each into a fresh store, and the medians are compared.
    from ray.cluster_utils import Cluster

    warm_cache = {"NEURONC_GRAPH_CACHE": str(scratch / "pool" / "graphs")}
    os.environ.update(warm_cache)
    node_env = {**os.environ, **warm_cache, "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "memory": GIB, "include_dashboard": False, "no_monitor": True},
    )
    cluster.add_node(num_cpus=JOBS * len(BATCHES), memory=8 * GIB, env_vars=node_env)
    cluster.wait_for_nodes()
    results["ray_cluster_start_seconds"] = round(time.perf_counter() - started, 2)
    local_walls: list[float] = []
    ray_walls: list[float] = []
    try:
        executor = RayExecutor(RaySettings(address=cluster.address, cpus=JOBS, shared_store=True))
        for attempt in range(ROUNDS):
            store = scratch / f"warm-local-{attempt}"
            wall, reports = _timed(lambda store=store: compile_profiles([matrix], store=store, jobs=JOBS))
            assert all(r.status == "built" for r in reports), [r.error for r in reports]
            local_walls.append(wall)
            store = scratch / f"warm-ray-{attempt}"
            wall, reports = _timed(
                lambda store=store: compile_profiles([matrix], store=store, jobs=JOBS, executor=executor)
            )
            assert all(r.status == "built" for r in reports), [r.error for r in reports]
            ray_walls.append(wall)
    finally:
        cluster.shutdown()
    local, ray = statistics.median(local_walls), statistics.median(ray_walls)
    results["warm_local_seconds"] = round(local, 2)
    results["warm_ray_seconds"] = round(ray, 2)
    results["ray_over_local"] = round(ray / local, 3)
    results["ray_overhead_per_build_seconds"] = round((ray - local) / len(BATCHES), 2)
    # What that overhead is next to a build that compiles (the cold sequential wall per build).
    results["ray_overhead_share_of_cold_build"] = round(
        results["ray_overhead_per_build_seconds"] / (results["sequential_seconds"] / len(BATCHES)), 4
    )
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
    print("warm graph cache (every graph a hit), fresh store, median of " + str(ROUNDS))
    print(f"  local executor           {results['warm_local_seconds']:8.2f} s")
    print(
        f"  Ray (one node)           {results['warm_ray_seconds']:8.2f} s  {results['ray_over_local']:.2f}x local,"
        f" {results['ray_overhead_per_build_seconds']:+.2f} s per build"
        f" (cluster start {results['ray_cluster_start_seconds']:.1f} s, not counted)"
    )
    print(f"  Ray's overhead is {results['ray_overhead_share_of_cold_build']:.1%} of a cold build's wall")


if __name__ == "__main__":
    main()
