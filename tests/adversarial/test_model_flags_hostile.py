"""The model flags of `compile` and `profiles new` (issue 41, items 18 and 20): hostile values are one
error line naming the flag, never a traceback or a temporary file the user never saw.

Run as real processes (``python -m neuronc``), as a user or a CI job runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _bundles import neuronc, text

FLAGS = ("--backend", "inductor", "--target", "cpu", "--max-length", "64")


def _model(tmp_path: Path) -> Path:
    """A directory with a config.json and no weights: the profile loads, the build fails at the checkpoint."""
    model = tmp_path / "my-model"
    model.mkdir()
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "hidden_size": 16,
        "max_position_embeddings": 128,
    }
    (model / "config.json").write_text(json.dumps(config))
    return model


# -- item 18: bucket flags with superscript digits, huge numbers ----------------------------------


@pytest.mark.parametrize(
    "value",
    ["32,²", "³2", "32,٣٤", "1" * 5000, "32," + "9" * 4299, "0x20", "32,-64", "32,,", " ,", "32;64"],
    ids=[
        "superscript",
        "superscript-first",
        "arabic-indic",
        "5000-digits",
        "4300-digits",
        "hex",
        "negative",
        "empty-item",
        "blank",
        "semicolon",
    ],
)
@pytest.mark.parametrize("flag", ["--context-buckets", "--token-buckets"])
@pytest.mark.parametrize("command", ["compile", "new"])
def test_bucket_flags_refuse_what_is_not_a_list_of_integers(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    model = _model(tmp_path)
    args = ["--model", model, *FLAGS, flag, value]
    full = ["compile", *args, "--dry-run"] if command == "compile" else ["profiles", "new", tmp_path / "p.yaml", *args]
    proc = neuronc(*full, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    stderr = proc.stderr.decode()
    assert "Traceback" not in stderr
    assert stderr.startswith(f"error: {flag} "), stderr
    assert len(stderr.splitlines()[0]) < 300, "a 5000-digit number is shown shortened"
    assert not (tmp_path / "p.yaml").exists()


def test_bucket_flags_still_take_lists_and_auto(tmp_path: Path) -> None:
    model = _model(tmp_path)
    proc = neuronc(
        "profiles", "new", tmp_path / "p.yaml", "--model", model, *FLAGS,
        "--context-buckets", " 16, 32 ", "--token-buckets", "auto", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, text(proc)
    written = (tmp_path / "p.yaml").read_text()
    assert "context_buckets: [16, 32]" in written and 'token_buckets: "auto"' in written


# -- item 20: a flags-only compile's failures name the flag, not a temporary profile -------------


def test_a_flags_only_compile_failure_names_the_flag_not_a_temporary_file(tmp_path: Path) -> None:
    model = _model(tmp_path)
    proc = neuronc("compile", "--model", "./my-model", *FLAGS, "--json", cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    everything = text(proc)
    assert "neuronc-flags-" not in everything, everything
    assert "Traceback" not in everything
    report = json.loads(proc.stdout)
    [build] = report["builds"]
    assert build["profile"] == "--model ./my-model", build
    assert str(model.resolve()) in build["error"]["message"]  # what was looked at: the directory, resolved
    proc = neuronc("compile", "--model", "./my-model", *FLAGS, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert "neuronc-flags-" not in text(proc), text(proc)
    assert "error: --model ./my-model: " in proc.stderr.decode()
