"""Hostile traffic files for `neuronc buckets` and `plan --traffic` (issue 41, items 10 and 11).

Deeply nested JSON or YAML, a data spec that is not YAML, a minimum above a maximum and a YAML report
whose aliases multiply into millions of requests are each one error line, exit 2 (and with --json,
a document that says exit 2), in a second or two; never a traceback, exit 1 or minutes of work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _bundles import neuronc, text

from neuronc.buckets import traffic as traffic_module
from neuronc.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "profiles" / "tiny-llama-cpu.yaml"


def _alias_bomb() -> str:
    """A GuideLLM report in YAML (~1 KB) whose aliases expand to 10**7 successful requests."""
    lines = ["r0: &r0 {prompt_tokens: 10, output_tokens: 5}"]
    lines.append("l0: &l0 [" + ", ".join(["*r0"] * 10) + "]")
    for level in range(1, 7):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    lines.append("benchmarks:")
    lines.append("  - requests: {successful: *l6}")
    return "\n".join(lines) + "\n"


CASES = {
    "deep-json": ("traffic.json", "[" * 100_000 + "]" * 100_000, "nested"),
    "deep-json-object": ("traffic.json", '{"a":' * 5_000 + "1" + "}" * 5_000, "nested"),
    "deep-yaml": ("traffic.yaml", "a:\n" + "".join(" " * i + "- \n" for i in range(1, 3000)), "nested"),
    "deep-yaml-flow": ("traffic.yaml", "benchmarks: " + "[" * 5_000 + "]" * 5_000, "nested"),
    "spec-not-yaml": ("spec.txt", "prompt_tokens=[1,output_tokens=4", "prompt_tokens"),
    "spec-min-above-max": ("spec.txt", "prompt_tokens=50,prompt_tokens_min=100,prompt_tokens_max=10", "above"),
    "yaml-spec-min-above-max": (
        "spec.yaml",
        "prompt_tokens: 50\noutput_tokens: 8\noutput_tokens_min: 9\noutput_tokens_max: 3\n",
        "above",
    ),
    "alias-bomb": ("report.yaml", _alias_bomb(), "YAML nodes"),
}


@pytest.mark.parametrize("command", ["buckets", "plan"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_traffic_is_one_error_line(tmp_path: Path, case: str, command: str) -> None:
    name, content, said = CASES[case]
    (tmp_path / name).write_text(content)
    args = ["buckets", DEMO, "--traffic", name] if command == "buckets" else ["plan", DEMO, "--traffic", name]
    started = time.monotonic()
    proc = neuronc(*args, cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - started
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, text(proc)
    assert "Traceback" not in stderr
    assert stderr.startswith(f"error: {name}"), stderr
    assert said in stderr.splitlines()[0], stderr
    assert elapsed < 30, f"took {elapsed:.0f} s"
    proc = neuronc(*args, "--json", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, text(proc)
    document = json.loads(proc.stdout)
    assert document["exit_code"] == 2 and document["error"] == "invalid_input", document


def test_a_data_spec_given_inline_that_is_not_yaml(tmp_path: Path) -> None:
    proc = neuronc("buckets", DEMO, "--traffic", "prompt_tokens={a: [,output_tokens=3", cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert "Traceback" not in proc.stderr.decode()
    assert "prompt_tokens" in proc.stderr.decode()


def test_the_request_count_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every format stops at MAX_TRAFFIC_REQUESTS (one million): a larger file is refused, not analysed."""
    monkeypatch.setattr(traffic_module, "MAX_TRAFFIC_REQUESTS", 100)
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n' * 101)
    with pytest.raises(InvalidInputError, match="more than 100 requests"):
        traffic_module.load_traffic(jsonl)
    jsonl.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n' * 100)
    assert len(traffic_module.load_traffic(jsonl).requests) == 100
    report = tmp_path / "report.json"
    successful = [{"prompt_tokens": 10, "output_tokens": 5}] * 60
    report.write_text(json.dumps({"benchmarks": [{"requests": {"successful": successful}}] * 2}))
    with pytest.raises(InvalidInputError, match="more than 100 requests"):
        traffic_module.load_traffic(report)
    assert traffic_module.MAX_SYNTHETIC_SAMPLES <= 1_000_000


def test_a_yaml_report_with_a_few_honest_aliases_still_loads(tmp_path: Path) -> None:
    report = tmp_path / "report.yaml"
    report.write_text(
        "one: &one {prompt_tokens: 10, output_tokens: 5}\n"
        "benchmarks:\n  - requests: {successful: [*one, *one, {prompt_tokens: 20, output_tokens: 1}]}\n"
    )
    traffic = traffic_module.load_traffic(report)
    assert [(r.prompt_tokens, r.output_tokens) for r in traffic.requests] == [(10, 5), (10, 5), (20, 1)]
