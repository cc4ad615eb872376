"""Bundle API details: migrations, toolchain verdicts, writer edge cases, hash --diff on bundles."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.fake_backend import build_bundle, make_spec, spec_key

from neuronc.bundle import (
    COMPATIBLE,
    IDENTICAL,
    INCOMPATIBLE,
    BuildRecord,
    BundleWriter,
    compare_toolchain,
    read_manifest,
    verify_bundle,
)
from neuronc.bundle import _manifest as manifest_module
from neuronc.cli import app
from neuronc.errors import CompileError


def _manifest(tmp_path: Path, toolchain: dict[str, str | None]) -> Any:
    with BundleWriter(tmp_path / "b") as w:
        w.write_bytes("artifacts/a", b"a")
        path = w.finish(BuildRecord.for_build(make_spec(), spec_key(make_spec()), toolchain))
    return read_manifest(path)


BUILT = {"neuronc": "0.1.0", "neuronx-cc": "2.21.33363.0", "torch": "2.8.0", "transformers": None}


@pytest.mark.parametrize(
    ("installed", "verdict", "packages"),
    [
        (BUILT, IDENTICAL, []),
        ({**BUILT, "neuronc": "0.1.7"}, COMPATIBLE, ["neuronc"]),
        ({**BUILT, "torch": "2.8.0+cpu"}, COMPATIBLE, ["torch"]),
        ({**BUILT, "transformers": "4.57.1"}, COMPATIBLE, ["transformers"]),
        ({**BUILT, "neuronc": "0.2.0"}, INCOMPATIBLE, ["neuronc"]),
        ({**BUILT, "neuronx-cc": "2.22.0.0"}, INCOMPATIBLE, ["neuronx-cc"]),
        ({**BUILT, "neuronx-cc": None}, INCOMPATIBLE, ["neuronx-cc"]),
        ({k: v for k, v in BUILT.items() if k != "torch"}, INCOMPATIBLE, ["torch"]),
        (
            {**BUILT, "torch": "2.8.0", "neuronc": "0.1.1", "neuronx-cc": "2.21.1"},
            INCOMPATIBLE,
            ["neuronc", "neuronx-cc"],
        ),
    ],
)
def test_toolchain_verdicts(
    tmp_path: Path, installed: dict[str, str | None], verdict: str, packages: list[str]
) -> None:
    result = compare_toolchain(_manifest(tmp_path, BUILT), installed)
    assert result.verdict == verdict
    assert [d.package for d in result.differences] == packages


def test_cpu_isa_change_is_incompatible(tmp_path: Path) -> None:
    built = {"neuronc": "0.1.0", "torch": "2.8.0", "cpu_isa": "avx512"}
    assert compare_toolchain(_manifest(tmp_path, built), {**built, "cpu_isa": "avx2"}).verdict == INCOMPATIBLE


def test_older_major_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = build_bundle(tmp_path / "b")
    data = json.loads((bundle / "manifest.json").read_text())
    old = {**data, "schema_version": "0.9", "toolchain_versions": data.pop("toolchain")}
    (bundle / "manifest.json").write_text(json.dumps(old))

    def upgrade(d: dict[str, Any]) -> dict[str, Any]:
        d = dict(d)
        d["toolchain"] = d.pop("toolchain_versions")
        d["schema_version"] = "1.0"
        return d

    monkeypatch.setitem(manifest_module._MIGRATIONS, 0, upgrade)
    m = read_manifest(bundle)
    assert m.schema_version == "1.0" and m.toolchain["fake-cc"] == "1.2.3"


def test_writer_refuses_symlinks_and_lying_producers(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"s")
    with BundleWriter(tmp_path / "b") as w:
        (w.artifacts_dir / "link").symlink_to(tmp_path / "secret")
        # Issue 34: what a backend leaves in staging is a compile failure (exit 3) naming the file.
        with pytest.raises(CompileError, match="artifacts/link: the backend left a symbolic link"):
            w.finish(BuildRecord.for_build(make_spec(), spec_key(make_spec()), {}))
    assert not (tmp_path / "b").exists()
    with BundleWriter(tmp_path / "c") as w:
        (w.weights_dir / "r0").write_bytes(b"0123")
        with pytest.raises(ValueError, match="reported 5 bytes"):
            w.adopt("weights/r0", "weights", sha256="0" * 64, size=5)
        with pytest.raises(ValueError, match=r"'\.\.'"):
            w.open("../escape")
        with pytest.raises(TypeError, match="bakend"):
            w.finish(BuildRecord(bakend="x"))  # type: ignore[call-arg]


def test_scratch_is_never_published(tmp_path: Path) -> None:
    with BundleWriter(tmp_path / "b") as w:
        (w.scratch_dir / "tmp.bin").write_bytes(b"scratch")
        w.write_bytes("artifacts/a", b"a")
        path = w.finish(BuildRecord.for_build(make_spec(), spec_key(make_spec()), {}))
    assert not (path / ".scratch").exists()
    assert verify_bundle(path).ok


def test_stale_staging_of_a_dead_writer_is_swept_by_the_next(tmp_path: Path) -> None:
    pid = os.fork()
    if pid == 0:
        w = BundleWriter(tmp_path / "b")
        w.write_bytes("artifacts/a", b"a" * 100)
        os._exit(0)  # dies holding staging: no cleanup runs
    os.waitpid(pid, 0)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".neuronc-staging-b-")]
    build_bundle(tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_hash_diff_reads_bundles(runner: CliRunner, tmp_path: Path) -> None:
    a = build_bundle(tmp_path / "a", spec=make_spec(batch_size=1))
    b = build_bundle(tmp_path / "b", spec=make_spec(batch_size=4))
    result = runner.invoke(app, ["hash", "--diff", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    [comparison] = json.loads(result.stdout)["comparisons"]
    assert [d["field"] for d in comparison["differences"]] == ["batch_size"]
