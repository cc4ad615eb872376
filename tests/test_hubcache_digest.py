"""optimum-neuron 0.4.5's arch digest and entry hash, reproduced exactly (no transformers needed).

Ground truth: tests/fixtures/hf-neuron-cache/optimum-0.4.5/ (one entry written by optimum-neuron 0.4.5
itself, with its inputs and expected values) and tests/fixtures/hf-neuron-cache/ (hundreds of entries
made by its cache-entry classes, with the digest its lookup computes for each model in expected.json).
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from neuronc.hfcompat import transformers_is_sdk_series, transformers_major
from neuronc.hubcache import arch_digest, entry_hash, normalize_config, parse_registry_path, serialize_entry
from neuronc.hubcache.configs import (
    DEFAULTS_FILE,
    defaults_table,
    emulate_diff_dict,
    emulated_model_types,
    strip_whitelist,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
VECTOR = FIXTURE / "optimum-0.4.5"
# Where the vector was first delivered (outside the repository; only checked when present).
SHARED = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "hf-neuron-cache"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")
# optimum-neuron 0.4.5's digest is transformers 4.57's to_diff_dict(); only 4.57.x can be the reference.
needs_sdk_transformers = pytest.mark.skipif(
    not transformers_is_sdk_series(), reason="the reference is transformers 4.57.x (optimum-neuron 0.4.5's pin)"
)


def _model_config(model_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE / "models" / model_id / "config.json").read_text(encoding="utf-8"))
    return data


# -- the test vector written by optimum-neuron 0.4.5 ----------------------------------------------


@pytest.mark.skipif(not SHARED.is_dir(), reason="no copy of the vector outside the repository to compare with")
def test_vector_is_the_one_delivered() -> None:
    for name in ("arch_digest_input.json", "expected.json", "f9f9f783a10b20b71829.json", "llama_config.json"):
        assert (VECTOR / name).read_bytes() == (SHARED / name).read_bytes(), name


def test_shared_vector_digest_from_the_checkpoint_config() -> None:
    expected = json.loads((VECTOR / "expected.json").read_text(encoding="utf-8"))
    raw = json.loads((VECTOR / "llama_config.json").read_text(encoding="utf-8"))
    arch = normalize_config(raw, "text-generation")
    assert arch is not None and arch.method == "emulated"
    digest_input = json.loads((VECTOR / "arch_digest_input.json").read_text(encoding="utf-8"))
    assert arch.config == digest_input["config"]
    assert arch.digest == expected["arch_digest"] == expected["arch_digest_lookup_side"]
    assert arch.export_digest("bfloat16") == expected["arch_digest"]


def test_shared_vector_digest_input_bytes() -> None:
    raw = (VECTOR / "arch_digest_input.json").read_bytes()
    blob = json.loads(raw)
    assert json.dumps(blob, sort_keys=True).encode() == raw
    expected = json.loads((VECTOR / "expected.json").read_text(encoding="utf-8"))
    assert arch_digest(blob["config"], blob["task"]) == expected["sha256_of_arch_digest_input_file"]


def test_shared_vector_entry_file_byte_for_byte() -> None:
    expected = json.loads((VECTOR / "expected.json").read_text(encoding="utf-8"))
    data = (VECTOR / expected["entry_file"]).read_bytes()
    doc = json.loads(data)
    neuron = doc.pop("neuron")
    model_id, task = doc.pop("_model_id"), doc.pop("_task")
    doc.pop("_entry_class")
    raw = json.loads((VECTOR / "llama_config.json").read_text(encoding="utf-8"))
    arch = normalize_config(raw, task)
    assert arch is not None
    text = serialize_entry(arch.export_config(neuron["torch_dtype"]), neuron, model_id=model_id, task=task)
    assert text.encode() == data
    assert entry_hash(text) == expected["entry_hash_sha512_first20"] == Path(expected["entry_file"]).stem
    registry = "neuronxcc-2.21.33363.0+82129205/0_REGISTRY/0.4.5"
    assert f"{registry}/{arch.digest}/{entry_hash(text)}.json" == expected["registry_path"]
    assert f"{registry}/{arch.model_type}/{model_id}/{entry_hash(text)}.json" == expected["alias_path"]


def test_shared_vector_is_in_the_fixture_unchanged() -> None:
    expected = json.loads((VECTOR / "expected.json").read_text(encoding="utf-8"))
    ours = FIXTURE / "snapshot" / expected["registry_path"]
    assert ours.read_bytes() == (VECTOR / expected["entry_file"]).read_bytes()
    assert (FIXTURE / "snapshot" / expected["alias_path"]).read_bytes() == ours.read_bytes()


# -- every fixture model and entry (made by optimum-neuron 0.4.5's classes) -----------------------


@pytest.mark.parametrize("model_id", sorted(EXPECTED["models"]))
@pytest.mark.parametrize("task", ["text-generation", "feature-extraction"])
def test_lookup_digest_of_every_fixture_model(model_id: str, task: str) -> None:
    arch = normalize_config(_model_config(model_id), task)
    assert arch is not None and arch.method == "emulated"
    assert arch.digest == EXPECTED["models"][model_id]["lookup_digest"][task]


def _fixture_045_entries() -> list[dict[str, Any]]:
    return [e for e in EXPECTED["entries"] if e["layout"] == "0.4.5"]


def test_every_045_entry_folder_hash_and_bytes() -> None:
    entries = _fixture_045_entries()
    assert len(entries) > 150
    for expected in entries:
        primary = FIXTURE / "snapshot" / expected["paths"][0]
        data = primary.read_bytes()
        loc = parse_registry_path(expected["paths"][0])
        assert loc is not None and loc.layout == "arch-digest"
        assert entry_hash(data) == loc.stem == expected["hash"]
        doc = json.loads(data)
        neuron, model_id, task = doc.pop("neuron"), doc.pop("_model_id"), doc.pop("_task")
        doc.pop("_entry_class")
        assert arch_digest(doc, task) == loc.digest
        assert serialize_entry(doc, neuron, model_id=model_id, task=task).encode() == data


def test_export_side_digest_predicts_every_045_folder() -> None:
    # What optimum-neuron's export writes: checkpoint config, dtype from the neuron config, head_dim filled.
    for expected in _fixture_045_entries():
        arch = normalize_config(_model_config(expected["model_id"]), expected["task"])
        assert arch is not None
        assert arch.export_digest(expected["dtype"]) == expected["export_digest"], expected["paths"][0]
        visible = arch.digest == expected["export_digest"]
        assert visible == expected["visible_to_optimum_neuron_lookup"]


def test_the_digest_pitfalls_are_in_the_fixture() -> None:
    hidden = {e["model_id"] for e in _fixture_045_entries() if not e["visible_to_optimum_neuron_lookup"]}
    # dtype in the digest: float16 checkpoint exported bf16, no-dtype checkpoint, phi3 fp16 exports;
    # head_dim: null: Mixtral.
    assert hidden == {
        "example-org/tiny-llama-fp16",
        "other-org/tiny-llama-nodtype",
        "example-org/tiny-phi3",
        "example-org/tiny-mixtral",
    }


def test_multi_model_digest_collapse_of_045() -> None:
    # 0.4.5 puts every diffusers pipeline in one folder (reference §4.6.3).
    assert EXPECTED["multi_model_entry"]["digest"] == (
        "b191d607e94819566800de30939d6c26cefbebc52bef9ff571aa1855a9ca0a4e"
    )


# -- the emulation of to_diff_dict against transformers itself -------------------------------------


def _variants(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Config edits that exercise what each config class derives in __init__."""
    out = [raw]
    edits: list[dict[str, Any]] = [
        {"torch_dtype": None, "dtype": "float16"},
        {"torch_dtype": "float32"},
        {"head_dim": None},
        {"num_key_value_heads": None},
        {"rope_scaling": {"type": "linear", "factor": 2.0}},
        {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1},
        {"layer_types": None},
        {"some_custom_key": [1, 2, 3], "max_length": 4096},
        {"id2label": {"0": "A", "1": "B", "2": "C"}},
        {"tie_word_embeddings": True},
        {"pad_token_id": 7, "architectures": None},
    ]
    for edit in edits:
        variant = copy.deepcopy(raw)
        for key, value in edit.items():
            if value is None:
                variant.pop(key, None)
            else:
                variant[key] = value
        out.append(variant)
    drop = copy.deepcopy(raw)
    for key in ("head_dim", "num_key_value_heads", "rope_theta", "rms_norm_eps"):
        drop.pop(key, None)
    out.append(drop)
    # As transformers 5 writes config.json: rope_parameters, no rope_theta / rope_scaling.
    v5 = copy.deepcopy(raw)
    v5["rope_parameters"] = {"rope_theta": v5.pop("rope_theta", 10000.0), "rope_type": "default"}
    v5.pop("rope_scaling", None)
    v5["transformers_version"] = "5.23.0"
    out.append(v5)
    return out


