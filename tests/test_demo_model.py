"""The demo model: the shipped files, their regeneration by scripts/train_demo_model.py, and its English.

The slow tests compile the model (the session's `demo` fixture, shared with test_compile_e2e.py;
first, so that its compile workers' peak memory is measured before the trainer's) and retrain it
(a couple of minutes of one core).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _demo import Demo

import neuronc
from neuronc.demo import MODEL_FILES, model_dir

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "scripts" / "train_demo_model.py"
CORPUS_README = ROOT / "scripts" / "demo-corpus" / "README.md"
MODEL = model_dir()
PROMPT = "The quick brown fox"


def _trainer() -> ModuleType:
    """scripts/train_demo_model.py as a module (importing it runs nothing and sets nothing)."""
    spec = importlib.util.spec_from_file_location("train_demo_model", TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _english(text: str, vocabulary: set[str]) -> tuple[int, float]:
    """(number of words, share of them that are words of the corpus)."""
    words = re.findall(r"[A-Za-z]+", text)
    return len(words), sum(w.lower() in vocabulary for w in words) / max(len(words), 1)


def test_shipped_model_is_complete_and_small() -> None:
    # Package data, wherever neuronc is installed (a checkout, or a wheel in CI's release passes).
    assert Path(neuronc.__file__).parent / "data" / "profiles" / "models" / "tiny-llama" == MODEL
    assert sorted(p.name for p in MODEL.iterdir()) == sorted(MODEL_FILES)
    total = sum((MODEL / name).stat().st_size for name in MODEL_FILES)
    assert total < 1.5 * 2**20, total
    config = json.loads((MODEL / "config.json").read_text())
    tokenizer = json.loads((MODEL / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) == config["vocab_size"]
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"]


def test_corpus_is_the_one_its_readme_names() -> None:
    corpus = _trainer().CORPUS
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert digest in CORPUS_README.read_text(encoding="utf-8")


def test_tokenizer_and_configs_regenerate_byte_identically() -> None:
    pytest.importorskip("tokenizers")
    trainer = _trainer()
    files = trainer.text_files(trainer.train_tokenizer(trainer.corpus_paragraphs()))
    assert sorted([*files, "model.safetensors"]) == sorted(MODEL_FILES)
    for name, data in files.items():
        assert (MODEL / name).read_bytes() == data, name


def test_demo_defaults_to_the_package_data_from_any_directory(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc.demo", "--help"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    # argparse wraps long help lines, at hyphens too: compare without any whitespace.
    assert "".join(f"(default {MODEL})".split()) in "".join(proc.stdout.split())


@pytest.fixture(scope="module")
def training_probe() -> dict[str, object]:
    """tests/_demo_training_probe.py over the trainer, in the trainer's pinned environment (its PINNED_ENV)."""
    pytest.importorskip("torch")
    env = {**os.environ, **_trainer().PINNED_ENV}
    probe = Path(__file__).with_name("_demo_training_probe.py")
    done = subprocess.run(
        [sys.executable, str(probe), str(TRAINER)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_the_trainers_optimizer_step_is_correctly_rounded_bit_for_bit(training_probe: dict[str, object]) -> None:
    """Issue 38: the shipped bytes must not depend on the CPU's maker. Every value of the trainer's AdamW
    step equals a reference made only of correctly rounded float32 operations (its square root taken in
    float64 and rounded once), so no vendor-defined approximation (MKL's vsSqrt starts from ``rsqrtps``)
    is in it. The control shows the comparison catches that class of bug on any CPU: AdamW's single-tensor
    path, the trainer's before, takes torch.sqrt (MKL VML's vsSqrt, not correctly rounded) and differs."""
    report = training_probe
    assert report["capability"] == "DEFAULT"  # the trainer's ATEN_CPU_CAPABILITY pin reached torch
    optimizer = report["optimizer"]
    assert isinstance(optimizer, dict)
    assert optimizer["trainer"] == {"param": 0, "exp_avg": 0, "exp_avg_sq": 0}
    assert optimizer["single-tensor"]["param"] > 0


def test_a_training_step_calls_no_mkl_vector_math_op(training_probe: dict[str, object]) -> None:
    """No op that torch routes through MKL's vector math library (vml.h's IMPLEMENT_VML_MKL list: sqrt,
    exp, log, sin, cos ...) runs while the trainer trains: those kernels choose their code by the CPU and
    are not correctly rounded, and MKL_CBWR does not pin them. The trainer before issue 38 called cos, sin
    (its rotary tables) and sqrt (AdamW)."""
    assert training_probe["vml_ops_called"] == []


@pytest.mark.slow
def test_quickstart_writes_english_and_the_untrained_model_does_not(demo: Demo, tmp_path: Path) -> None:
    from neuronc.backends.inductor.runtime import eager_runner

    trainer = _trainer()
    vocabulary = trainer.corpus_words()
    ran = demo.run_json(PROMPT)
    count, english = _english(ran["text"], vocabulary)
    assert ran["generated_tokens"] == 32 and count >= 16, ran["text"]
    assert english >= 0.8, ran["text"]

    # The same model before training (same seed, same tokenizer): gibberish.
    untrained = tmp_path / "untrained"
    subprocess.run(
        [sys.executable, str(TRAINER), "--out", str(untrained), "--steps", "0"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert (untrained / "tokenizer.json").read_bytes() == (MODEL / "tokenizer.json").read_bytes()
    runner = eager_runner(untrained, context_buckets=(32, 64), max_length=128)
    baseline = runner.generate(PROMPT, max_new_tokens=32)
    _, baseline_english = _english(baseline.text, vocabulary)
    assert baseline.tokens != ran["tokens"]
    assert baseline_english <= 0.5 and english - baseline_english >= 0.4, (baseline.text, ran["text"])


# What picks torch's CPU kernels by the vector ISA, set as each kind of CPU selects them: ATen's dispatch
# (ATEN_CPU_CAPABILITY), MKL's code path (MKL_ENABLE_INSTRUCTIONS; AVX512_E4 adds AMX) and oneDNN's
# (ONEDNN_MAX_CPU_ISA). Each library caps a request at what the CPU has, so on an AVX2-only machine the
# second kind runs as the first; on an AVX-512 machine the two really take different kernels unless the
# trainer's pins hold.
CPU_KINDS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512-amx": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512_E4",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX",
    },
}


@pytest.mark.slow
def test_demo_check_retrains_byte_identically_from_another_directory_on_either_kind_of_cpu(tmp_path: Path) -> None:
    """`python -m neuronc.demo --check` run outside the checkout, with the kernel ISA forced both ways (the
    two trainings side by side, one core each): the shipped files are what training gives on either."""
    pytest.importorskip("torch")
    procs = {}
    for kind, forced in CPU_KINDS.items():
        (tmp_path / kind).mkdir()
        procs[kind] = subprocess.Popen(
            [sys.executable, "-m", "neuronc.demo", "--check"],
            cwd=tmp_path / kind,
            env={**os.environ, **forced},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for kind, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=1800)
        assert proc.returncode == 0, (kind, stdout[-3000:] + stderr[-3000:])
        assert f"{MODEL}: up to date" in stderr, kind
