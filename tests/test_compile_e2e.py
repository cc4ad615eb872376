"""The whole pipeline on the shipped demo profile with the real inductor backend.

One session-scoped build compiles the demo's three graphs once; the tests then check that the
bundle verifies, that a second compile is a store hit that never imports torch, that changing one
bucket recompiles only that graph, and that `neuronc run` gives exactly Hugging Face's greedy tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _demo import Demo

from neuronc.bundle import read_manifest, verify_bundle
from neuronc.pipeline import compile_profiles
from neuronc.store import LocalStore

PROMPT = "The quick brown fox"


@pytest.fixture
def graph_cache(demo: Demo, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEURONC_GRAPH_CACHE", str(demo.graph_cache))
    return demo.graph_cache


def test_demo_bundle_verifies(demo: Demo) -> None:
    assert verify_bundle(demo.bundle).ok
    manifest = read_manifest(demo.bundle)
    assert manifest.backend == "inductor" and manifest.target == "cpu"
    assert [(g.name, g.cache_hit) for g in manifest.graphs] == [
        ("cte-b1-s32", False),
        ("cte-b1-s64", False),
        ("tkg-b1-s128", False),
    ]
    assert all(g.compile_seconds > 0 for g in manifest.graphs)
    assert [s.file for s in manifest.shards] == ["weights/rank-000-of-001.safetensors"]
    stages = {s.name for s in manifest.stages}
    assert {"resolve", "split", "model_files", "compile"} <= stages
    assert "cpu_isa" in manifest.toolchain and manifest.toolchain["torch"]
    compile_stage = next(s for s in demo.report.stages if s.name == "compile")
    # Graphs compile in worker processes: their peak is measured too.
    assert compile_stage.children_peak_rss_bytes and compile_stage.children_peak_rss_bytes > 100 * 2**20


def test_inspect_of_a_cpu_bundle_says_how_to_load_it(demo: Demo) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", "inspect", str(demo.bundle), "--json"],
        capture_output=True,
        text=True,
        env=demo.env(),
        check=True,
    )
    snippet = json.loads(proc.stdout)["load_snippet"]
    assert "from neuronc.runtime import load" in snippet and str(demo.bundle) in snippet


def test_second_compile_is_a_store_hit_without_torch(demo: Demo) -> None:
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted({'torch', 'transformers', 'numpy'} & set(sys.modules)), file=sys.stderr))\n"
        "from neuronc.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "compile", str(demo.profile), "--json"],
        capture_output=True,
        text=True,
        env=demo.env(),
        cwd=demo.root,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [build] = json.loads(result.stdout)["builds"]
    assert (build["status"], build["bundle"]) == ("hit", str(demo.bundle))
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr


@pytest.mark.slow  # a real compile, or torch and transformers loaded in a fresh process
def test_changing_one_bucket_recompiles_only_that_graph(demo: Demo, graph_cache: Path) -> None:
    changed = demo.root / "changed.yaml"
    changed.write_text(demo.profile.read_text().replace("context_buckets: [32, 64]", "context_buckets: [32, 48]"))
    [report] = compile_profiles([changed], store=demo.store, jobs=2)
    assert report.status == "built", report.error
    assert [(g.name, g.cache_hit) for g in report.graphs] == [
        ("cte-b1-s32", True),
        ("cte-b1-s48", False),
        ("tkg-b1-s128", True),
    ]
    assert report.nearest is not None
    assert [d["field"] for d in report.nearest.differences] == ["sequence.context_buckets"]
    assert verify_bundle(Path(report.bundle or "")).ok
    assert len(LocalStore(demo.store).list()) == 2


@pytest.mark.slow  # a real compile, or torch and transformers loaded in a fresh process
def test_run_gives_exactly_the_hugging_face_greedy_tokens(demo: Demo) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ran = demo.run_json(PROMPT, "-n", "24")

    model_dir = demo.root / "models" / "tiny-llama"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    assert ids.shape[1] == ran["prompt_tokens"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.inference_mode():
        generated = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False, pad_token_id=0
        )
    expected = [int(t) for t in generated[0, ids.shape[1] :]]
    assert ran["tokens"] == expected


@pytest.mark.slow  # a real compile, or torch and transformers loaded in a fresh process
def test_verify_accuracy_passes_through_the_cli(demo: Demo, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The quick brown fox\nOnce upon a time, in a land far away, there lived\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuronc",
            "verify",
            str(demo.bundle),
            "--accuracy",
            "--prompts",
            str(prompts),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=demo.env(),
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] is True
    accuracy = data["accuracy"]
    assert accuracy["passed"] is True
    assert [p["prompt"] for p in accuracy["prompts"]] == prompts.read_text().splitlines()
    assert all(p["tokens_match"] for p in accuracy["prompts"])
    assert accuracy["max_abs_diff"] < 1e-3


def test_verify_accuracy_options_need_accuracy(demo: Demo) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neuronc", "verify", str(demo.bundle), "--tol", "0.1"],
        capture_output=True,
        text=True,
        env=demo.env(),
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--prompts and --tol apply to --accuracy" in result.stderr
