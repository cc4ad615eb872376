"""Hostile bundles: crafted manifests and trees are rejected cleanly (exit 2 or 4, a message, no traceback).

A bundle is untrusted data. Every case here runs `neuronc verify` (and `inspect`) under an audit hook
that records every file opened, so a read outside the bundle fails the test even if the outcome looks right.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.fake_backend import build_bundle

from neuronc.bundle._manifest import MAX_MANIFEST_BYTES, MAX_SHARDS
from neuronc.cli import app

_OPENED: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and args and isinstance(args[0], str | bytes):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)
SECRET = "outside-secret-7f3a"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the bundle holding files a hostile bundle might point at."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / SECRET).write_bytes(b"do not read me")
    (d / f"{SECRET}-dir").mkdir()
    return d


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build_bundle(tmp_path / "bundle")


@pytest.fixture
def opened() -> Iterator[list[str]]:
    global _OPENED
    _OPENED = []
    yield _OPENED
    _OPENED = None


def _edit(bundle: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _raw(bundle: Path, text: str | bytes) -> None:
    path = bundle / "manifest.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def _first_file(data: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = data["files"][0]
    return entry


def _manifest_symlink(b: Path, o: Path) -> None:
    (o / "m.json").write_bytes((b / "manifest.json").read_bytes())
    (b / "manifest.json").unlink()
    (b / "manifest.json").symlink_to(o / "m.json")


def _swap(path: Path, make: Callable[[Path], object]) -> None:
    path.unlink()
    make(path)


def _deep_extra(b: Path, o: Path) -> None:
    _edit(b, lambda d: d.update(extra={"x": json.loads("[" * 500 + "]" * 500)}))


def _deep_nesting(b: Path, o: Path) -> None:
    _raw(b, '{"schema_version": "1.0", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}")


# name -> (mutation(bundle, outside), expected exit code, expected message fragment)
Mutation = Callable[[Path, Path], None]
MANIFEST_CASES: dict[str, tuple[Mutation, str]] = {
    "malformed json": (lambda b, o: _raw(b, '{"schema_version": "1.0", '), "not valid JSON"),
    "not an object": (lambda b, o: _raw(b, "[1, 2, 3]"), "expected a JSON object"),
    "not utf-8": (lambda b, o: _raw(b, b'{"schema_version": "1.0", "x": "\xff\xfe"}'), "not UTF-8"),
    "empty file": (lambda b, o: _raw(b, ""), "not valid JSON"),
    "no schema version": (lambda b, o: _edit(b, lambda d: d.pop("schema_version")), "schema_version is missing"),
    "garbage schema version": (lambda b, o: _edit(b, lambda d: d.update(schema_version="one")), "not MAJOR.MINOR"),
    "newer major": (lambda b, o: _edit(b, lambda d: d.update(schema_version="99.0")), "newer than this neuronc"),
    "older major": (lambda b, o: _edit(b, lambda d: d.update(schema_version="0.3")), "too old"),
    "absolute path": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path=f"{o}/{SECRET}")), "absolute path"),
    "dotdot path": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path=f"../outside/{SECRET}")), "'..'"),
    "dotdot inside": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="model/../../x")), "'..'"),
    "backslash path": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="..\\..\\x")), "backslash"),
    "dot component": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="./model/x")), "'.' path"),
    "empty component": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="model//x")), "'.' path"),
    "manifest lists itself": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="manifest.json")), "itself"),
    "long component": (lambda b, o: _edit(b, lambda d: _first_file(d).update(path="m/" + "a" * 300)), "longer"),
    "escape sequence in path": (
        lambda b, o: _edit(b, lambda d: _first_file(d).update(path="model/\x1b[2Jx")),
        "control character",
    ),
    "duplicate entry": (lambda b, o: _edit(b, lambda d: d["files"].append(dict(d["files"][0]))), "duplicate entry"),
    "duplicate json key": (
        lambda b, o: _raw(b, (b / "manifest.json").read_text().replace('"backend":', '"backend": "x", "backend":', 1)),
        "duplicate key",
    ),
    "file and directory": (
        lambda b, o: _edit(b, lambda d: d["files"].append({**d["files"][0], "path": d["files"][1]["path"] + "/x"})),
        "as a file and as a directory",
    ),
    "huge declared size": (lambda b, o: _edit(b, lambda d: _first_file(d).update(size=1 << 62)), "less than or equal"),
    "negative size": (lambda b, o: _edit(b, lambda d: _first_file(d).update(size=-1)), "greater than or equal"),
    "size as string": (lambda b, o: _edit(b, lambda d: _first_file(d).update(size="12")), "valid integer"),
    "files not a list": (lambda b, o: _edit(b, lambda d: d.update(files="weights")), "valid list"),
    "uppercase sha": (lambda b, o: _edit(b, lambda d: _first_file(d).update(sha256="A" * 64)), "pattern"),
    "config hash not hex": (lambda b, o: _edit(b, lambda d: d.update(config_hash="z" * 64)), "pattern"),
    "nan": (
        lambda b, o: _raw(
            b,
            re.sub(
                r'"compile_seconds": [0-9.e+-]+', '"compile_seconds": NaN', (b / "manifest.json").read_text(), count=1
            ),
        ),
        "NaN",
    ),
    "infinite float": (
        lambda b, o: _raw(
            b,
            re.sub(
                r'"compile_seconds": [0-9.e+-]+', '"compile_seconds": 1e999', (b / "manifest.json").read_text(), count=1
            ),
        ),
        "out of range",
    ),
    "huge integer": (
        lambda b, o: _raw(b, (b / "manifest.json").read_text().replace('"batch": 1', '"batch": ' + "9" * 5000, 1)),
        "not valid JSON",
    ),
    "deep extra": (_deep_extra, "nested more than 66 levels deep"),
    "deep nesting": (
        _deep_nesting,
        "nested more than 66 levels deep",
    ),
    "absurd shard count": (
        lambda b, o: _edit(b, lambda d: d.update(shards=[d["shards"][0]] * (MAX_SHARDS + 1))),
        "at most 8192",
    ),
    "shard not in files": (
        lambda b, o: _edit(b, lambda d: d["shards"][0].update(file="weights/other")),
        "not in files",
    ),
    "shard points outside": (lambda b, o: _edit(b, lambda d: d["shards"][0].update(file=f"/{SECRET}")), "absolute"),
    "graph artifact outside": (lambda b, o: _edit(b, lambda d: d["graphs"][0].update(artifact="../x")), "'..'"),
    "oversized manifest": (lambda b, o: os.truncate(b / "manifest.json", MAX_MANIFEST_BYTES + 1), "larger than"),
    "manifest symlink": (
        _manifest_symlink,
        "symlink",
    ),
    "manifest is a directory": (
        lambda b, o: _swap(b / "manifest.json", Path.mkdir),
        "directory",
    ),
    "manifest is a fifo": (
        lambda b, o: _swap(b / "manifest.json", os.mkfifo),
        "not a regular file",
    ),
    "no manifest": (lambda b, o: (b / "manifest.json").unlink(), "not a bundle"),
}


def _replace_with_symlink(path: Path, target: Path) -> None:
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)


TREE_CASES: dict[str, tuple[Mutation, str]] = {
    "file symlink leaving": (
        lambda b, o: _replace_with_symlink(b / "weights" / "rank0.safetensors", o / SECRET),
        "unsafe: weights/rank0.safetensors: symlink leaving the bundle",
    ),
    "relative symlink leaving": (
        lambda b, o: _replace_with_symlink(b / "weights" / "rank0.safetensors", Path(f"../../outside/{SECRET}")),
        "symlink leaving the bundle",
    ),
    "directory symlink leaving": (
        lambda b, o: _replace_with_symlink(b / "weights", o / f"{SECRET}-dir"),
        "unsafe: weights: symlink leaving the bundle",
    ),
    "symlink inside": (
        lambda b, o: _replace_with_symlink(b / "weights" / "rank1.safetensors", Path("rank0.safetensors")),
        "symlink inside the bundle",
    ),
    "fifo instead of file": (
        lambda b, o: _swap(b / "logs" / "compile.log", os.mkfifo),
        "unsafe: logs/compile.log: not a regular file",
    ),
    "extra fifo": (lambda b, o: os.mkfifo(b / "deploy" / "pipe"), "unsafe: deploy/pipe: not a regular file"),
    "file grew": (
        lambda b, o: os.truncate(b / "weights" / "rank0.safetensors", 1 << 40),
        "mismatch: weights/rank0.safetensors: size 1099511627776",
    ),
    "file missing": (lambda b, o: (b / "profile.yaml").unlink(), "missing: profile.yaml"),
    "directory instead of file": (
        lambda b, o: _swap(b / "profile.yaml", Path.mkdir),
        "profile.yaml",
    ),
}


def _check_clean(result: Any, opened: list[str], code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert fragment in result.stderr, result.stderr
    assert "\x1b" not in result.output
    assert not [p for p in opened if SECRET in p], "read outside the bundle"


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_hostile_manifest_is_rejected(
    case: str, runner: CliRunner, bundle: Path, outside: Path, opened: list[str]
) -> None:
    mutate, fragment = MANIFEST_CASES[case]
    mutate(bundle, outside)
    result = runner.invoke(app, ["verify", str(bundle)])
    _check_clean(result, opened, 2, fragment)


@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_hostile_tree_fails_verification(
    case: str, runner: CliRunner, bundle: Path, outside: Path, opened: list[str]
) -> None:
    mutate, fragment = TREE_CASES[case]
    mutate(bundle, outside)
    result = runner.invoke(app, ["inspect", str(bundle), "--verify"])
    _check_clean(result, opened, 4, fragment)


def test_bundle_argument_is_a_file(runner: CliRunner, bundle: Path) -> None:
    result = runner.invoke(app, ["inspect", str(bundle / "profile.yaml")])
    assert result.exit_code == 2 and "not a directory" in result.stderr
