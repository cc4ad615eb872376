"""Buckets from traffic, proven on the CPU backend: shipped buckets against suggested ones, in one run.

Usage: python bench/buckets.py [--traffic FILE] [--max-graphs K] [--models demo,wide] [--rounds N]
       [--wide-rounds N] [--wide-hidden H] [--wide-layers L] [--threads N] [--work DIR] [--json]

For each model (``demo``: the shipped 1.2 MB demo model, 2 layers, hidden 80; ``wide``: the demo's
architecture, tokenizer and vocabulary at hidden ``--wide-hidden`` (512) and ``--wide-layers`` (4),
with seeded random weights generated here, so that compute, not per-call overhead, sets the time):

1. Writes two copies of the demo profile pointing at the model (context buckets 32, 64; token
   bucket 128, as shipped); `neuronc buckets COPY --traffic FILE --max-graphs K --write` rewrites
   the second one (default traffic: bench/data/skewed-traffic.jsonl, 400 requests, 85% of them
   short). Compiles both with `neuronc compile` into a fresh store and graph cache.
2. Loads both bundles with `neuronc.runtime.load` (the runtime `neuronc run` uses) and replays
   every request through each: a prompt of ``prompt_tokens`` token ids (from the demo corpus),
   greedy, ``output_tokens`` new tokens (EOS ignored). Padded tokens are counted from the runner's
   own routing (``context_graph_for`` / ``token_graph_for``: bucket minus the real tokens, per prefill
   and per decode step); wall and CPU time are summed over each bundle's generate calls (and split
   into prefill, to the first token, and decode), the two bundles taking each request in turn (the
   order alternating), ``--rounds`` times (``--wide-rounds`` for the wide model); the ratios are
   the medians of the rounds' ratios.
3. Measures where one call's time goes, per graph of each bundle: the median of a prefill or decode
   step through the runner against the bare call of the compiled graph (the rest is the runner's
   and torch's Python: building inputs, checks, torch's AOTInductor call wrapper, sampling).
4. Prints all of it and the ratios suggested / shipped. Target (issue 31): both ratios below 1.

``--threads`` (default 1) sets torch's intra-op threads for the replay, as ``OMP_NUM_THREADS``
would for `neuronc run`: on a small shared machine two threads per process stall at every
parallel region whenever another process holds the other core (measured: a demo decode step took
7.5 ms of wall with two threads at load 5, 0.13 ms with one), which drowns what padding costs.
``--work DIR`` keeps the models, store and graph cache there, so a second run replays without
compiling again (each compile is a minute or more on a busy machine).
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


def _wide_model(directory: Path, hidden: int, layers: int) -> Path:
    """The demo model's architecture, tokenizer and vocabulary, widened; seeded random weights.

    Every matrix is N(0, 0.02) (the config's initializer_range), every norm 1: deterministic, so a
    second run with ``--work`` finds the same model and hits the store.
    """
    if (directory / "model.safetensors").is_file():
        return directory
    import torch
    from safetensors.torch import save_file

    from neuronc.backends.inductor import graphs

    directory.mkdir(parents=True, exist_ok=True)
    for name in ("generation_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, directory / name)
    config = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    heads = max(1, hidden // 64)
    config.update(
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
    )
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    model = graphs.build_model(graphs.load_config(directory), torch.float32)
    generator = torch.Generator().manual_seed(31)
    state = {}
    for key, tensor in model.state_dict().items():
        if tensor.dim() == 1:
            state[key] = torch.ones(tensor.shape)
        else:
            state[key] = torch.randn(tensor.shape, generator=generator) * config["initializer_range"]
    save_file(state, str(directory / "model.safetensors"))
    return directory


def _replay(runners: dict[str, Any], requests: list[tuple[int, int]], corpus: list[int]) -> dict[str, dict[str, Any]]:
    """Every request through every runner in turn (the order alternating request by request, so a
    machine whose speed drifts slows both alike): wall and CPU seconds of each runner's generate
    calls (and the prefill's share, to the first token), the padded and real tokens by the
    runner's own routing, and the outputs."""
    result: dict[str, dict[str, Any]] = {
        name: {"wall": 0.0, "cpu": 0.0, "prefill": 0.0, "context_padded": 0, "context_real": 0, "token_padded": 0,
               "token_real": 0, "outputs": []}
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
            r["prefill"] += generated.ttft_ms / 1000
            r["outputs"].append(generated.tokens)
            r["context_padded"] += runner.context_graph_for(prompt_tokens).bucket - prompt_tokens
            r["context_real"] += prompt_tokens
            for position in range(prompt_tokens, prompt_tokens + len(generated.tokens) - 1):
                r["token_padded"] += runner.token_graph_for(position).bucket - (position + 1)
                r["token_real"] += position + 1
    return result


def _median_us(call: Any, count: int) -> float:
    call()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return round(1e6 * statistics.median(times), 1)


def _breakdown(runner: Any, count: int) -> dict[str, dict[str, float]]:
    """Per graph: the median of one prefill / decode step through the runner, and of the bare call
    of the compiled graph with the same inputs (microseconds of wall)."""
    import torch

    result: dict[str, dict[str, float]] = {}
    for bucket in runner.context_buckets:
        graph = runner.context_graph_for(bucket)
        row = [5] * bucket
        args = (torch.tensor([row]), torch.arange(bucket).repeat(1, 1), torch.tensor([bucket - 1]), *runner.kv)

        def bare(graph: Any = graph, args: Any = args) -> None:
            with torch.inference_mode():
                graph.model(*args)

        result[f"prefill {bucket}"] = {
            "runner_us": _median_us(lambda row=row: runner.prefill([row]), count),
            "graph_us": _median_us(bare, count),
        }
    for bucket in runner.token_buckets:
        graph = runner.token_graph_for(bucket - 1)
        args = (torch.tensor([[5]]), torch.tensor([[bucket - 1]]), *runner.kv)

        def bare_step(graph: Any = graph, args: Any = args) -> None:
            with torch.inference_mode():
                graph.model(*args)

        def step(bucket: int = bucket) -> None:
            torch.argmax(runner.step([5], [bucket - 1]), dim=-1).tolist()  # greedy, as generate picks

        result[f"decode {bucket}"] = {
            "runner_us": _median_us(step, 4 * count),
            "graph_us": _median_us(bare_step, 4 * count),
        }
    for figures in result.values():
        figures["overhead_us"] = round(figures["runner_us"] - figures["graph_us"], 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traffic", type=Path, default=TRAFFIC)
    parser.add_argument("--max-graphs", type=int, default=3)
    parser.add_argument("--models", default="demo,wide", help="comma-separated: demo, wide (default both)")
    parser.add_argument("--rounds", type=int, default=3, help="replays of the demo model")
    parser.add_argument("--wide-rounds", type=int, default=2, help="replays of the wide model")
    parser.add_argument("--wide-hidden", type=int, default=512)
    parser.add_argument("--wide-layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads for the replay (default 1)")
    parser.add_argument(
        "--work", type=Path, help="keep the models, store and graph cache here (default: a temporary directory)"
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
    say = (lambda *a: None) if args.json else print
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - {"demo", "wide"}
    if unknown or not models:
        sys.exit(f"--models: choose from demo, wide (got {args.models!r})")
    shutil.copytree(MODEL, scratch / "models" / "tiny-llama", dirs_exist_ok=True)
    if "wide" in models:
        _wide_model(scratch / "models" / "wide-llama", args.wide_hidden, args.wide_layers)
    profiles: dict[str, dict[str, Path]] = {}
    analyses: dict[str, dict[str, Any]] = {}
    for model in models:
        text = PROFILE.read_text(encoding="utf-8")
        if model == "wide":
            text = text.replace("id: models/tiny-llama", "id: models/wide-llama").replace(
                "name: tiny-llama-cpu", "name: wide-llama-cpu"
            )
        profiles[model] = {
            "default": scratch / f"{model}-default.yaml",
            "suggested": scratch / f"{model}-suggested.yaml",
        }
        for path in profiles[model].values():
            path.write_text(text, encoding="utf-8")
        analyses[model] = _neuronc(
            ["buckets", str(profiles[model]["suggested"]), "--traffic", str(args.traffic), "--max-graphs",
             str(args.max_graphs), "--write"],
            env,
        )  # fmt: skip
    analysis = analyses[models[0]]
    for name, figures in (("default", analysis["current"]), ("suggested", analysis["suggested"])):
        say(
            f"{name:>9}: context {figures['context_buckets']} token {figures['token_buckets']}: "
            f"{figures['graphs']} graphs, predicted padding {figures['padded_tokens']} tokens ({figures['padded_share']:.1%})"
        )
    bundles: dict[str, dict[str, Path]] = {}
    compile_seconds: dict[str, dict[str, float]] = {}
    for model in models:
        bundles[model], compile_seconds[model] = {}, {}
        for name, profile in profiles[model].items():
            bundle, seconds = _compile(profile, env)
            say(f"compiled {model} {name} in {seconds:.1f} s: {bundle}")
            bundles[model][name], compile_seconds[model][name] = bundle, round(seconds, 1)

    os.environ.update({k: env[k] for k in ("NEURONC_STORE", "NEURONC_GRAPH_CACHE")})
    import torch

    torch.set_num_threads(args.threads)
    from neuronc.buckets import load_traffic

    requests = [(r.prompt_tokens, r.output_tokens) for r in load_traffic(args.traffic).requests]
    report: dict[str, Any] = {
        "requests": len(requests),
        "max_graphs": args.max_graphs,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "models": {},
    }
    for model in models:
        rounds = args.rounds if model == "demo" else args.wide_rounds
        report["models"][model] = _model_report(model, bundles[model], analyses[model], requests, rounds, say)
        report["models"][model]["compile_seconds"] = compile_seconds[model]
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["pass"] = any(m["pass"] for m in report["models"].values())
    say(
        f"threads {report['threads']} on {report['cpus']} cores; load average before {report['load_average_before']}, "
        f"after {report['load_average_after']}"
    )
    say(f"target: both ratios below 1 on at least one model: {'PASS' if report['pass'] else 'FAIL'}")
    return report


def _model_report(
    model: str,
    bundles: dict[str, Path],
    analysis: dict[str, Any],
    requests: list[tuple[int, int]],
    rounds: int,
    say: Any,
) -> dict[str, Any]:
    from neuronc.runtime import load

    runners = {name: load(bundle) for name, bundle in bundles.items()}
    corpus = runners["default"].encode(CORPUS.read_text(encoding="utf-8")[:3000])
    replays = [_replay(runners, requests, corpus) for _ in range(rounds)]
    last = replays[-1]
    same = sum(a == b for a, b in zip(last["default"]["outputs"], last["suggested"]["outputs"], strict=True))
    config = runners["default"].model_config
    report: dict[str, Any] = {
        "hidden_size": config.get("hidden_size"),
        "layers": config.get("num_hidden_layers"),
        "rounds": rounds,
    }
    for name, runner in runners.items():
        c = last[name]
        padded = c["context_padded"] + c["token_padded"]
        report[name] = {
            "context_buckets": runner.context_buckets,
            "token_buckets": runner.token_buckets,
            **{k: c[k] for k in ("context_padded", "context_real", "token_padded", "token_real")},
            "padded_tokens": padded,
            "padded_share": round(padded / (padded + c["context_real"] + c["token_real"]), 4),
            "wall_seconds": [round(r[name]["wall"], 3) for r in replays],
            "prefill_seconds": [round(r[name]["prefill"], 3) for r in replays],
            "cpu_seconds": [round(r[name]["cpu"], 3) for r in replays],
            "breakdown_us": _breakdown(runner, 20),
        }
    d, s = report["default"], report["suggested"]
    report["padded_tokens_ratio"] = round(s["padded_tokens"] / d["padded_tokens"], 4)
    ratios = {key: [r["suggested"][key] / r["default"][key] for r in replays] for key in ("wall", "cpu", "prefill")}
    report["wall_ratio"] = round(statistics.median(ratios["wall"]), 4)
    report["cpu_ratio"] = round(statistics.median(ratios["cpu"]), 4)
    report["prefill_wall_ratio"] = round(statistics.median(ratios["prefill"]), 4)
    report["wall_ratios_by_round"] = [round(x, 4) for x in ratios["wall"]]
    report["predicted_padded_tokens"] = {"default": analysis["current"]["padded_tokens"],
                                         "suggested": analysis["suggested"]["padded_tokens"]}  # fmt: skip
    report["runner_padding_equals_prediction"] = report["predicted_padded_tokens"] == {
        n: report[n]["padded_tokens"] for n in runners
    }
    report["identical_outputs"] = same
    report["pass"] = report["padded_tokens_ratio"] < 1 and report["wall_ratio"] < 1
    say(f"-- {model} model (hidden {report['hidden_size']}, {report['layers']} layers), {rounds} round(s)")
    for name in runners:
        r = report[name]
        say(
            f"{name:>9}: padded {r['padded_tokens']} tokens ({r['padded_share']:.1%}; context {r['context_padded']}, "
            f"token generation {r['token_padded']}); replay wall {r['wall_seconds']} s (prefill "
            f"{r['prefill_seconds']} s), CPU {r['cpu_seconds']} s"
        )
        cells = ", ".join(f"{k} {v['runner_us']:.0f} ({v['graph_us']:.0f} graph)" for k, v in r["breakdown_us"].items())
        say(f"{'':>9}  one call, median us: {cells}")
    say(
        f"suggested / default: padded tokens {report['padded_tokens_ratio']:.3f}, wall {report['wall_ratio']:.3f} "
        f"(per round {report['wall_ratios_by_round']}; prefill {report['prefill_wall_ratio']:.3f}), "
        f"CPU {report['cpu_ratio']:.3f}"
    )
    say(f"runner padding equals the prediction: {report['runner_padding_equals_prediction']}")
    say(f"identical greedy outputs: {same} of {len(requests)}")
    say(f"{model}: both ratios below 1: {'PASS' if report['pass'] else 'FAIL'}")
    return report


if __name__ == "__main__":
    main()
