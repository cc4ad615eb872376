"""Hostile split directories for `neuronc split --check`, and `split --out` on a disk that is full.

--check reads an index.json anyone may have edited: deep or oversized JSON, absurd integers, lists
where objects belong, slices that lie, shard files that are FIFOs or links out. Each is a clean exit
(2 for an index that is not a split's, 4 for a split that does not match its source) with one error
line, never a traceback, a hang, or memory sized by a claimed dimension (the CLI runs with its
address space capped).

Full disk: a small tmpfs (mounted here when the test runs as root and mounting is permitted, skipped
with the reason otherwise). A split that does not fit is refused before it writes (exit 5, naming
the path and the space needed); one that runs out of space while writing (an inode limit, or a
free-space check that could not see it coming) is a DiskFullError too, and leaves the output
directory as it was: absent, with the parent directories it created removed, or empty.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import assert_clean_failure, run_split_cli, tiny_llama

from neuronc.checkpoint import check_split, open_split, split_checkpoint
from neuronc.errors import CheckpointError, DiskFullError

K = "model.layers.0.self_attn.k_proj.weight"
EMBED = "model.embed_tokens.weight"
NORM = "model.norm.weight"
CAP = 2 * 1024**3  # the --check child's address space: far above what it needs, far below a claimed dimension


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good split of the tiny Llama (tp 2, hashed), to copy and break."""
    root = tmp_path_factory.mktemp("split")
    tiny_llama(root / "model")
    split_checkpoint(root / "model", root / "w", 2, hash=True)
    return root / "w"


