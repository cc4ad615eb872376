"""The persistent lookup index: incremental, never stale, rebuilt when corrupt, safe under concurrent runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronc.hubcache import (
    IndexState,
    Query,
    SnapshotSource,
    arch_key,
    compare_arch,
    entry_hash,
    lookup_model,
    normalize_config,
    parse_entry,
    parse_registry_path,
    serialize_entry,
)
from neuronc.hubcache.index import MAGIC, IndexFile

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
SNAPSHOT = FIXTURE / "snapshot"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
CC = "neuronxcc-2.21.33363.0+82129205"
DIGEST = "530ac5d5535fbd44ea3568b945966a64d88038666555b552362cd81756497e44"
LLAMA = "example-org/tiny-llama"
LLAMA_DIR = FIXTURE / "models" / LLAMA
OLD = time.time() - 3600  # older than the two seconds in which an mtime is not trusted yet
_AGED = [OLD]


def _age(root: Path) -> None:
    """Make what changed since the last call look written long ago (mtimes are trusted from then on).

    Each call uses a later stamp than the one before, as real writes would: a folder that gained a
    file must not get its old mtime back.
    """
    _AGED.append(_AGED[-1] + 1)
    stamp = _AGED[-1]
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            if os.lstat(path).st_mtime > OLD + 1000:
                os.utime(path, (stamp, stamp), follow_symlinks=False)
        if os.stat(dirpath).st_mtime > OLD + 1000:
            os.utime(dirpath, (stamp, stamp))


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    root = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, root, symlinks=True)
    _age(root)
    return root


def _lookup(root: Path, model: str = str(LLAMA_DIR)) -> tuple[Any, IndexState, int]:
    result = lookup_model(model, SnapshotSource(root))
    index = result.registry.index
    return result, index.state, index.parsed


def _hashes(result: Any) -> list[str]:
    return sorted(m.entry.hash for m in result.matches)


def _new_entry(root: Path, batch_size: int) -> str:
    """Write a 0.4.5 entry for tiny-llama with another batch size; return its hash."""
    folder = root / CC / "0_REGISTRY" / "0.4.5" / DIGEST
    doc = json.loads((folder / "f9f9f783a10b20b71829.json").read_text())
    neuron = doc.pop("neuron") | {"batch_size": batch_size, "max_batch_size": batch_size}
    model_id, task = doc.pop("_model_id"), doc.pop("_task")
    doc.pop("_entry_class")
    text = serialize_entry(doc, neuron, model_id=model_id, task=task)
    (folder / f"{entry_hash(text)}.json").write_text(text)
    return entry_hash(text)


def test_built_then_warm_with_the_same_answer(snap: Path) -> None:
    first, state, parsed = _lookup(snap)
    assert state == IndexState.BUILT and parsed == len(EXPECTED["entries"]) + 1 + 36  # + diffusers + aliases
    again, state, parsed = _lookup(snap)
    assert (state, parsed) == (IndexState.WARM, 0)
    assert _hashes(again) == _hashes(first)
    assert [m.to_json() for m in again.matches] == [m.to_json() for m in first.matches]


def test_new_entries_are_found_and_only_they_are_parsed(snap: Path) -> None:
    before, _, _ = _lookup(snap)
    digest = _new_entry(snap, 64)
    _age(snap)
    after, state, parsed = _lookup(snap)
    assert (state, parsed) == (IndexState.UPDATED, 1)
    assert _hashes(after) == sorted([*_hashes(before), digest])
    assert _lookup(snap)[1] == IndexState.WARM


def test_removed_entries_and_folders_disappear(snap: Path) -> None:
    before, _, _ = _lookup(snap)
    registry = snap / CC / "0_REGISTRY" / "0.4.5"
    (registry / DIGEST / "f9f9f783a10b20b71829.json").unlink()
    after, state, _ = _lookup(snap)
    assert state == IndexState.UPDATED
    # Its alias is left: the same entry, found through the alias alone now.
    (alias,) = [m.entry for m in after.matches if m.entry.hash == "f9f9f783a10b20b71829"]
    assert alias.layout == "alias" and alias.path == f"{CC}/0_REGISTRY/0.4.5/llama/{LLAMA}/f9f9f783a10b20b71829.json"
    (registry / "llama" / LLAMA / "f9f9f783a10b20b71829.json").unlink()
    after, state, _ = _lookup(snap)
    assert "f9f9f783a10b20b71829" not in _hashes(after) and len(_hashes(after)) == len(_hashes(before)) - 1
    shutil.rmtree(snap / "neuronxcc-2.21.18209.0+043b1bf7")
    gone, _, _ = _lookup(snap)
    assert {m.entry.optimum_version for m in gone.matches} == {"0.4.5", "0.3.0", "0.0.25"}


def test_a_file_edited_in_place_is_read_again(snap: Path) -> None:
    path = snap / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json"
    _lookup(snap)
    path.write_bytes(path.read_bytes() + b"\n")  # still valid, no longer matches its hash
    os.utime(path, (OLD + 10, OLD + 10))
    result, state, parsed = _lookup(snap)
    assert (state, parsed) == (IndexState.UPDATED, 1)
    entry = next(m.entry for m in result.matches if m.entry.hash == "f9f9f783a10b20b71829")
    assert entry.hash_verified is False


def test_an_mtime_too_recent_to_trust_is_checked_again(snap: Path) -> None:
    """Two writes within one tick of the file system's clock keep the mtime: check again later."""
    path = snap / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json"
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"batch_size": 4', b'"batch_size": 5'))
    stamp = path.stat().st_mtime_ns
    _, state, _ = _lookup(snap)
    assert state == IndexState.BUILT
    path.write_bytes(data.replace(b'"batch_size": 4', b'"batch_size": 6'))  # same size
    os.utime(path, ns=(stamp, stamp))  # and the same mtime, as a second write in the same tick has
    result, state, parsed = _lookup(snap)
    assert state == IndexState.UPDATED and parsed >= 1
    assert 6 in {m.entry.batch_size for m in result.matches if m.entry.hash == "f9f9f783a10b20b71829"}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "empty", "other-version"])
