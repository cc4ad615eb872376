"""Corruption: flipping any bit pattern of any single byte of any file in a bundle is caught by verify."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugins.fake_backend import build_bundle

from neuronc.bundle import verify_bundle
from neuronc.errors import BundleFormatError


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("corrupt") / "bundle", shard_bytes=4096, artifact_bytes=512)


def _files(bundle: Path) -> list[Path]:
    return sorted(p for p in bundle.rglob("*") if p.is_file())


def _flip_and_verify(path: Path, offset: int, mask: int, bundle: Path) -> tuple[bool, str]:
    """Flip one byte, run verify, restore; (caught, how)."""
    data = bytearray(path.read_bytes())
    original = data[offset]
    data[offset] ^= mask
    path.write_bytes(bytes(data))
    try:
        report = verify_bundle(bundle, jobs=1)
    except BundleFormatError as exc:  # a manifest byte that breaks the JSON or the schema: exit 2
        return True, f"format: {exc.message}"
    finally:
        data[offset] = original
        path.write_bytes(bytes(data))
    rel = path.relative_to(bundle).as_posix()
    named = [p.path for p in report.mismatched]
    # A flipped manifest byte may also change a recorded hash: then that file is named too.
    caught = named == [rel] if rel != "manifest.json" else "manifest.json" in named
    return caught, ";".join(report.problems())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_is_caught(bundle: Path, data: st.DataObject) -> None:
    files = _files(bundle)
    path = data.draw(st.sampled_from(files), label="file")
    offset = data.draw(st.integers(0, path.stat().st_size - 1), label="offset")
    mask = data.draw(st.integers(1, 255), label="xor mask")
    caught, how = _flip_and_verify(path, offset, mask, bundle)
    assert caught, (path, offset, mask, how)
    assert verify_bundle(bundle).ok  # restored


def test_every_byte_of_the_manifest_is_sealed(bundle: Path) -> None:
    """manifest.json is the one file no other hash covers: flip bits at ~250 offsets spread over all of it."""
    manifest = bundle / "manifest.json"
    size = manifest.stat().st_size
    for offset in range(0, size, max(1, size // 250)):
        for mask in (0x01, 0x20):
            caught, how = _flip_and_verify(manifest, offset, mask, bundle)
            assert caught, (offset, mask, how)


def test_every_file_first_and_last_byte(bundle: Path) -> None:
    for path in _files(bundle):
        for offset in {0, path.stat().st_size - 1}:
            caught, how = _flip_and_verify(path, offset, 0x80, bundle)
            assert caught, (path, offset, how)