def _copy(split_dir: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(split_dir, tmp_path / "w")
    return tmp_path / "w"


def _edit(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    data = json.loads((path / "index.json").read_text())
    edit(data)
    (path / "index.json").write_text(json.dumps(data))


def _entry(edit: Callable[[dict[str, Any]], object], name: str = K) -> Callable[[Path], None]:
    return lambda w: _edit(w, lambda d: edit(d["tensors"][name]))


def _rank(i: int, key: str, value: object, name: str = K) -> Callable[[Path], None]:
    return _entry(lambda e: e["ranks"][i].__setitem__(key, value), name)


def _claim_rows(rows: int) -> Callable[[Path], None]:
    """K's entry, consistent in itself, claiming ``rows`` rows (the shards and the source hold 8)."""

    def edit(entry: dict[str, Any]) -> None:
        half = rows // 2
        entry["shape"] = [rows, 16]
        entry["ranks"][0].update(shape=[half, 16], slices=[[0, half]])
        entry["ranks"][1].update(shape=[half, 16], slices=[[half, rows]])

    return _entry(edit)


def _replace_shard(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(w: Path) -> None:
        shard = w / "rank-001-of-002.safetensors"
        shard.unlink()
        make(shard)

    return edit


# (id, break the split, exit code, what the output must say)
CHECK_CASES: list[tuple[str, Callable[[Path], None], int, str]] = [
    ("index-deep", lambda w: (w / "index.json").write_text("[" * 100_000 + "]" * 100_000), 2, "nested more than 64"),
    ("index-not-utf8", lambda w: (w / "index.json").write_bytes(b'{"\xff": 1}'), 2, "not UTF-8"),
    ("index-fifo", lambda w: ((w / "index.json").unlink(), os.mkfifo(w / "index.json")), 2, "is a FIFO"),
    ("index-list", lambda w: (w / "index.json").write_text("[]"), 2, "expected a JSON object, got a list"),
    ("format-version", lambda w: _edit(w, lambda d: d.__setitem__("format_version", 2)), 2, "format_version 2"),
    ("tp-absurd", lambda w: _edit(w, lambda d: d.__setitem__("tp", 10**6)), 2, "field 'tp' must be between 1"),
    ("tp-beyond-64-bits", lambda w: _edit(w, lambda d: d.__setitem__("tp", 2**70)), 2, "integer with 22 digits"),
    ("tp-string", lambda w: _edit(w, lambda d: d.__setitem__("tp", "2")), 2, "field 'tp': must be an integer"),
    ("shards-object", lambda w: _edit(w, lambda d: d.__setitem__("shards", {})), 2, "field 'shards': must be a list"),
    (
        "shard-file-escapes",
        lambda w: _edit(w, lambda d: d["shards"][1].__setitem__("file", "../rank-001-of-002.safetensors")),
        2,
        "is outside the directory",
    ),
    (
        "shard-file-list",
        lambda w: _edit(w, lambda d: d["shards"][1].__setitem__("file", ["x"])),
        2,
        "field 'file': must be a string, got a list",
    ),
    (
        "shard-bytes-negative",
        lambda w: _edit(w, lambda d: d["shards"][0].__setitem__("bytes", -1)),
        2,
        "field 'bytes' must be between 0",
    ),
    (
        "shard-sha256-not-hex",
        lambda w: _edit(w, lambda d: d["shards"][0].__setitem__("sha256", "zz")),
        2,
        "field 'sha256' is not 64 lowercase hex digits",
    ),
    ("tensors-list", lambda w: _edit(w, lambda d: d.__setitem__("tensors", [])), 2, "field 'tensors': must be an"),
    ("shard-fifo", _replace_shard(os.mkfifo), 4, "is a FIFO, not a regular file"),
    ("shard-dev-zero", _replace_shard(lambda p: p.symlink_to("/dev/zero")), 4, "is a link to /dev/zero, outside"),
    (
        "shard-link-out",
        _replace_shard(lambda p: p.symlink_to(p.parent.parent / "elsewhere.safetensors")),
        4,
        "outside",
    ),
    ("shard-link-loop", _replace_shard(lambda p: p.symlink_to(p.name)), 4, "is a symbolic link loop"),
    # Tensor entries: malformed ones are problems of that tensor (exit 4), named, and nothing else breaks.
    ("entry-shape-string", _entry(lambda e: e.__setitem__("shape", "8,16")), 4, "field 'shape': must be a list"),
    ("entry-dim-out-of-range", _entry(lambda e: e.__setitem__("dim", 7)), 4, "dim 7 is not a dimension"),
    ("entry-dtype-unknown", _entry(lambda e: e.__setitem__("dtype", "Q4")), 4, "dtype 'Q4' is not a safetensors"),
    ("entry-ranks-object", _entry(lambda e: e.__setitem__("ranks", {})), 4, "field 'ranks': must be a list"),
    ("entry-slice-reversed", _rank(0, "slices", [[4, 0]]), 4, "slice [4, 0) is outside dim 0"),
    ("entry-slice-triple", _rank(0, "slices", [[0, 2, 4]]), 4, "each slice must be [start, stop]"),
    ("entry-slices-out-of-order", _rank(0, "slices", [[4, 8], [0, 4]]), 4, "is not after the one before it"),
    ("entry-rank-shape-other-dim", _rank(0, "shape", [4, 17]), 4, "does not match [8, 16] outside dim 0"),
    ("entry-gap", _rank(1, "slices", [[5, 8]]), 4, "slices and padding add up to 3, not 4"),
    ("entry-claims-a-huge-dimension", _claim_rows(2**33), 4, "index.json recorded F32 [8589934592, 16]"),
    (
        "entry-claims-a-huge-replicated-tensor",
        _entry(lambda e: e.__setitem__("shape", [2**40, 2**23]), NORM),
        4,
        "model.norm.weight",
    ),
    (
        "entry-claims-a-huge-padding",
        _rank(1, "pad", 2**62, EMBED),
        4,
        "slices and padding add up to",
    ),
]


@pytest.mark.parametrize(("edit", "code", "needle"), [c[1:] for c in CHECK_CASES], ids=[c[0] for c in CHECK_CASES])
def test_check_of_a_hostile_split_exits_cleanly(
    split_dir: Path, tmp_path: Path, edit: Callable[[Path], None], code: int, needle: str
) -> None:
    broken = _copy(split_dir, tmp_path)
    edit(broken)
    listing = sorted(os.listdir(broken))
    proc = run_split_cli("--check", str(broken), "--json", timeout=60, memory_limit=CAP)
    assert_clean_failure(proc, code, needle)
    if code == 4:
        document = json.loads(proc.stdout)
        assert document["error"] == "verification_failed"
        assert any(needle in line for line in document["details"]), document
    assert sorted(os.listdir(broken)) == listing  # --check writes nothing


def test_reassemble_refuses_a_malformed_entry_without_allocating_it(split_dir: Path, tmp_path: Path) -> None:
    broken = _copy(split_dir, tmp_path)
    _claim_rows(2**40)(broken)
    with open_split(broken) as split, pytest.raises(CheckpointError, match=r"does not hold it as index\.json says"):
        split.reassemble(K)
    with open_split(broken) as split:
        assert len(split.reassemble(NORM)) == 16 * 4  # the others still reassemble


def test_check_library_reports_the_same_problems(split_dir: Path, tmp_path: Path) -> None:
    broken = _copy(split_dir, tmp_path)
    _rank(0, "slices", [[4, 0]])(broken)
    report = check_split(broken)
    assert [(m.tensor, m.rank) for m in report.mismatches] == [(K, None)]
    assert "slice [4, 0) is outside dim 0 of size 8" in report.mismatches[0].problem


# -- full disk --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The tiny Llama at 16x (2.3 MB), and the bytes its tp-2 split takes on a tmpfs."""
    root = tmp_path_factory.mktemp("big")
    tiny_llama(root / "model", scale=16)
    result = split_checkpoint(root / "model", root / "ref", 2, hash=False)  # as the CLI writes it
    files = [s.bytes for s in result.shards] + [(root / "ref" / "index.json").stat().st_size]
    return root / "model", sum(-(-n // 4096) * 4096 for n in files)


def _assert_disk_full(proc: subprocess.CompletedProcess[bytes], out: Path, needle: str) -> None:
    message = assert_clean_failure(proc, 5, needle)
    assert message.startswith(f"{out}: ")
    assert json.loads(proc.stdout)["error"] == "disk_full"


def test_split_that_cannot_fit_is_refused_before_writing(
    small_fs: Callable[..., Path], big_model: tuple[Path, int]
) -> None:
    model, needed = big_model
    fs = small_fs(needed - 4096)
    out = fs / "a" / "b" / "w"
    proc = run_split_cli(str(model), "--tp", "2", "--out", str(out), "--json", timeout=60)
    _assert_disk_full(proc, out, "not enough space for a split into 2 ranks: needs 2.3 MiB")
    assert os.listdir(fs) == []  # not even the parent directories


def test_split_that_exactly_fits_succeeds(small_fs: Callable[..., Path], big_model: tuple[Path, int]) -> None:
    """The free-space check is not stricter than the disk: what it lets through fits."""
    model, needed = big_model
    fs = small_fs(needed)
    proc = run_split_cli(str(model), "--tp", "2", "--out", str(fs / "w"), timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert check_split(fs / "w").ok


@pytest.mark.parametrize("out_exists", [False, True], ids=["new-nested-out", "empty-out"])
def test_running_out_of_space_while_writing_leaves_out_as_it_was(
    small_fs: Callable[..., Path], big_model: tuple[Path, int], out_exists: bool
) -> None:
    """Enough bytes but too few inodes: the kernel says ENOSPC halfway through creating the rank files."""
    model, needed = big_model
    fs = small_fs(needed * 2, inodes=5)  # the root, a, b (or w), the staging directory, one shard
    out = fs / "w" if out_exists else fs / "a" / "b" / "w"
    if out_exists:
        out.mkdir()
    proc = run_split_cli(str(model), "--tp", "2", "--out", str(out), "--json", timeout=60)
    _assert_disk_full(proc, out, "no space left on device (needs 2.3 MiB")
    assert os.listdir(fs) == (["w"] if out_exists else [])
    if out_exists:
        assert os.listdir(out) == []


@pytest.mark.parametrize("hash_shards", [False, True], ids=["kernel-copy", "hashed"])
def test_disk_filling_up_mid_write_is_disk_full_in_the_library(
    small_fs: Callable[..., Path], big_model: tuple[Path, int], monkeypatch: pytest.MonkeyPatch, hash_shards: bool
) -> None:
    """The free-space check is blind to what others write meanwhile: simulated by skipping it, the
    bytes run out halfway through the data, on both write paths (compile's hashed one included)."""
    from neuronc.checkpoint import _staging

    model, needed = big_model
    fs = small_fs(needed // 2)
    monkeypatch.setattr(_staging, "check_free_space", lambda *args, **kwargs: None)
    with pytest.raises(DiskFullError) as caught:
        split_checkpoint(model, fs / "a" / "w", 2, hash=hash_shards)
    error = caught.value
    assert error.exit_code == 5
    assert error.message.startswith(f"{fs / 'a' / 'w'}: no space left on device (needs 2.3 MiB")
    assert os.listdir(fs) == []


def test_an_out_that_cannot_be_written_is_invalid_input(
    small_fs: Callable[..., Path], big_model: tuple[Path, int]
) -> None:
    model, needed = big_model
    fs = small_fs(needed * 2, read_only=True)
    proc = run_split_cli(str(model), "--tp", "2", "--out", str(fs / "w"), timeout=60)
    assert_clean_failure(proc, 2, f"{fs / 'w'}: cannot write the split: Read-only file system", "choose another --out")
    assert os.listdir(fs) == []