def test_a_damaged_index_is_rebuilt(snap: Path, damage: str) -> None:
    first, _, _ = _lookup(snap)
    (index_path,) = (Path(os.environ["XDG_CACHE_HOME"]) / "neuronc" / "hf-neuron-cache" / "index").glob("*.bin")
    blob = index_path.read_bytes()
    if damage == "truncated":
        index_path.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbage":
        index_path.write_bytes(os.urandom(len(blob)))
    elif damage == "flipped":
        index_path.write_bytes(blob[:-100] + bytes([blob[-100] ^ 1]) + blob[-99:])
    elif damage == "empty":
        index_path.write_bytes(b"")
    else:  # a valid file of another index format: the stamp differs
        other = IndexFile("snapshot", os.path.realpath(snap))
        other._stamp = (999, *other._stamp[1:])
        assert other.save(("not", "this", "shape"))
    again, state, parsed = _lookup(snap)
    assert state == IndexState.REBUILT and parsed > 0
    assert _hashes(again) == _hashes(first)
    assert index_path.read_bytes().startswith(MAGIC)
    assert _lookup(snap)[1] == IndexState.WARM


def test_an_index_that_cannot_be_written_is_not_an_error(snap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from filelock import FileLock

    first, _, _ = _lookup(snap)
    (index_path,) = (Path(os.environ["XDG_CACHE_HOME"]) / "neuronc" / "hf-neuron-cache" / "index").glob("*.bin")
    index_path.unlink()
    with FileLock(f"{index_path}.lock"):  # another process is writing it
        result = lookup_model(str(LLAMA_DIR), SnapshotSource(snap))
    assert result.registry.index.saved is False and _hashes(result) == _hashes(first)
    monkeypatch.setenv("XDG_CACHE_HOME", str(snap / CC / "0_REGISTRY" / "0.4.5" / DIGEST / "f9f9f783a10b20b71829.json"))
    result = lookup_model(str(LLAMA_DIR), SnapshotSource(snap))  # the cache "directory" is a file
    assert result.registry.index.saved is False and _hashes(result) == _hashes(first)


def test_concurrent_lookups_and_writers_agree(snap: Path, tmp_path: Path) -> None:
    """Lookups racing each other and a writer: every one answers, the index ends complete."""
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "neuronc", "cache-lookup", str(LLAMA_DIR), "--snapshot", str(snap), "--json"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    added = [_new_entry(snap, 100 + i) for i in range(5)]
    procs += [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        json.loads(out)
    time.sleep(2.1)  # let the last writes' mtimes become trustworthy
    final, _, _ = _lookup(snap)
    assert set(added) <= set(_hashes(final))
    fresh = lookup_model(str(LLAMA_DIR), SnapshotSource(snap, index_dir=tmp_path / "fresh-index"))
    assert fresh.registry.index.state == IndexState.BUILT and _hashes(fresh) == _hashes(final)
    assert _lookup(snap)[1] == IndexState.WARM


def test_the_index_is_per_snapshot(snap: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(SNAPSHOT / CC, other / CC)
    _lookup(snap)
    result, state, _ = _lookup(other)
    assert state == IndexState.BUILT
    assert {m.entry.optimum_version for m in result.matches} == {"0.4.5"}


# -- the fingerprint never separates what compare_arch joins ----------------------------------------


def _fixture_entries() -> list[Any]:
    entries = []
    for expected in EXPECTED["entries"][::7]:
        path = expected["paths"][0]
        location = parse_registry_path(path)
        assert location is not None
        entries.append(parse_entry(location, (SNAPSHOT / path).read_bytes()))
    return entries


ENTRIES = _fixture_entries()
MODEL_CONFIGS = {
    p.parent.relative_to(FIXTURE / "models").as_posix(): json.loads(p.read_text())
    for p in (FIXTURE / "models").glob("*/*/config.json")
}


def _mutate(config: dict[str, Any], how: list[str]) -> dict[str, Any]:
    out = dict(config)
    for step in how:
        if step == "floats":
            out = {k: float(v) if type(v) is int else v for k, v in out.items()}
        elif step == "head_dim_null" and "head_dim" in out:
            out["head_dim"] = None
        elif step == "drop_kv" and out.get("num_key_value_heads") == out.get("num_attention_heads"):
            out.pop("num_key_value_heads", None)
        elif step == "rope_type" and isinstance(out.get("rope_scaling"), dict):
            rope = dict(out["rope_scaling"])
            rope["type"] = rope.pop("rope_type", rope.get("type"))
            out["rope_scaling"] = rope
        elif step == "layer_types" and "layer_types" not in out:
            layers = out.get("num_hidden_layers")
            if isinstance(layers, int):
                out["layer_types"] = ["full_attention"] * layers
        elif step == "defaults":
            out.setdefault("use_cache", True)
            out.setdefault("attention_dropout", 0.0)
        elif step == "dtype":
            out["dtype"] = "float16"
        elif step == "bump":
            out["num_hidden_layers"] = int(out.get("num_hidden_layers", 1)) + 1
    return out


STEPS = st.lists(
    st.sampled_from(["floats", "head_dim_null", "drop_kv", "rope_type", "layer_types", "defaults", "dtype", "bump"]),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(entry_index=st.integers(0, len(ENTRIES) - 1), model=st.sampled_from(sorted(MODEL_CONFIGS)), how=STEPS)
def test_configs_compare_arch_finds_equal_share_an_arch_key(entry_index: int, model: str, how: list[str]) -> None:
    from dataclasses import replace

    entry = ENTRIES[entry_index]
    arch = normalize_config(MODEL_CONFIGS[model], "text-generation")
    assert arch is not None
    mutated = replace(arch, config=_mutate(arch.config, how))
    if compare_arch(entry, mutated).same:
        assert arch_key(entry.model_type, entry.config) == arch_key(mutated.model_type, mutated.config)


def test_every_fixture_model_finds_the_same_entries_with_and_without_the_key() -> None:
    """The index's candidate search (arch_key) returns what comparing every entry returns."""
    registry = SnapshotSource(SNAPSHOT).load(Query.everything())
    entries = registry.entries
    for model, config in MODEL_CONFIGS.items():
        arch = normalize_config(config, "text-generation")
        assert arch is not None
        brute = sorted(e.hash for e in entries if compare_arch(e, arch).same)
        found = lookup_model(model, SnapshotSource(SNAPSHOT), config=config)
        assert sorted(m.entry.hash for m in found.matches if m.relation != "model-config-differs") == brute, model
