"""Benchmark `neuronc cache-lookup --snapshot` on a 10,000-entry registry, as whole processes beside bare Python.

Usage: python bench/cache_lookup.py [--runs N] [--entries N] [--keep DIR] [--online]

The registry is the hard case for a lookup: optimum-neuron 0.4.5's layout
(``neuronxcc-2.21.33363.0+82129205/0_REGISTRY/0.4.5/<arch digest>/<hash>.json``), every entry under
its own arch digest (its own architecture: nothing shared, no alias that would tell its model
type from its path), each a full entry as 0.4.5 writes it for a full-size checkpoint (an 8B-class
config of one of the nine model types neuronc emulates, made with neuronc's byte-exact
reimplementation of optimum-neuron's serialisation). The model looked up,
``bench-org/model-00000``, has its config.json in the (temporary) Hugging Face cache. Timed, in
one run:

- ``python -c pass``: the baseline, measured beside the rest;
- **warm**: the lookup with its persistent index up to date (one stat per file and folder);
- **cold**: the lookup with no index (the index folder is removed before each run): it walks the
  snapshot, parses every entry and writes the index;
- **update after 100 new entries**: 100 entries (100 new arch-digest folders) are added before
  each run; the lookup finds and parses only those and rewrites the index;
- with ``--online``: the same lookup against tests/fixtures/hf-neuron-cache/hub_double.py (a local
  stand-in for the Hub at HF_ENDPOINT) once everything is downloaded: one request per lookup.

Each case prints its median wall time, the difference from ``python -c pass`` and the ratio to it,
and its median CPU time (user + system) with the same ratio: on a shared, busy machine wall
times stretch with the load, CPU times much less.
Targets (issue 15): warm <= 0.3 s, cold <= 1.5 s, update after 100 new entries <= 0.5 s.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
REPO = "aws-neuron/optimum-neuron-cache"
COMPILER = "neuronxcc-2.21.33363.0+82129205"
TARGET_MODEL = "bench-org/model-00000"
TARGETS = {"warm": 0.3, "cold": 1.5, "update": 0.5}
# A file's mtime is trusted once it is this old (neuronc.hubcache.index.racy_before): wait it out.
SETTLE_S = 2.1
# Full-size dimensions (Llama-3.1-8B-class) given to every fixture model type.
FULL_SIZE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
}
SHAPES = [(bs, seq, tp) for bs in (1, 2, 4, 8, 16) for seq in (1024, 2048, 4096, 8192) for tp in (2, 8, 16, 32)]


def _templates() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(checkpoint config.json, 0.4.5 neuron dict) per fixture model type, the config at full size."""
    registry = FIXTURE / "snapshot" / COMPILER / "0_REGISTRY" / "0.4.5"
    neuron_by_type: dict[str, dict[str, Any]] = {}
    for path in sorted(registry.glob("*/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry.get("_task") == "text-generation" and entry.get("_entry_class") == "SingleModelCacheEntry":
            neuron_by_type.setdefault(entry["model_type"], entry["neuron"])
    configs: dict[str, dict[str, Any]] = {}
    for path in sorted((FIXTURE / "models").glob("*/*/config.json")):
        config = json.loads(path.read_text(encoding="utf-8"))
        configs.setdefault(config["model_type"], config)
    templates = []
    for model_type in sorted(neuron_by_type):
        config = dict(configs[model_type], **FULL_SIZE)
        if config.get("head_dim") is not None:
            config["head_dim"] = 128
        for key in ("layer_types", "no_rope_layers", "max_window_layers"):
            config.pop(key, None)  # derived again by the config class for 32 layers
        templates.append((config, neuron_by_type[model_type]))
    llama = next(i for i, (c, _) in enumerate(templates) if c["model_type"] == "llama")
    templates.insert(0, templates.pop(llama))
    return templates


def add_entries(root: Path, start: int, count: int, hf_home: Path | None = None) -> None:
    """Write entries ``start`` .. ``start + count - 1``, each for its own model and architecture."""
    from neuronc.hubcache import entry_hash, normalize_config, serialize_entry

    templates = _templates()
    registry = root / COMPILER / "0_REGISTRY" / "0.4.5"
    for i in range(start, start + count):
        raw, neuron_template = templates[i % len(templates)]
        raw = dict(raw, vocab_size=raw["vocab_size"] + i)  # one architecture per entry
        model_id = f"bench-org/model-{i:05d}"
        if i == 0 and hf_home is not None:
            _write_model_config(hf_home, model_id, raw)
        arch = normalize_config(raw, "text-generation")
        assert arch is not None
        bs, seq, tp = SHAPES[i % len(SHAPES)]
        neuron = copy.deepcopy(neuron_template)
        neuron.update(
            batch_size=bs,
            max_batch_size=bs,
            sequence_length=seq,
            max_context_length=seq,
            n_active_tokens=seq,
            tp_degree=tp,
            local_ranks_size=tp,
            checkpoint_id=model_id,
            checkpoint_revision=hashlib.sha1(model_id.encode()).hexdigest(),
        )
        dtype = neuron.get("torch_dtype", "bfloat16")
        text = serialize_entry(arch.export_config(dtype), neuron, model_id=model_id, task="text-generation")
        path = registry / arch.export_digest(dtype) / f"{entry_hash(text)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _write_model_config(hf_home: Path, model_id: str, config: dict[str, Any]) -> None:
    """Put config.json where huggingface_hub's cache keeps it (refs/main -> snapshots/<sha>/)."""
    sha = hashlib.sha1(model_id.encode()).hexdigest()
    repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


CPU: dict[str, list[float]] = {}


def _run(cmd: list[str], env: dict[str, str], case: str | None = None) -> tuple[float, str]:
    """Wall time of one process (and, under ``case``, its CPU time: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if case is not None:
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        CPU.setdefault(case, []).append(cpu)
    return wall, proc.stdout.decode("utf-8")


def _index_stats(stdout: str) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads(stdout)["stats"]
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of the warm case and the baseline")
    parser.add_argument("--slow-runs", type=int, default=5, help="runs of the cold and update cases")
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="build the snapshot here and keep it")
    parser.add_argument("--online", action="store_true", help="also time a warm lookup against a local Hub double")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="neuronc-bench-") as tmp:
        work = args.keep or Path(tmp)
        snapshot, hf_home, cache = work / "snapshot", work / "hf", work / "cache"
        index = cache / "neuronc" / "hf-neuron-cache" / "index"
        if not snapshot.exists():
            started = time.perf_counter()
            add_entries(snapshot, 0, args.entries, hf_home)
            print(
                f"registry: {args.entries} entries, each under its own arch digest, in {snapshot} "
                f"({time.perf_counter() - started:.0f} s to write)"
            )
        env = dict(os.environ, HF_HOME=str(hf_home), XDG_CACHE_HOME=str(cache), HF_HUB_OFFLINE="1", NO_COLOR="1")
        env.pop("NEURONC_CACHE_DIR", None)
        # As installed (pip compiles every module) or after a first run: with bytecode caches. A shell
        # that sets PYTHONDONTWRITEBYTECODE would otherwise time the compiling of neuronc's sources.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        py = sys.executable
        lookup = [py, "-m", "neuronc", "cache-lookup", TARGET_MODEL, "--snapshot", str(snapshot), "--json"]
        baseline = [py, "-c", "pass"]
        time.sleep(SETTLE_S)
        for cmd in (baseline, lookup, lookup):  # .pyc files, page cache, the index
            _run(cmd, env)
        _, out = _run(lookup, env)
        data = json.loads(out)
        stats = data["stats"]
        print(
            f"lookup of {TARGET_MODEL}: {stats['entries_read']} entries in the index, "
            f"{len(data['entries'])} related, index {stats['index']['state']}"
        )
        assert stats["entries_read"] >= args.entries and stats["index"]["state"] == "warm", stats

        times: dict[str, list[float]] = {"python -c pass": [], "warm": [], "cold": [], "update": []}
        for _ in range(args.runs):  # interleaved, so that a busy machine weighs on both alike
            times["python -c pass"].append(_run(baseline, env, "python -c pass")[0])
            elapsed, out = _run(lookup, env, "warm")
            assert _index_stats(out)["index"]["state"] == "warm"
            times["warm"].append(elapsed)
        for _ in range(args.slow_runs):
            shutil.rmtree(index, ignore_errors=True)
            elapsed, out = _run(lookup, env, "cold")
            assert _index_stats(out)["index"]["state"] == "built"
            times["cold"].append(elapsed)
        next_entry = args.entries + 1_000_000  # far from the registry's own numbers
        for _ in range(args.slow_runs):
            add_entries(snapshot, next_entry, 100)
            next_entry += 100
            time.sleep(SETTLE_S)  # the new files' mtimes become trustworthy, as they would in use
            elapsed, out = _run(lookup, env, "update")
            index_stats = _index_stats(out)["index"]
            assert index_stats["state"] == "updated" and index_stats["parsed"] == 100, index_stats
            times["update"].append(elapsed)

        if args.online:
            times["online warm (1 request)"] = _online(snapshot, env, lookup, args.runs)

    base = statistics.median(times["python -c pass"])
    cpu_base = statistics.median(CPU["python -c pass"])
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<30} {'wall s':>7} {'- python':>9} {'x python':>9} {'cpu s':>7} {'x python':>9}  target (wall)")
    for name, samples in times.items():
        seconds = statistics.median(samples)
        cpu = statistics.median(CPU[name]) if name in CPU else float("nan")
        target = TARGETS.get(name)
        verdict = f"<= {target} s: {'PASS' if seconds <= target else 'FAIL'}" if target else ""
        label = {"update": "update after 100 new entries"}.get(name, name)
        print(
            f"{label:<30} {seconds:7.3f} {seconds - base:+9.3f} {seconds / base:9.1f} "
            f"{cpu:7.3f} {cpu / cpu_base:9.1f}  {verdict}"
        )


def _online(snapshot: Path, env: dict[str, str], lookup: list[str], runs: int) -> list[float]:
    sys.path.insert(0, str(FIXTURE))
    from hub_double import HubDouble  # the local stand-in for the Hub

    online = [arg for arg in lookup if arg not in ("--snapshot", str(snapshot))]
    with HubDouble({REPO: snapshot}) as hub:
        hub_env = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"} | {"HF_ENDPOINT": hub.endpoint}
        for _ in range(2):  # downloads every entry the lookup can need, then the index
            _run(online, hub_env)
        hub.reset_requests()
        samples = [_run(online, hub_env)[0] for _ in range(runs)]
        requests = len(hub.reset_requests()) / runs
    print(f"online warm lookup: {requests:.1f} HTTP requests per run")
    return samples


if __name__ == "__main__":
    main()
