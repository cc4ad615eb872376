"""Hostile snapshot trees for `neuronc cache-lookup --snapshot`: every case ends cleanly, naming the file.

A registry file that cannot be used is skipped with a warning that names it and says why, listed
under "skipped" in --json, and the rest of the snapshot still answers (exit 0, documented in
docs/cache-lookup.md, "Broken entries"); what the lookup itself depends on (the --snapshot path,
the model's config.json) is exit 2 naming the file. Never a traceback, exit 1 or a hang; --json
is always one valid UTF-8 document. Each case runs the real CLI in a subprocess with a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
CC = "neuronxcc-2.21.33363.0+82129205"
DIGEST = "530ac5d5535fbd44ea3568b945966a64d88038666555b552362cd81756497e44"
REGISTRY = f"{CC}/0_REGISTRY/0.4.5"
FOLDER = f"{REGISTRY}/{DIGEST}"
LLAMA_DIR = FIXTURE / "models" / "example-org" / "tiny-llama"
GOOD = json.loads((FIXTURE / "snapshot" / FOLDER / "f9f9f783a10b20b71829.json").read_text())
NAME = "0123456789abcdef0123"  # a plausible entry hash


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "neuronc", *args], cwd=ROOT, capture_output=True, timeout=timeout, check=False
    )


def lookup(snapshot: Path, model: str = str(LLAMA_DIR)) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any]]:
    proc = run("cache-lookup", model, "--snapshot", str(snapshot), "--json")
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    data: dict[str, Any] = json.loads(proc.stdout.decode("utf-8"))  # strict UTF-8: raises on anything else
    return proc, data


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    root = tmp_path / "snap"
    shutil.copytree(FIXTURE / "snapshot" / FOLDER, root / FOLDER)
    return root


def _entry(**neuron: Any) -> bytes:
    doc = json.loads(json.dumps(GOOD))
    doc["neuron"].update(neuron)
    return json.dumps(doc).encode()


def _skipped_reason(data: dict[str, Any], path_end: str) -> str:
    matches = [s["reason"] for s in data["skipped"] if s["path"].endswith(path_end)]
    assert matches, data["skipped"]
    return str(matches[0])


def _expect_skip(snap: Path, path_end: str, reason: str) -> dict[str, Any]:
    proc, data = lookup(snap)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert reason in _skipped_reason(data, path_end)
    assert data["hit"] is True  # the good entry still answers
    assert reason in proc.stderr.decode("utf-8")  # and the warning says why
    return data


# -- special files, links, loops ----------------------------------------------------------------------


def test_a_fifo_named_like_an_entry_is_skipped_not_opened(snap: Path) -> None:
    os.mkfifo(snap / FOLDER / f"{NAME}.json")
    _expect_skip(snap, f"{NAME}.json", "a FIFO, not a regular file")


def test_a_link_to_dev_zero_is_never_read(snap: Path) -> None:
    (snap / FOLDER / f"{NAME}.json").symlink_to("/dev/zero")
    _expect_skip(snap, f"{NAME}.json", "a symbolic link out of the tree")


def test_a_link_to_a_file_outside_the_snapshot_is_not_followed(snap: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(_entry(batch_size=77))
    (snap / FOLDER / f"{NAME}.json").symlink_to(outside)
    data = _expect_skip(snap, f"{NAME}.json", "a symbolic link out of the tree")
    assert 77 not in {e["batch_size"] for e in data["entries"]}


def test_a_link_to_a_folder_outside_is_not_followed(snap: Path) -> None:
    (snap / REGISTRY / "escape").symlink_to("/")
    _expect_skip(snap, "0.4.5/escape", "a symbolic link out of the tree")


def test_a_link_loop_ends(snap: Path) -> None:
    (snap / FOLDER / "loop").symlink_to("..")
    (snap / REGISTRY / "self").symlink_to(".")
    proc, data = lookup(snap)
    assert proc.returncode == 0
    assert any("link loop" in s["reason"] for s in data["skipped"])
    hashes = [e["hash"] for e in data["entries"]]
    assert len(hashes) == len(set(hashes))


def test_a_compiler_folder_that_links_out_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    root.mkdir()
    (root / "neuronxcc-9.9.9.9+0").symlink_to("/etc")
    proc, data = lookup(root)
    assert proc.returncode == 0
    assert _skipped_reason(data, "neuronxcc-9.9.9.9+0") == "a symbolic link out of the tree"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its mode")
def test_an_unreadable_entry_is_named(snap: Path) -> None:
    path = snap / FOLDER / f"{NAME}.json"
    path.write_bytes(_entry(batch_size=3))
    path.chmod(0)
    _expect_skip(snap, f"{NAME}.json", "cannot read")


# -- hostile JSON -------------------------------------------------------------------------------------

HOSTILE_DOCUMENTS: dict[str, tuple[bytes, str]] = {
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels deep"),
    "deep-in-config": (
        json.dumps({**GOOD, "rope_scaling": {"a": 1}}).replace('{"a": 1}', '{"a": ' * 200 + "1" + "}" * 200).encode(),
        "nested more than 64 levels deep",
    ),
    "list-for-model-type": (json.dumps({**GOOD, "model_type": ["llama"]}).encode(), "must be a string, got a list"),
    "list-for-model-id": (json.dumps({**GOOD, "_model_id": ["x"]}).encode(), "must be a string, got a list"),
    "object-for-dtype": (_entry(torch_dtype={"a": 1}), "must be a string, got an object"),
    "absurd-int": (b'{"model_type": "llama", "neuron": {"batch_size": 1' + b"0" * 40 + b"}}", "integer with 41 digits"),
    "int-beyond-shapes": (_entry(batch_size=2**40), "field 'batch_size' must be between 1 and 2147483647"),
    "negative": (_entry(tp_degree=-8), "field 'tp_degree' must be between 1 and 2147483647, got -8"),
    "float-batch": (_entry(batch_size=4.5), "field 'batch_size': must be an integer, got 4.5"),
    "nan": (_entry().replace(b'"batch_size": 4', b'"batch_size": NaN'), "NaN is not JSON"),
    "lone-surrogate": (json.dumps({**GOOD, "_model_id": "\ud800"}).encode(), "must be printable text"),
    "escape-codes": (json.dumps({**GOOD, "_model_id": "x\u001b[2Jy"}).encode(), "must be printable text"),
    "huge-string": (json.dumps({**GOOD, "_model_id": "x" * 100_000}).encode(), "at most 512 characters"),
    "not-utf8": (b'{"model_type": "\xff\xfe"}', "not UTF-8"),
    "too-large": (b" " * (2 * 1024 * 1024) + b"{}", "the limit is 1.0 MiB"),
    "top-level-list": (b"[1, 2]", "expected a JSON object, got a list"),
    "empty": (b"", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DOCUMENTS))
def test_hostile_entry_documents_are_skipped_with_the_reason(snap: Path, case: str) -> None:
    data, reason = HOSTILE_DOCUMENTS[case]
    (snap / FOLDER / f"{NAME}.json").write_bytes(data)
    _expect_skip(snap, f"{NAME}.json", reason)


# -- names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown", "reason"),
    [
        (b"\xff\xfe.json", "\\xff\\xfe.json", "not UTF-8"),
        (b"abc\x1b[2Jdef.json", "abc\\x1b[2Jdef.json", "control characters"),
        (b"tab\there.json", "tab\\there.json", "control characters"),
        ("caf\u00e9.json".encode(), "caf\u00e9.json", "characters no registry name has"),
    ],
)
def test_names_that_are_no_entry_names_are_named_safely(snap: Path, name: bytes, shown: str, reason: str) -> None:
    folder = os.fsencode(snap / FOLDER)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(_entry(batch_size=5))
    proc, data = lookup(snap)
    assert proc.returncode == 0
    assert reason in _skipped_reason(data, shown)
    assert "\x1b" not in proc.stderr.decode("utf-8")  # escaped in the warning too


def test_a_folder_whose_name_is_not_utf8(snap: Path) -> None:
    folder = os.path.join(os.fsencode(snap / REGISTRY), b"llama", b"\xffevil", b"name")
    os.makedirs(folder)
    with open(os.path.join(folder, f"{NAME}.json".encode()), "wb") as f:
        f.write(_entry(batch_size=5))
    proc, data = lookup(snap)
    assert proc.returncode == 0
    assert "not UTF-8" in _skipped_reason(data, f"\\xffevil/name/{NAME}.json")


# -- the lookup's own inputs: exit 2, naming the file --------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels deep"),
        (b'{"model_type": "llama", "num_attention_heads": 0}', "field 'num_attention_heads' must be an integer"),
        (b'{"model_type": "llama", "num_hidden_layers": 1000000000000}', "field 'num_hidden_layers'"),
        (b'{"model_type": "llama", "num_labels": 10000000000}', "field 'num_labels'"),
        (b'{"model_type": "llama", "hidden_size": "4096"}', "field 'hidden_size' must be an integer"),
        (b'{"model_type": "qwen3", "layer_types": "full"}', "field 'layer_types' must be a list"),
        (b'{"model_type": "llama", "id2label": {"x": "y"}}', "field 'id2label' must be an object keyed by integers"),
        (b'{"model_type": "llama", "rope_scaling": [1]}', "field 'rope_scaling' must be an object or null"),
        (b"[1]", "expected a JSON object"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_a_hostile_model_config_is_exit_2_naming_it(snap: Path, tmp_path: Path, config: bytes, message: str) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(config)
    proc, data = lookup(snap, str(model))
    assert proc.returncode == 2, proc.stderr
    assert message in data["message"] and "config.json" in data["message"]


def test_a_model_config_that_is_a_fifo_or_a_device(snap: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    proc, data = lookup(snap, str(model))
    assert proc.returncode == 2 and "a FIFO" in data["message"]
    (model / "config.json").unlink()
    (model / "config.json").symlink_to("/dev/zero")
    proc, data = lookup(snap, str(model))
    assert proc.returncode == 2 and "character device" in data["message"]


@pytest.mark.parametrize("make", ["fifo", "file", "missing", "non-utf8"])
def test_a_bad_snapshot_path_is_exit_2(tmp_path: Path, make: str) -> None:
    path = tmp_path / "snap"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "file":
        path.write_text("x")
    elif make == "non-utf8":
        path = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff-missing")))
    proc, data = lookup(path)
    assert proc.returncode == 2
    assert data["error"] == "invalid_input"
    assert "no such snapshot directory" in data["message"] or "not a directory" in data["message"]


MIRROR_METADATA: dict[str, Callable[[Path], None]] = {
    "deep": lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "list-for-repo": lambda p: p.write_text('{"repo": ["a"], "revision": "x"}'),
    "absurd-int": lambda p: p.write_text('{"repo": "a", "files": 1' + "0" * 50 + "}"),
    "fifo": lambda p: os.mkfifo(p),
    "dev-zero": lambda p: p.symlink_to("/dev/zero"),
    "paths-not-strings": lambda p: p.write_text('{"repo": "a", "paths": [1, 2]}'),
}


@pytest.mark.parametrize("case", sorted(MIRROR_METADATA))
def test_hostile_mirror_metadata_is_ignored_with_a_warning(snap: Path, case: str) -> None:
    MIRROR_METADATA[case](snap / ".neuronc-mirror.json")
    proc, data = lookup(snap)
    assert proc.returncode == 0
    assert data["source"]["repo"] is None and data["hit"] is True
    assert any(".neuronc-mirror.json" in note and note.startswith("ignored") for note in data["notes"])


def test_the_human_output_of_a_hostile_tree_has_no_raw_control_characters(snap: Path) -> None:
    folder = os.fsencode(snap / FOLDER)
    with open(os.path.join(folder, b"\x1b]0;pwned\x07.json"), "wb") as f:
        f.write(b"{}")
    proc = run("cache-lookup", str(LLAMA_DIR), "--snapshot", str(snap))
    assert proc.returncode == 0
    assert b"\x1b]" not in proc.stdout + proc.stderr and b"\x07" not in proc.stdout + proc.stderr


def test_a_full_cache_disk_only_costs_the_index(tmp_path: Path, small_fs: Callable[..., Path]) -> None:
    """The index is a cache: no room for it is a lookup that answers all the same, unsaved."""
    snap = tmp_path / "snap"
    shutil.copytree(FIXTURE / "snapshot", snap)  # 269 entries: an index of some 20 KiB
    cache = small_fs(8 * 1024)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    cmd = [sys.executable, "-m", "neuronc", "cache-lookup", str(LLAMA_DIR), "--snapshot", str(snap), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    data = json.loads(proc.stdout.decode("utf-8"))
    assert data["hit"] is True and data["stats"]["index"]["saved"] is False
    assert not list(cache.rglob("*.tmp"))  # nothing half-written left behind
