"""`neuronc cache status|cleanup` on a local Neuron compile cache (one entry in each state)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app

CURRENT = "neuronxcc-2.21.33363.0+82129205"  # the SDK doubles' neuronx-cc
OLD = "neuronxcc-2.20.9961.0+0acef03a"


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    out.reset()
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _entry(root: Path, folder: str, name: str, files: dict[str, bytes]) -> Path:
    entry = root / folder / name
    entry.mkdir(parents=True)
    for file, data in files.items():
        (entry / file).write_bytes(data)
    return entry


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """One entry in each state; the held lock is held (flock) by this process while the test runs."""
    root = tmp_path / "neuron-compile-cache"
    hlo = {"model.hlo_module.pb": b"HloModule x", "compile_flags.json": b'["--target", "trn1"]'}
    _entry(root, CURRENT, "MODULE_1+aaaaaaaa", {**hlo, "model.neff": b"NEFF" * 100, "model.done": b""})
    _entry(root, CURRENT, "MODULE_2+aaaaaaaa", {**hlo, "model.log": b"ERROR: Unsupported operator"})
    held = _entry(root, CURRENT, "MODULE_3+aaaaaaaa", {**hlo, "model.hlo_module.pb.lock": b""})
    _entry(root, CURRENT, "MODULE_4+aaaaaaaa", {**hlo, "model.hlo_module.pb.lock": b""})  # its process is gone
    _entry(root, CURRENT, "MODULE_5+aaaaaaaa", hlo)
    _entry(root, OLD, "MODULE_6+bbbbbbbb", {**hlo, "model.neff": b"OLD", "model.done": b""})
    fd = os.open(held / "model.hlo_module.pb.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield root
    finally:
        os.close(fd)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_status_classifies_one_entry_in_each_state(runner: CliRunner, cache: Path) -> None:
    code, stdout, stderr = invoke(runner, "cache", "status", "--cache-dir", str(cache), "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    states = {e["name"]: (e["state"], e["stale"]) for e in data["entries"]}
    assert states == {
        "MODULE_1+aaaaaaaa": ("complete", False),
        "MODULE_2+aaaaaaaa": ("failed", False),
        "MODULE_3+aaaaaaaa": ("locked", False),
        "MODULE_4+aaaaaaaa": ("locked", True),
        "MODULE_5+aaaaaaaa": ("empty", False),
        "MODULE_6+bbbbbbbb": ("complete", False),
    }
    assert data["counts"] == {"complete": 2, "failed": 1, "locked": 2, "empty": 1}
    assert data["stale_locks"] == 1
    usage = {v["folder"]: v for v in data["versions"]}
    assert usage[CURRENT]["bytes"] > usage[OLD]["bytes"] > 0
    assert usage[CURRENT]["entries"]["locked"] == 2
    code, stdout, _ = invoke(runner, "cache", "status", "--cache-dir", str(cache))
    assert code == 0
    assert CURRENT in stdout and "1 stale lock" in stdout


def test_cleanup_dry_run_removes_nothing_and_cleanup_removes_only_failed_and_stale(
    runner: CliRunner, cache: Path
) -> None:
    before = _tree(cache)
    code, stdout, stderr = invoke(runner, "cache", "cleanup", "--cache-dir", str(cache), "--dry-run", "--json")
    assert code == 0, stderr
    planned = json.loads(stdout)["removed"]
    assert sorted((Path(r["path"]).relative_to(cache).as_posix(), r["reason"]) for r in planned) == [
        (f"{CURRENT}/MODULE_2+aaaaaaaa", "failed"),
        (f"{CURRENT}/MODULE_4+aaaaaaaa/model.hlo_module.pb.lock", "stale lock"),
    ]
    assert _tree(cache) == before
    code, stdout, stderr = invoke(runner, "cache", "cleanup", "--cache-dir", str(cache), "--json")
    assert code == 0, stderr
    after = set(_tree(cache))
    assert set(before) - after == {
        f"{CURRENT}/MODULE_2+aaaaaaaa",
        f"{CURRENT}/MODULE_2+aaaaaaaa/model.hlo_module.pb",
        f"{CURRENT}/MODULE_2+aaaaaaaa/compile_flags.json",
        f"{CURRENT}/MODULE_2+aaaaaaaa/model.log",
        f"{CURRENT}/MODULE_4+aaaaaaaa/model.hlo_module.pb.lock",
    }
    # The held lock and both complete entries stay.
    assert f"{CURRENT}/MODULE_3+aaaaaaaa/model.hlo_module.pb.lock" in after
    assert f"{CURRENT}/MODULE_1+aaaaaaaa/model.neff" in after and f"{OLD}/MODULE_6+bbbbbbbb/model.neff" in after


def test_old_versions_need_an_installed_compiler_and_remove_only_other_versions(
    runner: CliRunner, cache: Path, sdk_doubles: Path
) -> None:
    code, stdout, stderr = invoke(runner, "cache", "cleanup", "--cache-dir", str(cache), "--old-versions", "--json")
    assert code == 0, stderr
    removed = [Path(r["path"]).name for r in json.loads(stdout)["removed"]]
    assert removed == [OLD]
    assert not (cache / OLD).exists() and (cache / CURRENT / "MODULE_1+aaaaaaaa" / "model.neff").exists()
    assert (cache / CURRENT / "MODULE_2+aaaaaaaa").exists()  # only what was asked for


def test_the_cache_directory_comes_from_the_environment(
    runner: CliRunner, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", str(cache))
    code, stdout, _ = invoke(runner, "cache", "status", "--json")
    assert code == 0
    assert json.loads(stdout)["source"] == "NEURON_COMPILE_CACHE_URL"
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", "s3://bucket/cache")
    code, stdout, _ = invoke(runner, "cache", "status", "--json")
    assert code == 2
    assert "NEURON_COMPILE_CACHE_URL" in json.loads(stdout)["message"]