@needs_sdk_transformers
@pytest.mark.parametrize("model_id", sorted(EXPECTED["models"]))
def test_emulation_equals_transformers_to_diff_dict(model_id: str) -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for variant in _variants(_model_config(model_id)):
        config_class = CONFIG_MAPPING[variant["model_type"]]
        try:
            expected = config_class.from_dict(copy.deepcopy(variant)).to_diff_dict()
        except (ValueError, KeyError):  # a variant the class itself rejects
            continue
        assert strip_whitelist(emulate_diff_dict(variant)) == strip_whitelist(expected), variant
        ours = normalize_config(variant, "text-generation", method="emulated")
        theirs = normalize_config(variant, "text-generation", method="transformers")
        assert ours is not None and theirs is not None
        assert ours.digest == theirs.digest


@needs_transformers
def test_checked_in_defaults_match_installed_transformers() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_hubcache_config_defaults import compute_tables, render
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    table = defaults_table()
    version, base, classes = compute_tables()
    if version.rsplit(".", 1)[0] != table.transformers_version.rsplit(".", 1)[0]:
        pytest.skip(f"installed transformers {version}; the table is for {table.transformers_version}")
    assert base == table.base
    assert classes == table.classes
    assert sorted(classes) == emulated_model_types()
    if version == table.transformers_version:  # the generator reproduces the data file byte for byte
        assert render(version, base, classes) == DEFAULTS_FILE.read_text(encoding="utf-8")


