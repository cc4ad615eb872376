"""Registry layouts, entry parsing, broken entries and snapshots (tests/fixtures/hf-neuron-cache)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neuronc.errors import InvalidInputError
from neuronc.hubcache import Query, SnapshotSource, entry_hash, parse_entry, parse_registry_path
from neuronc.hubcache.paths import normalize_dtype, normalize_target, version_matches
from neuronc.hubcache.registry import select_paths

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
SNAPSHOT = FIXTURE / "snapshot"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
CC = "neuronxcc-2.21.33363.0+82129205"
DIGEST = "530ac5d5535fbd44ea3568b945966a64d88038666555b552362cd81756497e44"


@pytest.mark.parametrize(
    ("path", "layout", "fields"),
    [
        (f"{CC}/0_REGISTRY/0.4.5/{DIGEST}/f9f9f783a10b20b71829.json", "arch-digest", {"digest": DIGEST}),
        (
            f"{CC}/0_REGISTRY/0.4.5/llama/example-org/tiny-llama/f9f9f783a10b20b71829.json",
            "alias",
            {"model_type": "llama", "model_id": "example-org/tiny-llama"},
        ),
        (
            "neuronxcc-2.21.18209.0+043b1bf7/0_REGISTRY/0.4.4/qwen3/example-org/tiny-qwen3/0123456789abcdef0123.json",
            "model-type",
            {"model_type": "qwen3", "model_id": "example-org/tiny-qwen3", "optimum_version": "0.4.4"},
        ),
        (
            "neuronxcc-2.15.128.0+56dc5a86/0_REGISTRY/0.0.25/inference/llama/example-org/tiny-llama/abc.json",
            "model-type-mode",
            {"model_type": "llama", "compiler_version": "2.15.128.0+56dc5a86"},
        ),
        ("neuronxcc-2.12.68.0+4480452af/0_REGISTRY/0.0.18/llama/gpt2/abc.json", "model-type", {"model_id": "gpt2"}),
    ],
)
def test_every_layout_parses(path: str, layout: str, fields: dict[str, str]) -> None:
    loc = parse_registry_path(path)
    assert loc is not None and loc.layout == layout
    for name, value in fields.items():
        assert getattr(loc, name) == value


@pytest.mark.parametrize(
    "path",
    [
        "README.md",
        "inference-cache-config/llama3.json",
        f"{CC}/MODULE_0633bed8dd5b2f659fd4+d7cde3b5/compile_flags.json",
        f"{CC}/0_REGISTRY/0.4.5/{DIGEST}/notes.txt",
        f"{CC}/0_REGISTRY/0.4.5/llama/x.json",
        f"{CC}/0_REGISTRY/0.4.5/../../../etc/passwd.json",
        f"{CC}/0_REGISTRY/0.4.5/llama/./org/x.json",
        "registry/mistralai/Mistral-7B/b12f53f65aebf02fdfa9.json",
        f"{CC}/0_REGISTRY/0.4.5/{DIGEST}/.json",
    ],
)
def test_other_files_are_not_registry_entries(path: str) -> None:
    assert parse_registry_path(path) is None


def test_snapshot_reads_every_layout_and_version() -> None:
    registry = SnapshotSource(SNAPSHOT).load(Query.everything())
    assert registry.problems == []
    assert len(registry.entries) == len(EXPECTED["entries"]) + 1  # + the diffusers entry
    assert registry.registries == [
        "neuronxcc-2.15.128.0+56dc5a86/0_REGISTRY/0.0.25",
        "neuronxcc-2.19.8089.0+8ab9f450/0_REGISTRY/0.3.0",
        "neuronxcc-2.21.18209.0+043b1bf7/0_REGISTRY/0.4.4",
        "neuronxcc-2.21.33363.0+82129205/0_REGISTRY/0.4.5",
    ]
    layouts = Counter(e.layout for e in registry.entries)
    assert set(layouts) == {"arch-digest", "model-type", "model-type-mode"}
    assert all(e.hash_verified for e in registry.entries)


def test_entries_carry_the_generated_fields() -> None:
    entries = {e.hash: e for e in SnapshotSource(SNAPSHOT).load(Query.everything()).entries}
    for expected in EXPECTED["entries"]:
        entry = entries[expected["hash"]]
        assert entry.path == expected["paths"][0]
        assert entry.aliases == tuple(expected["paths"][1:])
        assert entry.model_id == expected["model_id"]
        assert entry.task == expected["task"]
        assert (entry.batch_size, entry.sequence_length, entry.tp_degree) == (
            expected["batch_size"],
            expected["sequence_length"],
            expected["tp_degree"],
        )
        assert entry.dtype == expected["dtype"]
        want_target = normalize_target(expected["instance"]) if expected["instance"] else None
        assert entry.target == want_target
        assert entry.optimum_version == expected["optimum_neuron_version"]
        assert entry.compiler_version == expected["compiler_version"]
        assert entry.checkpoint_revision == expected["checkpoint_revision"]


def test_aliases_are_the_same_entry_and_can_be_missing() -> None:
    registry = SnapshotSource(SNAPSHOT).load(Query.everything())
    with_alias = [e for e in registry.entries if e.aliases]
    without = [e for e in registry.entries if e.layout == "arch-digest" and not e.aliases]
    # hub_neuronx_cache makes an alias only for the first export of a model on each machine.
    assert with_alias and without
    for entry in with_alias:
        assert (SNAPSHOT / entry.aliases[0]).read_bytes() == (SNAPSHOT / entry.path).read_bytes()


def test_diffusers_entry_reports_the_unet() -> None:
    registry = SnapshotSource(SNAPSHOT).load(Query.everything())
    (multi,) = [e for e in registry.entries if e.entry_class == "MultiModelCacheEntry"]
    assert multi.model_type == "stable-diffusion" and multi.task is None
    assert (multi.batch_size, multi.sequence_length, multi.dtype) == (1, 77, "bfloat16")


def _copy_registry(tmp_path: Path, *registries: str) -> Path:
    root = tmp_path / "snap"
    for registry in registries:
        shutil.copytree(SNAPSHOT / registry, root / registry)
    return root


def _write(root: Path, rel: str, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_broken_entries_are_skipped_and_counted(tmp_path: Path) -> None:
    root = _copy_registry(tmp_path, f"{CC}/0_REGISTRY/0.4.5/{DIGEST}")
    good = json.loads((SNAPSHOT / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json").read_text())
    base = f"{CC}/0_REGISTRY/0.4.5/{DIGEST}"

    def variant(edit: dict[str, Any], drop: tuple[str, ...] = ()) -> bytes:
        doc = json.loads(json.dumps(good))
        for key in drop:
            del doc["neuron"][key]
        doc["neuron"].update(edit)
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    broken = {
        "aaaaaaaaaaaaaaaaaaa1": b"{not json",
        "aaaaaaaaaaaaaaaaaaa2": b"[1, 2, 3]",
        "aaaaaaaaaaaaaaaaaaa3": variant({"batch_size": "4"}),
        "aaaaaaaaaaaaaaaaaaa4": variant({"tp_degree": 0}),
        "aaaaaaaaaaaaaaaaaaa5": variant({"torch_dtype": 16}),
        "aaaaaaaaaaaaaaaaaaa6": variant({}, drop=("batch_size",)),
        "aaaaaaaaaaaaaaaaaaa7": json.dumps({k: v for k, v in good.items() if k != "neuron"}).encode(),
        "aaaaaaaaaaaaaaaaaaa8": b'{"a": "\x80\x81"}',
        "aaaaaaaaaaaaaaaaaaa9": json.dumps({**good, "neuron": [1]}).encode(),
    }
    for name, data in broken.items():
        _write(root, f"{base}/{name}.json", data)
    registry = SnapshotSource(root).load(Query.everything())
    reasons = {Path(p.path).stem: p.reason for p in registry.problems}
    assert set(reasons) == set(broken)
    assert reasons["aaaaaaaaaaaaaaaaaaa1"].startswith("not valid JSON: ")
    assert reasons["aaaaaaaaaaaaaaaaaaa2"] == "entry: expected a JSON object, got a list"
    assert reasons["aaaaaaaaaaaaaaaaaaa3"] == "neuron: field 'batch_size': must be an integer, got \"4\""
    assert reasons["aaaaaaaaaaaaaaaaaaa4"] == "neuron: field 'tp_degree' must be between 1 and 2147483647, got 0"
    assert reasons["aaaaaaaaaaaaaaaaaaa5"] == "neuron: field 'torch_dtype': must be a string, got 16"
    assert reasons["aaaaaaaaaaaaaaaaaaa6"] == "neuron: field 'batch_size' is missing"
    assert reasons["aaaaaaaaaaaaaaaaaaa7"] == "entry: field 'neuron' is missing"
    assert reasons["aaaaaaaaaaaaaaaaaaa8"] == "not UTF-8 (byte 7)"
    assert reasons["aaaaaaaaaaaaaaaaaaa9"] == "entry: field 'neuron': must be an object, got a list"
    assert len(registry.entries) == len(list((SNAPSHOT / base).glob("*.json")))


def test_edited_entry_is_read_but_not_verified(tmp_path: Path) -> None:
    root = _copy_registry(tmp_path, f"{CC}/0_REGISTRY/0.4.5/{DIGEST}")
    path = root / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json"
    path.write_bytes(path.read_bytes() + b"\n")
    entries = {e.hash: e for e in SnapshotSource(root).load(Query.everything()).entries}
    assert entries["f9f9f783a10b20b71829"].hash_verified is False
    assert entry_hash(path.read_bytes()[:-1]) == "f9f9f783a10b20b71829"


def test_local_compile_cache_with_symlinked_aliases(tmp_path: Path) -> None:
    # A libneuronxla compile cache has the same layout; its aliases are absolute symlinks.
    root = _copy_registry(tmp_path, f"{CC}/0_REGISTRY/0.4.5/{DIGEST}")
    primary = root / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json"
    alias = root / CC / "0_REGISTRY" / "0.4.5" / "llama" / "example-org" / "tiny-llama" / "f9f9f783a10b20b71829.json"
    alias.parent.mkdir(parents=True)
    alias.symlink_to(primary.resolve())
    (root / CC / "MODULE_1+d41d8cd9").mkdir()
    entries = {e.hash: e for e in SnapshotSource(root).load(Query.everything()).entries}
    assert entries["f9f9f783a10b20b71829"].aliases == (alias.relative_to(root).as_posix(),)


def test_alias_only_entry_is_read(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    data = (SNAPSHOT / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json").read_bytes()
    _write(root, f"{CC}/0_REGISTRY/0.4.5/llama/example-org/tiny-llama/f9f9f783a10b20b71829.json", data)
    (entry,) = SnapshotSource(root).load(Query.everything()).entries
    assert entry.layout == "alias" and entry.digest_folder is None


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_bad_snapshot_paths_are_invalid_input(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "file":
        path.write_text("x")
    with pytest.raises(InvalidInputError):
        SnapshotSource(path)


def test_empty_snapshot_is_empty_with_a_note(tmp_path: Path) -> None:
    registry = SnapshotSource(tmp_path).load(Query.everything())
    assert registry.entries == [] and registry.problems == []
    assert "no neuronxcc-*/0_REGISTRY folder" in registry.notes[0]


def test_query_reads_only_what_can_matter() -> None:
    source = SnapshotSource(SNAPSHOT)
    locations = source.locations()
    qwen = select_paths(locations, Query(model_ids=frozenset({"example-org/tiny-qwen3"})))
    types = Counter(loc.model_type for loc in qwen if loc.model_type)
    assert set(types) == {"qwen3"}
    digests = {loc.digest for loc in qwen if loc.digest}
    all_digests = {loc.digest for loc in locations if loc.digest}
    assert len(digests) < len(all_digests)
    # Folders that no alias attributes to a model type are always read (they could be anything).
    llama_only = select_paths(locations, Query(model_types=frozenset({"llama"})))
    assert {loc.layout for loc in llama_only} == {"arch-digest", "alias", "model-type", "model-type-mode"}
    assert len(select_paths(locations, Query.everything())) == len(locations)


def test_normalisation_helpers() -> None:
    assert [normalize_target(t) for t in ("inf2", "trn1n", "TRN1", "trn2")] == ["trn1", "trn1", "trn1", "trn2"]
    assert [normalize_dtype(d) for d in ("bf16", "torch.float16", "fp32", "float32")] == [
        "bfloat16",
        "float16",
        "float32",
        "float32",
    ]
    assert version_matches("2.21.33363.0+82129205", "2.21")
    assert version_matches("2.21.33363.0+82129205", "2.21.33363.0")
    assert not version_matches("2.21.33363.0+82129205", "2.2")
    assert not version_matches("0.4.5", "0.4.4")
    assert version_matches("0.0.25.dev0", "0.0.25")


def test_parse_entry_legacy_format_takes_task_and_id_from_elsewhere() -> None:
    loc = parse_registry_path("neuronxcc-2.15.128.0+56dc5a86/0_REGISTRY/0.0.25/inference/llama/org/name/abc.json")
    assert loc is not None
    doc = {
        "model_type": "llama",
        "neuron": {
            "task": "text-generation",
            "batch_size": 2,
            "num_cores": 8,
            "auto_cast_type": "fp16",
            "sequence_length": 2048,
        },
    }
    entry = parse_entry(loc, json.dumps(doc).encode())
    assert (entry.model_id, entry.task, entry.tp_degree, entry.dtype, entry.target) == (
        "org/name",
        "text-generation",
        8,
        "float16",
        None,
    )
