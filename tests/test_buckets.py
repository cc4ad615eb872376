"""`neuronc buckets`: the exact choice against independent solvers, traffic formats and their errors,
--write keeping the profile's text, and `plan --traffic`."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc.backends import get_backend
from neuronc.backends.bucket_rules import BucketRule
from neuronc.buckets import analyse, choose, load_traffic, padding
from neuronc.buckets.report import token_histogram
from neuronc.buckets.traffic import Request, Traffic, synthetic_requests
from neuronc.buckets.write import set_buckets
from neuronc.cli import app
from neuronc.errors import InvalidInputError
from neuronc.profile import load_profile, parse_profile

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "profiles" / "tiny-llama-cpu.yaml"


# -- independent solvers ----------------------------------------------------------------------------


def brute_force(histogram: dict[int, int], rule: BucketRule, k: int) -> int:
    """The least padding over every set of at most k allowed buckets that holds every holdable length."""
    holdable = [v for v in histogram if rule.round_up(v) is not None]
    candidates = [
        b for b in range(1, rule.limit + 1) if rule.allows((b,)) or (rule.largest is None and b % rule.multiple == 0)
    ]
    if rule.largest is not None:
        candidates = [b for b in range(1, rule.largest) if b % rule.multiple == 0]
    best = None
    for size in range(0, k + 1):
        for combo in itertools.combinations(candidates, size):
            buckets = tuple(sorted(combo + ((rule.largest,) if rule.largest is not None else ())))
            if not buckets or len(buckets) > k:
                continue
            if any(v > buckets[-1] for v in holdable):
                continue
            cost = sum(w * (min(b for b in buckets if b >= v) - v) for v, w in histogram.items() if v in holdable)
            best = cost if best is None else min(best, cost)
    assert best is not None
    return best


def quadratic_dp(histogram: dict[int, int], k: int) -> int:
    """The plain O(K n^2) partition DP (no divide and conquer), for lengths with no rounding."""
    lengths = sorted(histogram)
    n = len(lengths)
    weights, sums = [0] * (n + 1), [0] * (n + 1)
    for j, v in enumerate(lengths, start=1):
        weights[j], sums[j] = weights[j - 1] + histogram[v], sums[j - 1] + histogram[v] * v
    inf = float("inf")
    dp = [[0.0] + [inf] * n for _ in range(k + 1)]
    for g in range(1, k + 1):
        for j in range(1, n + 1):
            v = lengths[j - 1]
            dp[g][j] = min(
                dp[g - 1][i - 1] + v * (weights[j] - weights[i - 1]) - (sums[j] - sums[i - 1]) for i in range(1, j + 1)
            )
    return int(min(dp[g][n] for g in range(1, k + 1)))


RULES = {
    "any": BucketRule(18),
    "largest": BucketRule(18, largest=18),
    "multiple-4": BucketRule(18, multiple=4, largest=18),
    "multiple-3-any": BucketRule(18, multiple=3),
}


@pytest.mark.parametrize("name", list(RULES))
@pytest.mark.parametrize("seed", range(12))
def test_the_choice_equals_a_brute_force_optimum(name: str, seed: int) -> None:
    rng = random.Random(seed)
    rule = RULES[name]
    # Mixed traffic: a short mode, a long tail, and a few lengths past the limit (never holdable).
    histogram = Counter(rng.choice([rng.randint(1, 5), rng.randint(6, 18), rng.randint(19, 24)]) for _ in range(30))
    choices = choose(dict(histogram), rule, 4)
    for k, choice in enumerate(choices, start=1):
        assert choice.padded == brute_force(dict(histogram), rule, k), (k, choice)
        assert len(choice.buckets) <= k and rule.allows(choice.buckets)
        check = padding(histogram, choice.buckets)
        assert check.padded == choice.padded
        assert check.beyond == sum(w for v, w in histogram.items() if rule.round_up(v) is None)


def test_divide_and_conquer_equals_the_quadratic_dp_on_many_lengths() -> None:
    rng = random.Random(7)
    histogram = dict(Counter(int(rng.lognormvariate(4, 0.8)) + 1 for _ in range(3000)))
    rule = BucketRule(max(histogram))
    for choice in choose(histogram, rule, 6):
        assert choice.padded == quadratic_dp(histogram, choice.max_graphs)


def test_a_fixed_rule_leaves_nothing_to_choose() -> None:
    rule = BucketRule(64, fixed=(64,))
    assert {c.buckets for c in choose({3: 2, 40: 1}, rule, 3)} == {(64,)}


# -- the demo build ----------------------------------------------------------------------------------


def mixed_traffic(seed: int = 3) -> list[Request]:
    rng = random.Random(seed)
    requests = [Request(rng.randint(2, 12), rng.randint(2, 24)) for _ in range(160)]
    requests += [Request(rng.randint(20, 60), rng.randint(4, 50)) for _ in range(30)]
    return requests


def test_the_suggestion_never_pads_more_than_the_demo_profile() -> None:
    [spec] = load_profile(DEMO).specs
    backend = get_backend(spec.backend)
    analysis = analyse(spec, backend, Traffic(mixed_traffic(), "mixed", "jsonl"), max_graphs=2)
    current, suggested = analysis.current, analysis.suggested
    # The demo compiles 2 context graphs and 1 token graph: K=2 holds both.
    assert current.context_buckets == (32, 64) and current.token_buckets == (128,)
    assert suggested.padded_tokens < current.padded_tokens
    assert suggested.context.padded == choose(analysis.context_hist, analysis.rules.context, 2)[1].padded
    assert suggested.token_buckets[-1] == 128  # the inductor plan always compiles max_length
    assert suggested.graphs == len(suggested.context_buckets) + len(suggested.token_buckets)
    assert [f.padded_tokens for f in analysis.curve] == sorted((f.padded_tokens for f in analysis.curve), reverse=True)


def test_requests_beyond_the_largest_bucket_are_counted() -> None:
    [spec] = load_profile(DEMO).specs
    requests = [Request(10, 5)] * 6 + [Request(80, 5)] * 3 + [Request(200, 1)] + [Request(100, 40)]
    analysis = analyse(spec, get_backend(spec.backend), Traffic(requests, "t", "jsonl"), max_graphs=3)
    # Current: 64 is the largest context bucket: 80, 100 and 200 are refused.
    assert analysis.current.requests_beyond == 5 and analysis.current.context.beyond == 5
    # Suggested: a prompt of 200 is above max_context_length 128 (no build serves it); 100 + 40 > 128 is truncated.
    assert analysis.suggested.requests_beyond == 2
    assert analysis.suggested.context.beyond == 1
    assert analysis.to_json()["suggested"]["beyond_share"] == pytest.approx(2 / 11)


def test_token_histogram_counts_decode_steps_by_kv_length() -> None:
    histogram = token_histogram([Request(3, 4), Request(5, 1), Request(200, 9)], context_limit=128, limit=128)
    assert histogram == Counter({4: 1, 5: 1, 6: 1})


# -- traffic files -----------------------------------------------------------------------------------


def test_a_malformed_line_is_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"prompt_tokens": 5, "output_tokens": 3}\n\n{"prompt_tokens": 5, "output_tokens": \n')
    result = CliRunner().invoke(app, ["buckets", str(DEMO), "--traffic", str(traffic), "--json"])
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    assert document["error"] == "invalid_input" and f"{traffic}:3:" in document["message"]
    traffic.write_text('{"prompt_tokens": 5}\n{"prompt_tokens": 0, "output_tokens": 2}\n')
    with pytest.raises(InvalidInputError, match=r"t\.jsonl:2: prompt_tokens: must be an integer"):
        load_traffic(traffic)


def test_an_empty_traffic_file_is_exit_2(tmp_path: Path) -> None:
    traffic = tmp_path / "empty.jsonl"
    traffic.write_text("\n  \n")
    result = CliRunner().invoke(app, ["buckets", str(DEMO), "--traffic", str(traffic)])
    assert result.exit_code == 2
    assert "empty" in result.output


def test_guidellm_report_and_synthetic_spec(tmp_path: Path) -> None:
    # The shape guidellm 0.8 writes: benchmarks[].requests.{successful,incomplete,errored}[] of
    # GenerativeRequestStats, with prompt_tokens / output_tokens serialised (computed fields).
    report = {
        "benchmarks": [
            {
                "requests": {
                    "successful": [
                        {"request_id": "a", "prompt_tokens": 7, "output_tokens": 3},
                        {"request_id": "b", "input_metrics": {"text_tokens": 9}, "output_metrics": {"text_tokens": 2}},
                    ],
                    "incomplete": [{"request_id": "c", "prompt_tokens": 50, "output_tokens": 1}],
                    "errored": [],
                }
            }
        ]
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    loaded = load_traffic(path)
    assert loaded.format == "guidellm-report"
    assert loaded.requests == [Request(7, 3), Request(9, 2)]
    spec = tmp_path / "spec.txt"
    spec.write_text("prompt_tokens=20,prompt_tokens_stdev=5,output_tokens=8,samples=500\n")
    assert (
        load_traffic("prompt_tokens=20,prompt_tokens_stdev=5,output_tokens=8,samples=500").requests
        == load_traffic(spec).requests
    )
    sampled = load_traffic(spec)
    assert sampled.format == "guidellm-synthetic" and len(sampled.requests) == 500
    # guidellm's sampler: gauss clipped to mean +- 5 stdev (no min given: at least 1).
    assert all(1 <= r.prompt_tokens <= 45 and r.output_tokens == 8 for r in sampled.requests)
    assert sampled.requests == synthetic_requests(
        {"prompt_tokens": 20, "prompt_tokens_stdev": 5, "output_tokens": 8, "samples": 500}, "x"
    )
    yaml_spec = tmp_path / "spec.yaml"
    yaml_spec.write_text("kind: synthetic_text\nprompt_tokens: 12\nprompt_tokens_min: 10\nprompt_tokens_max: 14\n")
    uniform = load_traffic(yaml_spec).requests
    assert {r.prompt_tokens for r in uniform} == {10, 11, 12, 13, 14} and len(uniform) == 1000
    one = tmp_path / "one.jsonl"
    one.write_text('{"prompt_tokens": 12, "output_tokens": 4}\n')
    assert load_traffic(one).requests == [Request(12, 4)]  # one request, not a spec


def test_text_prompts_are_counted_as_the_runtime_counts_them(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import transformers

    prompts = ["The Queen of Hearts", "Alice was beginning to get very tired of sitting by her sister", "Oh dear!"]
    traffic = tmp_path / "prompts.jsonl"
    traffic.write_text("".join(json.dumps({"prompt": p, "output_tokens": 5}) + "\n" for p in prompts))
    [spec] = load_profile(DEMO).specs
    from neuronc.buckets import tokenizer_for

    loaded = load_traffic(traffic, tokenizer_for(spec))
    auto = transformers.AutoTokenizer.from_pretrained(str(ROOT / "profiles" / "models" / "tiny-llama"))
    assert [r.prompt_tokens for r in loaded.requests] == [len(auto(p)["input_ids"]) for p in prompts]
    assert loaded.tokenized


# -- --write -----------------------------------------------------------------------------------------


def test_write_keeps_comments_and_layout(tmp_path: Path) -> None:
    profile = tmp_path / "tiny-llama-cpu.yaml"
    shutil.copy(DEMO, profile)
    shutil.copytree(ROOT / "profiles" / "models", tmp_path / "models")
    before = profile.read_text()
    traffic = tmp_path / "t.jsonl"
    traffic.write_text(
        "".join(
            json.dumps({"prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}) + "\n"
            for r in mixed_traffic()
        )
    )
    result = CliRunner().invoke(
        app, ["buckets", str(profile), "--traffic", str(traffic), "--write", "--json", "-k", "3"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["written"] is True
    after = profile.read_text()
    suggested = document["suggested"]
    context = ", ".join(map(str, suggested["context_buckets"]))
    token = ", ".join(map(str, suggested["token_buckets"]))
    assert f"  context_buckets: [{context}]      # one context-encoding graph each" in after
    assert f"  token_buckets: [{token}]" in after and "# one token-generation graph over the whole KV cache" in after
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(changed) == 2  # the two bucket lines, nothing else
    [build] = load_profile(profile).specs
    assert list(build.sequence.context_buckets) == suggested["context_buckets"]


def test_set_buckets_block_lists_flow_mappings_and_missing_keys() -> None:
    block = "model: {id: m}\nsequence:\n  max_length: 64   # total\n  context_buckets:\n    - 16  # small\n    - 64\nbackend: inductor\n"
    edited = set_buckets(block, {"context_buckets": [8, 32], "token_buckets": [64]})
    assert edited == (
        "model: {id: m}\nsequence:\n  max_length: 64   # total\n  context_buckets:\n    - 8  # small\n    - 32\n"
        "  token_buckets: [64]\nbackend: inductor\n"
    )
    flow = "sequence: {max_length: 64, context_buckets: auto}\n"
    assert set_buckets(flow, {"context_buckets": [8], "token_buckets": [64]}) == (
        "sequence: {max_length: 64, context_buckets: [8], token_buckets: [64]}\n"
    )
    matrix = "sequence: {max_length: 64}\nmatrix:\n  sequence.context_buckets: [[8], [16]]\n"
    with pytest.raises(InvalidInputError, match=r"<profile>:3: matrix.sequence.context_buckets"):
        set_buckets(matrix, {"context_buckets": [8]})
    text = DEMO.read_text().replace("[32, 64]", "[16, 48]")
    assert parse_profile(text, base_dir=DEMO.parent).specs[0].sequence.context_buckets == (16, 48)


# -- plan, imports -----------------------------------------------------------------------------------


def test_plan_traffic_adds_coverage_and_padding(tmp_path: Path) -> None:
    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"prompt_tokens": 10, "output_tokens": 6}\n{"prompt_tokens": 90, "output_tokens": 6}\n')
    result = CliRunner().invoke(app, ["plan", str(DEMO), "--traffic", str(traffic), "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["builds"]
    t = row["traffic"]
    assert t["requests"] == 2 and t["coverage"] == 0.5 and t["requests_beyond"] == 1
    # Context: 10 pads to 32 (22 of 32); token generation: KV lengths 11..15 in the 128 window.
    assert t["context_padded_share"] == pytest.approx(22 / 32, abs=1e-6)
    # (the prompt of 90 is refused by the largest context bucket, 64: it never decodes)
    assert t["token_padded_share"] == pytest.approx(sum(128 - k for k in range(11, 16)) / (128 * 5), abs=1e-6)
    text = CliRunner().invoke(app, ["plan", str(DEMO), "--traffic", str(traffic)])
    assert "traffic (2 requests): 50.0% served, 1 beyond the largest bucket" in text.output


def test_buckets_imports_neither_torch_nor_transformers(tmp_path: Path) -> None:
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("".join(json.dumps({"prompt_tokens": 3 + i % 20, "output_tokens": 4}) + "\n" for i in range(50)))
    code = (
        "import sys\nfrom neuronc.cli import main\ntry:\n    main(['buckets', sys.argv[1], '--traffic', sys.argv[2], '--json'])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\nassert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(DEMO), str(traffic)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_plot_needs_matplotlib(tmp_path: Path) -> None:
    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"prompt_tokens": 10, "output_tokens": 6}\n')
    result = CliRunner().invoke(
        app, ["buckets", str(DEMO), "--traffic", str(traffic), "--plot", str(tmp_path / "h.svg")]
    )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 5 and "neuronc[plot]" in result.output
    else:
        assert result.exit_code == 0, result.output
        assert (tmp_path / "h.svg").read_text().lstrip().startswith("<?xml")


def test_compile_time_is_estimated_from_the_stores_earlier_builds(demo: Any, tmp_path: Path) -> None:
    from neuronc.buckets import analyse_profile
    from neuronc.bundle import read_manifest

    traffic = tmp_path / "t.jsonl"
    traffic.write_text("".join(json.dumps({"prompt_tokens": 4 + i % 40, "output_tokens": 8}) + "\n" for i in range(80)))
    analysis = analyse_profile(demo.profile, traffic, max_graphs=3, store=demo.store)
    recorded = {g.bucket: g.compile_seconds for g in read_manifest(demo.bundle).graphs}
    # The demo's own buckets were each compiled once: the estimate is their sum.
    assert analysis.current.compile_seconds == pytest.approx(sum(recorded.values()), abs=0.1)
    assert "3 of 3 buckets recorded exactly" in analysis.current.compile_basis
    assert analysis.suggested.compile_seconds is not None and analysis.suggested.graphs == 6
    empty = analyse_profile(demo.profile, traffic, store=tmp_path / "empty-store")
    assert empty.current.compile_seconds is None and "no earlier builds" in empty.current.compile_basis


def test_vllm_neuron_decode_buckets_are_multiples_of_128(tmp_path: Path, tiny_llama: Path) -> None:
    shutil.copytree(tiny_llama, tmp_path / "model")
    profile = tmp_path / "vllm.yaml"
    profile.write_text(
        "model: {id: ./model}\nbackend: vllm-neuron\ntarget: trn2\ntp_degree: 2\nbatch_size: 4\n"
        "sequence: {max_length: 512, context_buckets: [256, 512], token_buckets: [512]}\n"
    )
    rng = random.Random(5)
    traffic = tmp_path / "t.jsonl"
    lines = [(rng.randint(20, 150), rng.randint(10, 200)) for _ in range(200)] + [(300, 150)] * 5
    traffic.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": m}) + "\n" for p, m in lines))
    result = CliRunner().invoke(app, ["buckets", str(profile), "--traffic", str(traffic), "--json", "-k", "3"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    token = document["suggested"]["token_buckets"]
    assert token[-1] == 512 and all(b % 128 == 0 for b in token) and len(token) <= 3
    assert document["rules"]["token"]["multiple"] == 128
    assert document["suggested"]["padded_tokens"] <= document["current"]["padded_tokens"]
    # Prefill buckets have no rule but the limit: the longest prompt seen is the largest.
    assert document["suggested"]["context_buckets"][-1] == 300


def test_optimum_neuron_has_nothing_to_choose() -> None:
    [spec] = parse_profile(
        "model: {id: org/m}\nbackend: optimum-neuron\ntarget: inf2\nsequence: {max_length: 256}\n",
        check_model_config=False,
    ).specs
    analysis = analyse(spec, get_backend(spec.backend), Traffic([Request(10, 5), Request(90, 30)], "t", "jsonl"))
    assert analysis.suggested.context_buckets == (256,) and analysis.suggested.token_buckets == (256,)
    assert any("nothing to choose" in note for note in analysis.notes)
