"""Bundles: the writer, the reader and verify, through a backend registered like a plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugins.fake_backend import build_bundle, make_spec, spec_key

from neuronc.bundle import (
    SCHEMA_VERSION,
    BuildRecord,
    BundleExistsError,
    BundleWriter,
    read_manifest,
    verify_bundle,
)
from neuronc.errors import BundleFormatError, VerificationError


def test_written_bundle_reads_back_and_verifies(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "b")
    raw = (bundle / "manifest.json").read_text()
    assert raw.startswith('{\n  "schema_version": "' + SCHEMA_VERSION + '"')
    m = read_manifest(bundle)
    assert m.backend == "fake" and m.target == "inf2" and m.tp_degree == 2 and m.dtype == "bfloat16"
    assert m.config_hash == spec_key(make_spec(options={"artifact_bytes": 4096})).hash
    assert [s.rank for s in m.shards] == [0, 1]
    assert {g.name for g in m.graphs} == {"cte-b1-s64", "cte-b1-s128", "tkg-b1-s128", "tkg-b1-s256"}
    assert "logs/compile.log" in {f.path for f in m.files}  # adopted at finish
    assert [f.path for f in m.files] == sorted(f.path for f in m.files)
    assert [s.name for s in m.stages] == ["load", "split", "compile"]
    assert m.extra["load_snippet"].startswith("from fake import load")
    report = verify_bundle(bundle)
    assert report.ok, report.problems()
    assert report.files_checked == len(m.files)
    assert not list(tmp_path.glob(".neuronc-*")), "staging must be gone"


def test_writer_hashes_while_writing(tmp_path: Path) -> None:
    with BundleWriter(tmp_path / "b") as w:
        with w.open("artifacts/a.bin") as f:
            f.write(b"hello ")
            f.write(memoryview(b"world"))
        entry = w.files["artifacts/a.bin"]
        assert entry.size == 11 and entry.role == "artifact"
        import hashlib

        assert entry.sha256 == hashlib.sha256(b"hello world").hexdigest()


def test_exception_removes_staging_and_publishes_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), BundleWriter(tmp_path / "b") as w:
        w.write_bytes("artifacts/x", b"x")
        raise RuntimeError("backend failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_existing_destination_needs_overwrite(tmp_path: Path) -> None:
    first = build_bundle(tmp_path / "b")
    with pytest.raises(BundleExistsError):
        BundleWriter(first)
    with BundleWriter(first, overwrite=True) as w:
        w.write_bytes("artifacts/new", b"new")
        w.finish(BuildRecord.for_build(make_spec(), spec_key(make_spec()), {}))
    assert [f.path for f in read_manifest(first).files] == ["artifacts/new"]
    assert verify_bundle(first).ok


def test_flipped_byte_is_named(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "b")
    target = bundle / "weights" / "rank1.safetensors"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    (bundle / "artifacts" / "cte-b1-s64.neff").unlink()
    (bundle / "deploy" / "stray.txt").write_text("?")
    report = verify_bundle(bundle)
    assert [p.path for p in report.mismatched] == ["weights/rank1.safetensors"]
    assert report.missing == ["artifacts/cte-b1-s64.neff"]
    assert report.extra == ["deploy/stray.txt"]
    with pytest.raises(VerificationError) as info:
        report.raise_for_problems()
    assert info.value.exit_code == 4


def test_newer_major_schema_is_refused_clearly(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "b")
    data = json.loads((bundle / "manifest.json").read_text())
    data["schema_version"] = "2.0"
    (bundle / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleFormatError, match=r"schema 2\.0 is newer") as info:
        read_manifest(bundle)
    assert info.value.exit_code == 2
    assert "upgrade neuronc" in (info.value.hint or "")


def test_newer_minor_schema_reads_and_ignores_new_fields(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "b")
    data = json.loads((bundle / "manifest.json").read_text())
    data["schema_version"] = "1.7"
    data["future_field"] = {"x": 1}
    (bundle / "manifest.json").write_text(json.dumps(data))
    assert read_manifest(bundle).schema_version == "1.7"


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleFormatError, match=r"no manifest\.json"):
        read_manifest(tmp_path)
    with pytest.raises(BundleFormatError, match="no such bundle"):
        read_manifest(tmp_path / "nope")
