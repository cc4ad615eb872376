"""Rebind through the pipeline with a test backend (no real compiler): graphs from the store, only the
weights staged, the source bundle unchanged; a backend that declares nothing compiles again."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from plugins import pipeline_backend, rebind_backend

from neuronc.bundle import read_manifest, verify_bundle
from neuronc.pipeline import compile_profiles


@pytest.fixture(autouse=True)
def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pipeline_backend.register()
    rebind_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    yield
    rebind_backend.unregister()
    pipeline_backend.unregister()


def _compiles(tmp_path: Path) -> int:
    log = tmp_path / "compiles.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _tree(bundle: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        digest.update(path.relative_to(bundle).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def test_a_fine_tune_is_rebound_without_a_compile(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "base")
    write_tiny_llama(tmp_path / "ft", seed=5)  # other values, the same names, shapes and dtypes
    store = tmp_path / "store"
    kwargs = {"backend": rebind_backend.NAME}
    [base] = compile_profiles([write_profile(tmp_path / "base.yaml", model="base", **kwargs)], store=store)
    assert base.status == "built" and _compiles(tmp_path) == 1
    base_tree = _tree(Path(base.bundle or ""))

    [ft] = compile_profiles([write_profile(tmp_path / "ft.yaml", model="ft", **kwargs)], store=store)
    assert ft.status == "rebound" and _compiles(tmp_path) == 1  # no compiler ran
    assert ft.rebound_from is not None and ft.rebound_from["config_hash"] == base.config_hash
    assert ft.graphs_key == base.graphs_key and ft.weights_key != base.weights_key
    bundle = Path(ft.bundle or "")
    verify_bundle(bundle)
    manifest = read_manifest(bundle)
    assert manifest.extra["rebound"]["config_hash"] == base.config_hash
    assert [g.artifact for g in manifest.graphs] == [g.artifact for g in base.graphs]
    base_manifest = read_manifest(Path(base.bundle or ""))
    artifacts = {f.path: f.sha256 for f in manifest.files if f.path.startswith("artifacts/")}
    assert artifacts == {f.path: f.sha256 for f in base_manifest.files if f.path.startswith("artifacts/")}
    assert manifest.weights is not None and base_manifest.weights is not None
    assert [s.sha256 for s in manifest.shards] != [s.sha256 for s in base_manifest.shards]
    assert _tree(Path(base.bundle or "")) == base_tree
    [again] = compile_profiles([tmp_path / "ft.yaml"], store=store)
    assert again.status == "hit" and again.bundle == ft.bundle


def test_a_backend_whose_graphs_may_hold_the_weights_compiles_again(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "base")
    write_tiny_llama(tmp_path / "ft", seed=5)
    store = tmp_path / "store"
    [base] = compile_profiles([write_profile(tmp_path / "base.yaml", model="base")], store=store)
    [ft] = compile_profiles([write_profile(tmp_path / "ft.yaml", model="ft")], store=store)
    assert (base.status, ft.status) == ("built", "built") and _compiles(tmp_path) == 2
    assert base.graphs_key != ft.graphs_key  # the pipeline test backend declares nothing: weights in its graphs key
