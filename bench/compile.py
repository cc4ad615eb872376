"""Compile and run benchmark of the embedded inductor backend, all ratios from one run.

Usage: python bench/compile.py [--tokens N] [--runs N] [--first-runs N] [--first-only] [--json]

0. The demo's first compile as a new user meets it: ``neuronc compile profiles/tiny-llama-cpu.yaml``
   as a whole process with an empty store, an empty graph cache and an empty Inductor cache (its
   precompiled headers and CPU-ISA probes included: TMPDIR points at a fresh directory, where torch
   keeps them), against ``python -c "import torch"`` in turn (A B A B ...), the ratio pair by pair.
   Target (issue 33): at most 15x ``import torch`` (wall). ``--first-only`` stops after this.
1. Per-graph compile time, and the wall of compiling 4 graphs (the demo model with context buckets
   16, 32, 64 and token bucket 128) with ``--jobs 1`` and with ``--jobs 2``, each from cold caches
   (a fresh graph cache and Inductor cache per run; the shared precompiled headers are warmed first
   by an untimed compile). Target: jobs 2 at most 0.65x the wall of jobs 1.
2. ``neuronc compile`` of that profile into a fresh store (its graphs come from the graph cache),
   then the store hit as a whole process (median of 5). Target: under 0.3 s wall.
3. Time to first token and decode ms/token of the bundle vs Hugging Face eager ``generate`` on the
   same model and prompt (greedy, medians), and whether the tokens are identical.
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

from _process import timed  # bench/ is sys.path[0] when a bench runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEMO = ROOT / "profiles" / "models" / "tiny-llama"
PROFILE = ROOT / "profiles" / "tiny-llama-cpu.yaml"
PROMPT = "The quick brown fox"
JOBS_TARGET = 0.65
HIT_TARGET = 0.3
FIRST_TARGET = 15.0


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    return timed(cmd, env, ROOT)


def bench_first_compile(scratch: Path, runs: int) -> dict[str, Any]:
    """The shipped demo profile compiled from nothing, vs ``import torch``, ``runs`` pairs."""
    torch_cmd = [sys.executable, "-c", "import torch"]
    compile_cmd = [sys.executable, "-m", "neuronc", "compile", str(PROFILE), "--json"]
    _timed(torch_cmd, dict(os.environ))  # page cache and .pyc files
    pairs = []
    for i in range(runs):
        run_dir = scratch / f"first-{i}"
        (run_dir / "tmp").mkdir(parents=True)
        env = dict(
            os.environ,
            NEURONC_STORE=str(run_dir / "store"),
            NEURONC_GRAPH_CACHE=str(run_dir / "graphs"),
            TMPDIR=str(run_dir / "tmp"),
        )
        base = _timed(torch_cmd, dict(os.environ))
        first = _timed(compile_cmd, env)
        pairs.append((base, first))
        shutil.rmtree(run_dir, ignore_errors=True)
    wall_ratios = [f[0] / b[0] for b, f in pairs]
    cpu_ratios = [f[1] / b[1] for b, f in pairs]
    return {
        "runs": runs,
        "import_torch_wall_median": round(statistics.median(b[0] for b, _ in pairs), 3),
        "first_compile_wall_median": round(statistics.median(f[0] for _, f in pairs), 3),
        "first_compile_cpu_median": round(statistics.median(f[1] for _, f in pairs), 3),
        "wall_ratio_median": round(statistics.median(wall_ratios), 2),
        "wall_ratio_min": round(min(wall_ratios), 2),
        "wall_ratio_max": round(max(wall_ratios), 2),
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 2),
        "target": FIRST_TARGET,
    }


def _profile(path: Path, context_buckets: str) -> Path:
    text = PROFILE.read_text(encoding="utf-8")
    text = text.replace("id: models/tiny-llama", f"id: {DEMO}").replace("context_buckets: [32, 64]", context_buckets)
    path.write_text(text, encoding="utf-8")
    return path


def _compile(profile: Path, bundle: Path, jobs: int, cache: str) -> tuple[float, Any]:
    """backend.compile of every graph of ``profile`` (no store), timed as a whole."""
    from neuronc.backends import get_backend
    from neuronc.backends.base import CompileJob
    from neuronc.profile import load_profile

    spec = load_profile(profile).specs[0]
    backend = get_backend("inductor")
    (bundle / "weights").mkdir(parents=True)
    shutil.copyfile(DEMO / "model.safetensors", bundle / "weights" / "rank-000-of-001.safetensors")
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=DEMO,
        artifacts_dir=bundle / "artifacts",
        logs_dir=bundle / "logs",
        work_dir=bundle / "work",
        weights_dir=bundle / "weights",
        jobs=jobs,
        env={"NEURONC_GRAPH_CACHE": cache},
    )
    started = time.perf_counter()
    result = backend.compile(job)
    return time.perf_counter() - started, result


def bench_compile(scratch: Path) -> dict[str, Any]:
    profile = _profile(scratch / "four.yaml", "context_buckets: [16, 32, 64]")
    warm = _profile(scratch / "warm.yaml", "context_buckets: [8]")
    _compile(warm, scratch / "warm", 2, str(scratch / "warm-cache"))  # precompiled headers, untimed
    wall1, result1 = _compile(profile, scratch / "jobs1", 1, str(scratch / "cache-jobs1"))
    wall2, _ = _compile(profile, scratch / "jobs2", 2, str(scratch / "cache-jobs2"))
    graphs = result1.extra["inductor"]["graphs"]
    return {
        "graphs": [
            {
                "name": g.graph.name,
                "process_seconds": round(g.compile_seconds, 2),
                "export_seconds": graphs[g.graph.name]["export_seconds"],
                "aoti_seconds": graphs[g.graph.name]["aoti_seconds"],
            }
            for g in result1.graphs
        ],
        "jobs1_wall_seconds": round(wall1, 2),
        "jobs2_wall_seconds": round(wall2, 2),
        "jobs2_over_jobs1": round(wall2 / wall1, 3),
        "target": JOBS_TARGET,
        "profile": str(profile),
        "graph_cache": str(scratch / "cache-jobs2"),
    }


def bench_store_hit(scratch: Path, profile: Path, graph_cache: str) -> dict[str, Any]:
    env = dict(os.environ, NEURONC_STORE=str(scratch / "store"), NEURONC_GRAPH_CACHE=graph_cache)
    cmd = [sys.executable, "-m", "neuronc", "compile", str(profile), "--json"]
    started = time.perf_counter()
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    build_wall = time.perf_counter() - started
    build = json.loads(first.stdout)["builds"][0]
    walls = []
    for _ in range(5):
        started = time.perf_counter()
        hit = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - started)
        assert json.loads(hit.stdout)["builds"][0]["status"] == "hit"
    return {
        "bundle": build["bundle"],
        "first_compile_status": build["status"],
        "first_compile_graph_cache_hits": sum(g["cache_hit"] for g in build["graphs"]),
        "first_compile_wall_seconds": round(build_wall, 3),
        "hit_wall_seconds_median": round(statistics.median(walls), 3),
        "hit_wall_seconds_min": round(min(walls), 3),
        "target": HIT_TARGET,
    }


def bench_decode(bundle: str, tokens: int, runs: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from neuronc.runtime import load

    runner = load(bundle)
    ids = AutoTokenizer.from_pretrained(str(DEMO))(PROMPT)["input_ids"]
    results = [runner.generate(ids, max_new_tokens=tokens, stop_at_eos=False) for _ in range(runs + 1)][1:]
    model = AutoModelForCausalLM.from_pretrained(str(DEMO)).eval()
    input_ids = torch.tensor([ids])

    def hf_generate(new: int) -> tuple[float, list[int]]:
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=2,
            )
        return time.perf_counter() - started, [int(t) for t in out[0, len(ids) :]]

    hf_generate(tokens)  # warm-up
    first = [hf_generate(1)[0] for _ in range(runs)]
    full = [hf_generate(tokens) for _ in range(runs)]
    hf_ttft = statistics.median(first)
    hf_total = statistics.median(t for t, _ in full)
    hf_per_token = (hf_total - hf_ttft) / (tokens - 1)
    ttft = statistics.median(r.ttft_ms for r in results)
    per_token = statistics.median(r.ms_per_token or 0.0 for r in results)
    total = statistics.median(r.total_ms for r in results)
    return {
        "prompt_tokens": len(ids),
        "new_tokens": tokens,
        "threads": torch.get_num_threads(),
        "tokens_identical": results[0].tokens == full[0][1],
        "bundle_load_seconds": round(runner.load_seconds, 3),
        "bundle_ttft_ms": round(ttft, 3),
        "bundle_ms_per_token": round(per_token, 3),
        "bundle_total_ms": round(total, 2),
        "hf_ttft_ms": round(1000 * hf_ttft, 3),
        "hf_ms_per_token": round(1000 * hf_per_token, 3),
        "hf_total_ms": round(1000 * hf_total, 2),
        "ttft_speedup": round(1000 * hf_ttft / ttft, 2),
        "per_token_speedup": round(1000 * hf_per_token / per_token, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per decode run")
    parser.add_argument("--runs", type=int, default=7, help="decode runs (medians)")
    parser.add_argument("--first-runs", type=int, default=3, help="first compiles from nothing (medians)")
    parser.add_argument("--first-only", action="store_true", help="only the first-compile ratio (part 0)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-compile-"))
    try:
        first = bench_first_compile(scratch, args.first_runs)
        if args.first_only:
            _print_first(first, args.json)
            return
        compile_results = bench_compile(scratch)
        hit = bench_store_hit(scratch, Path(compile_results["profile"]), compile_results["graph_cache"])
        decode = bench_decode(hit["bundle"], args.tokens, args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {
        "host": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
        "first_compile": first,
        "compile": compile_results,
        "store_hit": hit,
        "decode": decode,
    }
    if args.json:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
        return
    _print_first(first, False)
    c, d = compile_results, decode
    for g in c["graphs"]:
        print(
            f"graph {g['name']:<12} process {g['process_seconds']:6.2f} s  export {g['export_seconds']:5.2f} s  AOTI {g['aoti_seconds']:6.2f} s"
        )
    verdict = "ok" if c["jobs2_over_jobs1"] <= JOBS_TARGET else "ABOVE TARGET"
    print(
        f"4 graphs: --jobs 1 {c['jobs1_wall_seconds']} s, --jobs 2 {c['jobs2_wall_seconds']} s, ratio {c['jobs2_over_jobs1']} (target <= {JOBS_TARGET}: {verdict})"
    )
    verdict = "ok" if hit["hit_wall_seconds_median"] < HIT_TARGET else "ABOVE TARGET"
    print(
        f"store hit: {hit['hit_wall_seconds_median']} s median wall, whole process (target < {HIT_TARGET}: {verdict})"
    )
    print(
        f"decode ({d['prompt_tokens']} prompt tokens, {d['new_tokens']} new, {d['threads']} threads): "
        f"bundle TTFT {d['bundle_ttft_ms']} ms, {d['bundle_ms_per_token']} ms/token | "
        f"HF eager TTFT {d['hf_ttft_ms']} ms, {d['hf_ms_per_token']} ms/token | "
        f"speed-up TTFT {d['ttft_speedup']}x, per token {d['per_token_speedup']}x | tokens identical: {d['tokens_identical']}"
    )


def _print_first(first: dict[str, Any], as_json: bool) -> None:
    host = {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    if as_json:
        sys.stdout.write(json.dumps({"host": host, "first_compile": first}, indent=2) + "\n")
        return
    f = first
    verdict = "ok" if f["wall_ratio_median"] <= FIRST_TARGET else "ABOVE TARGET"
    print(
        f"first compile of the demo (empty caches): {f['first_compile_wall_median']} s wall, "
        f"{f['first_compile_cpu_median']} s CPU; import torch {f['import_torch_wall_median']} s wall; "
        f"ratio {f['wall_ratio_median']}x wall (min {f['wall_ratio_min']}, max {f['wall_ratio_max']}), "
        f"{f['cpu_ratio_median']}x CPU (target <= {FIRST_TARGET}x wall: {verdict}; "
        f"{f['runs']} pairs, load average {host['load_average'][0]})"
    )


if __name__ == "__main__":
    main()
