"""Migration to key scheme 2: a bundle an older neuronc stored (scheme 1: a local model keyed by its
files' names, sizes and headers) is a miss under the new key, never a wrong hit; `store list` still
shows it; and it is never a source of graphs for a rebind."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from click.testing import CliRunner
from plugins import pipeline_backend

from neuronc.cli import app
from neuronc.keys import KEY_SCHEME, canonical_json, sha256_text
from neuronc.pipeline import compile_profiles
from neuronc.store import LocalStore


@pytest.fixture(autouse=True)
def _plugins() -> Iterator[None]:
    pipeline_backend.register()
    yield
    pipeline_backend.unregister()


def _scheme1_fingerprint(directory: Path) -> str:
    """What neuronc up to scheme 1 hashed for a local model: config.json, and per weight file its
    name, size and safetensors header (never the tensor values)."""
    digest = hashlib.sha256()
    digest.update(b"config.json\0" + (directory / "config.json").read_bytes() + b"\0")
    for path in sorted(p for p in directory.iterdir() if p.suffix == ".safetensors"):
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            digest.update(f.read(length))
    return digest.hexdigest()


def _as_scheme1(bundle: Path, store: Path, model: Path) -> Path:
    """A copy of ``bundle`` as an older neuronc stored it: scheme-1 hashed inputs and config hash."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    inputs = {k: v for k, v in manifest["hashed_inputs"].items() if k not in ("model.architecture", "weights.mode")}
    inputs["model.identity"] = {"local_fingerprint": _scheme1_fingerprint(model)}
    inputs["weights"] = manifest["hashed_inputs"]["weights.mode"]
    old_hash = sha256_text(canonical_json(inputs))
    manifest.update(
        config_hash=old_hash,
        hashed_inputs=inputs,
        hashed_fields=[f for f in manifest["hashed_fields"] if f not in ("model.architecture", "weights.mode")]
        + ["model.identity"],
        extra={k: v for k, v in manifest["extra"].items() if k != "keys"},
    )
    old = bundle.parent / old_hash[:16]
    shutil.copytree(bundle, old)
    (old / "manifest.json").write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(bundle)
    return old


def test_an_old_scheme_bundle_is_a_miss_and_still_listed(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    store = tmp_path / "store"
    [first] = compile_profiles([profile], store=store)
    assert first.status == "built" and first.bundle
    old = _as_scheme1(Path(first.bundle), store, model)
    [listed] = LocalStore(store).list()
    assert listed.manifest.config_hash != first.config_hash and Path(listed.location) == old
    assert "keys" not in listed.manifest.extra

    # The same build under scheme 2: a miss (compiled again), never the old bundle.
    [again] = compile_profiles([profile], store=store)
    assert again.status == "built" and again.config_hash == first.config_hash
    assert Path(again.bundle or "") != old
    data = json.loads(CliRunner().invoke(app, ["store", "list", "--store", str(store), "--json"]).stdout)
    hashes = {entry["config_hash"] for entry in data["bundles"]}
    assert hashes == {first.config_hash, listed.manifest.config_hash}


def test_the_bundle_key_is_derived_from_the_graphs_and_weights_keys(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    [report] = compile_profiles([write_profile(tmp_path / "p.yaml")], store=tmp_path / "store")
    keys = LocalStore(tmp_path / "store").list()[0].manifest.extra["keys"]
    assert keys["scheme"] == KEY_SCHEME and keys["embeds_weights"] is None  # the test backend declares nothing
    derived = sha256_text(canonical_json({"scheme": KEY_SCHEME, "graphs": keys["graphs"], "weights": keys["weights"]}))
    assert derived == report.config_hash
    assert (report.graphs_key, report.weights_key) == (keys["graphs"], keys["weights"])
