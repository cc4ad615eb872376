"""Benchmark `neuronc cache-lookup` on a 10,000-entry registry, offline and online, beside bare Python.

Usage: python bench/cache_lookup.py [--runs N] [--entries N] [--keep DIR]

It builds, in a temporary directory, a snapshot of ``--entries`` registry entries by varying the
fixture's optimum-neuron 0.4.5 entries (tests/fixtures/hf-neuron-cache): 100 models over the
fixture's 9 model types, each with its own architecture, 100 shapes each; 80 models in the 0.4.5
arch-digest layout (with aliases), 20 in the 0.4.4 model-type layout. Then, in the same run:

- ``python -c pass``;
- ``neuronc cache-lookup bench-org/model-000 --snapshot DIR --json``: a cold process (new interpreter
  each time) looking up one llama model: it lists all entries and reads every llama entry;
- the same lookup online, warm: against tests/fixtures/hf-neuron-cache/hub_double.py (a local
  stand-in for the Hub at HF_ENDPOINT) after one priming run, so each run costs one request;
- the library call reading and parsing every entry (``SnapshotSource.load(Query.everything())``).

Prints the median wall time of each, its difference from and ratio to ``python -c pass``.
Target: the offline lookup under 0.5 s.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
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
CC_045 = "neuronxcc-2.21.33363.0+82129205"
CC_044 = "neuronxcc-2.21.18209.0+043b1bf7"
TARGET_MODEL = "bench-org/model-000"


def _fixture_templates() -> dict[str, dict[str, Any]]:
    """One 0.4.5 text-generation entry per model type, from the fixture snapshot."""
    templates: dict[str, dict[str, Any]] = {}
    registry = FIXTURE / "snapshot" / CC_045 / "0_REGISTRY" / "0.4.5"
    for path in sorted(registry.glob("*/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry.get("_task") == "text-generation" and entry.get("_entry_class") == "SingleModelCacheEntry":
            templates.setdefault(entry["model_type"], entry)
    return templates


def make_snapshot(root: Path, entries: int, hf_home: Path) -> None:
    """Write the snapshot under ``root`` and the target model's config.json into the HF cache at ``hf_home``."""
    from neuronc.hubcache import arch_digest, entry_hash, serialize_entry

    templates = _fixture_templates()
    types = sorted(templates)
    types.remove("llama")
    types.insert(0, "llama")
    models = 100
    per_model = max(1, entries // models)
    shapes = [(bs, seq, tp) for bs in (1, 2, 4, 8, 16) for seq in (1024, 2048, 4096, 8192) for tp in (2, 4, 8, 16, 32)]
    written = 0
    for m in range(models):
        model_id = f"bench-org/model-{m:03d}"
        template = templates[types[m % len(types)]]
        config = {k: v for k, v in template.items() if k not in ("neuron", "_entry_class", "_model_id", "_task")}
        config["hidden_size"] = config["hidden_size"] * (1 + m // len(types))  # one architecture per model
        if isinstance(config.get("head_dim"), int):
            config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
        if m == 0:
            _write_model_config(hf_home, model_id, config)
        new_layout = m < 80
        version, compiler = ("0.4.5", CC_045) if new_layout else ("0.4.4", CC_044)
        registry = root / compiler / "0_REGISTRY" / version
        digest = arch_digest(config, "text-generation")
        for i in range(per_model):
            bs, seq, tp = shapes[i % len(shapes)]
            neuron = copy.deepcopy(template["neuron"])
            rev = hashlib.sha1(f"{model_id}@{i // len(shapes)}".encode()).hexdigest()
            neuron.update(
                batch_size=bs,
                max_batch_size=bs,
                sequence_length=seq,
                max_context_length=seq,
                n_active_tokens=seq,
                tp_degree=tp,
                local_ranks_size=tp,
                checkpoint_id=model_id,
                checkpoint_revision=rev,
                optimum_neuron_version=version,
                neuronxcc_version=compiler[len("neuronxcc-") :],
            )
            text = serialize_entry(config, neuron, model_id=model_id, task="text-generation")
            name = f"{entry_hash(text)}.json"
            paths = []
            if new_layout:
                paths.append(registry / digest / name)
                if i == 0:
                    paths.append(registry / config["model_type"] / model_id / name)
            else:
                paths.append(registry / config["model_type"] / model_id / name)
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            written += 1
    print(f"snapshot: {written} entries, {sum(1 for _ in root.rglob('*.json'))} files in {root}")


def _write_model_config(hf_home: Path, model_id: str, config: dict[str, Any]) -> None:
    """Put config.json where huggingface_hub's cache keeps it (refs/main -> snapshots/<sha>/)."""
    sha = hashlib.sha1(model_id.encode()).hexdigest()
    repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True, exist_ok=True)
    raw = {k: v for k, v in config.items() if k != "dtype"} | {"torch_dtype": config.get("dtype", "bfloat16")}
    (snapshot / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")


def _median_wall(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="build the snapshot here and keep it")
    args = parser.parse_args()
    sys.path.insert(0, str(FIXTURE))
    from hub_double import HubDouble  # the local stand-in for the Hub

    with tempfile.TemporaryDirectory(prefix="neuronc-bench-") as tmp:
        work = args.keep or Path(tmp)
        snapshot, hf_home, cache = work / "snapshot", work / "hf", work / "cache"
        if not snapshot.exists():
            make_snapshot(snapshot, args.entries, hf_home)
        env = dict(os.environ, HF_HOME=str(hf_home), XDG_CACHE_HOME=str(cache), HF_HUB_OFFLINE="1", NO_COLOR="1")
        py = sys.executable
        lookup = [py, "-m", "neuronc", "cache-lookup", TARGET_MODEL, "--json"]
        scan = (
            "from neuronc.hubcache import SnapshotSource, Query; import sys; "
            f"r = SnapshotSource({str(snapshot)!r}).load(Query.everything()); assert len(r.entries) >= 10000"
        )
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([py, "-c", "pass"], env),
            "cache-lookup --snapshot (cold process)": ([*lookup, "--snapshot", str(snapshot)], env),
            "library: parse every entry (cold process)": ([py, "-c", scan], env),
        }
        with HubDouble({REPO: snapshot}) as hub:
            online_env = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"} | {"HF_ENDPOINT": hub.endpoint}
            cases["cache-lookup online, warm (1 request)"] = (lookup, online_env)
            for cmd, case_env in cases.values():  # warm page cache and .pyc files; prime the online cache
                subprocess.run(
                    cmd, cwd=ROOT, env=case_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
                )
            out = subprocess.run(
                [*lookup, "--snapshot", str(snapshot)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
            )
            data = json.loads(out.stdout)
            print(
                f"lookup of {TARGET_MODEL}: {data['stats']['entries_read']} entries read of "
                f"{data['stats']['registry_files_listed']} files listed, {len(data['entries'])} related"
            )
            hub.reset_requests()
            results = {name: _median_wall(cmd, args.runs, case_env) for name, (cmd, case_env) in cases.items()}
            online_requests = len(hub.reset_requests()) / args.runs
    base = results["python -c pass"]
    print(f"{'case':<46} {'median s':>9} {'- python':>9} {'x python':>9}")
    for name, seconds in results.items():
        print(f"{name:<46} {seconds:9.3f} {seconds - base:+9.3f} {seconds / base:9.1f}")
    print(f"online warm lookup: {online_requests:.1f} HTTP requests per run")
    offline = results["cache-lookup --snapshot (cold process)"]
    print(f"target: offline lookup under 0.5 s: {'PASS' if offline < 0.5 else 'FAIL'} ({offline:.3f} s)")


if __name__ == "__main__":
    main()