def test_unknown_model_type_without_transformers_gives_no_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    # None in sys.modules is how Python spells "this module cannot be imported".
    for name in ("transformers", "transformers.models.auto.configuration_auto"):
        monkeypatch.setitem(sys.modules, name, None)
    assert normalize_config({"model_type": "gpt2", "n_embd": 16}, "text-generation") is None
    assert normalize_config({"no": "model_type"}, "text-generation") is None
    llama = normalize_config(_model_config("example-org/tiny-llama"), "text-generation")
    assert llama is not None and llama.method == "emulated"


@needs_sdk_transformers
def test_unknown_model_type_with_transformers_is_exact() -> None:
    from transformers import GPT2Config

    raw = GPT2Config(n_embd=16, n_layer=2, n_head=2).to_dict()
    arch = normalize_config(raw, "text-generation")
    assert arch is not None and arch.method == "transformers" and arch.model_type == "gpt2"
    expected = strip_whitelist(GPT2Config.from_dict(raw).to_diff_dict())
    assert arch.config == expected


@pytest.mark.skipif(not HAS_TRANSFORMERS or transformers_major() == 4, reason="needs transformers 5")
def test_transformers_5_gives_no_digest_for_types_outside_the_table() -> None:
    """5.x's to_diff_dict() differs from 4.57's, so it cannot stand in for optimum-neuron 0.4.5's digest."""
    raw = {"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 2}
    assert normalize_config(raw, "text-generation") is None
    assert normalize_config(raw, "text-generation", method="transformers") is None
    llama = normalize_config(_model_config("example-org/tiny-llama"), "text-generation")
    assert llama is not None and llama.method == "emulated"
    assert llama.digest == EXPECTED["models"]["example-org/tiny-llama"]["lookup_digest"]["text-generation"]


@pytest.mark.parametrize("model_id", sorted(EXPECTED["models"]))
def test_a_config_json_written_by_transformers_5_is_hashed_as_4_57_reads_it(model_id: str) -> None:
    """Whatever transformers is installed, the emulated digest of a 5.x-style config.json is 4.57's.

    4.57 keeps rope_parameters as an unknown attribute and gives rope_theta its class default; the
    reference values come from the table generated from 4.57.6, not from the installed transformers.
    """
    CLASS_DEFAULTS = defaults_table().classes

    raw = _model_config(model_id)
    v5 = {k: v for k, v in raw.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = {"rope_theta": 123456.0, "rope_type": "default"}
    arch = normalize_config(v5, "text-generation")
    assert arch is not None and arch.method == "emulated"
    assert arch.config["rope_parameters"] == v5["rope_parameters"]
    defaults = CLASS_DEFAULTS[raw["model_type"]]["overrides"]
    if "rope_theta" in defaults:
        assert arch.config["rope_theta"] == defaults["rope_theta"]
