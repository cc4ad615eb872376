"""The weights' content is in every key: a fine-tune, or a retrain in place, is another bundle key;
digests are kept by file identity so an unchanged checkpoint costs a stat; the graphs key leaves the
weights out only where the backend says its graphs do not hold them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from _pipeline import fake_hub_cache, write_profile, write_tiny_llama
from click.testing import CliRunner

from neuronc.backends import backend_names, get_backend
from neuronc.backends.weights_binding import WeightsBinding, weights_binding_of
from neuronc.cli import app
from neuronc.keys import GRAPHS_FIELDS, ConfigKey, config_key, derive_keys, diff_inputs, spec_model_dir
from neuronc.model.digests import DigestIndex, digest_index_dir, file_digests, file_identity
from neuronc.pipeline.context import resolve_build
from neuronc.profile import load_profile


def _perturb(model: Path) -> None:
    """Change every tensor value of ``model.safetensors`` (same names, shapes, dtypes, size): a fine-tune."""
    path = model / "model.safetensors"
    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")
    for i in range(start, len(data), 4):
        data[i] ^= 0x01  # the lowest mantissa bit of each float32: another value, the same layout
    path.write_bytes(bytes(data))


def _key(profile: Path, *, embeds: bool | None = False) -> ConfigKey:
    spec = load_profile(profile).specs[0]
    return config_key(
        spec,
        flags_mode=get_backend(spec.backend).toolchain.compiler_flags_mode,
        model_dir=spec_model_dir(spec),
        revision=None,
        embeds_weights=embeds,
    )


@pytest.fixture
def base_and_ft(tmp_path: Path) -> tuple[Path, Path]:
    write_tiny_llama(tmp_path / "base")
    write_tiny_llama(tmp_path / "ft")
    _perturb(tmp_path / "ft")
    base = write_profile(tmp_path / "base.yaml", model="base", backend="inductor")
    ft = write_profile(tmp_path / "ft.yaml", model="ft", backend="inductor")
    return base, ft


def test_a_fine_tune_is_another_bundle_with_the_same_graphs(base_and_ft: tuple[Path, Path]) -> None:
    base, ft = (_key(p) for p in base_and_ft)
    assert base.hash != ft.hash and base.weights_hash != ft.weights_hash
    assert base.graphs_hash == ft.graphs_hash  # the architecture, shapes and options are the same
    assert [d["field"] for d in diff_inputs(base.inputs, ft.inputs)] == ["weights"]
    digest = hashlib.sha256((base_and_ft[1].parent / "ft" / "model.safetensors").read_bytes()).hexdigest()
    assert ft.inputs["weights"]["local_files"]["model.safetensors"] == digest


def test_where_graphs_may_hold_the_weights_the_graphs_key_covers_them(base_and_ft: tuple[Path, Path]) -> None:
    for embeds in (True, None):
        base, ft = (_key(p, embeds=embeds) for p in base_and_ft)
        assert base.graphs_hash != ft.graphs_hash
    inputs = _key(base_and_ft[0]).inputs
    without = {k: v for k, v in inputs.items() if k in GRAPHS_FIELDS}
    assert derive_keys(inputs, False)[1] == derive_keys({**without, "weights": {"x": 1}}, False)[1]


def test_a_retrain_in_place_is_a_new_key(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml", backend="inductor")
    first = _key(profile)
    weights = tmp_path / "model" / "model.safetensors"
    stat = weights.stat()
    _perturb(tmp_path / "model")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime (ctime moves)
    second = _key(profile)
    assert second.hash != first.hash and second.graphs_hash == first.graphs_hash
    assert _key(profile).hash == second.hash


def test_digests_are_kept_by_file_identity(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"x" * 1000)
    index = DigestIndex()
    assert index.root == digest_index_dir()
    real = hashlib.sha256(b"x" * 1000).hexdigest()
    assert file_digests([path]) == [real]
    assert index.get(path.stat()) == real
    # An unchanged file is not read again: what the index says is the answer (a planted entry shows it).
    index.put(path.stat(), "0" * 64)
    assert file_digests([path]) == ["0" * 64]
    path.write_bytes(b"y" * 1000)  # rewritten: another identity, hashed again
    assert file_digests([path]) == [hashlib.sha256(b"y" * 1000).hexdigest()]
    # A damaged entry is hashed again, not trusted.
    (index.root / file_identity(path.stat())[:2] / file_identity(path.stat())).write_text("junk")
    assert file_digests([path]) == [hashlib.sha256(b"y" * 1000).hexdigest()]


def test_hub_cache_blobs_are_their_own_digests(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "src")
    root = fake_hub_cache(tmp_path / "hf", "acme/tiny", "a" * 40, model)
    link = root / "snapshots" / ("a" * 40) / "model.safetensors"
    blob_name = Path(os.readlink(link)).name
    assert file_digests([link], index=DigestIndex(tmp_path / "unused")) == [blob_name]
    assert not (tmp_path / "unused").exists()  # read from the name, nothing hashed or kept


def test_a_hub_model_is_keyed_by_its_commit_and_its_cached_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    fake_hub_cache(tmp_path / "hf", "acme/tiny", "b" * 40, write_tiny_llama(tmp_path / "src"))
    profile = write_profile(tmp_path / "p.yaml", model="acme/tiny", backend="inductor")
    ctx = resolve_build(load_profile(profile).builds[0], strict=False)
    key = ctx.config
    assert key.inputs["weights"] == {"hub_id": "acme/tiny", "revision": "b" * 40}
    assert key.inputs["model.architecture"]["config"]["hidden_size"] == 8
    local = write_profile(tmp_path / "l.yaml", model="src", backend="inductor")
    assert _key(local).graphs_hash == key.graphs_hash  # the same architecture: the same graphs


def test_every_backend_declares_its_weights_binding_with_a_source() -> None:
    for backend in map(get_backend, backend_names()):
        binding = weights_binding_of(backend)
        assert isinstance(binding, WeightsBinding) and binding.source
        assert type(backend).__dict__.get("weights_binding") is binding, backend.name
    assert weights_binding_of(get_backend("torch-neuronx")).embeds is True
    assert weights_binding_of(get_backend("inductor")).embeds is False
    assert weights_binding_of(object()).embeds is None


def test_hash_diff_names_weights(base_and_ft: tuple[Path, Path]) -> None:
    result = CliRunner().invoke(app, ["hash", "--diff", *map(str, base_and_ft), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["field"] for d in data["comparisons"][0]["differences"]] == ["weights"]


BACKEND_TARGETS = {
    "inductor": "cpu",
    "nxdi": "inf2",
    "optimum-neuron": "inf2",
    "transformers-neuronx": "inf2",
    "torch-neuronx": "inf2",
    "vllm-neuron": "trn2",
}


@pytest.mark.parametrize("backend", sorted(BACKEND_TARGETS))
def test_rebind_is_refused_where_graphs_may_hold_the_weights(backend: str, tmp_path: Path) -> None:
    """Per backend: a fine-tune shares the base's graphs key only where the backend's graphs keep the
    weights apart; rebind is refused where they embed them (or no source says), and where the backend
    writes its weights in its own format (neuronc cannot stage them without its compile)."""
    from neuronc.pipeline.rebind import rebind_refusal

    assert set(BACKEND_TARGETS) == set(backend_names())
    write_tiny_llama(tmp_path / "base")
    write_tiny_llama(tmp_path / "ft")
    _perturb(tmp_path / "ft")
    contexts = []
    for name in ("base", "ft"):
        profile = tmp_path / f"{name}.yaml"
        text = f"model: {{id: {name}}}\nbackend: {backend}\ntarget: {BACKEND_TARGETS[backend]}\nsequence: {{max_length: 64}}\n"
        profile.write_text(text)
        contexts.append(resolve_build(load_profile(profile).builds[0], strict=False))
    base, ft = (c.config for c in contexts)
    binding = weights_binding_of(contexts[0].backend)
    assert base.embeds_weights is binding.embeds and base.hash != ft.hash
    refusal = rebind_refusal(contexts[1])
    if binding.embeds is False:
        assert base.graphs_hash == ft.graphs_hash
    else:
        assert base.graphs_hash != ft.graphs_hash  # the weights are part of its graphs key
        assert refusal is not None and binding.source in refusal
    if backend == "inductor":
        assert refusal is None
    else:
        assert refusal is not None


def test_hash_prints_the_graphs_and_weights_keys(base_and_ft: tuple[Path, Path]) -> None:
    result = CliRunner().invoke(app, ["hash", *map(str, base_and_ft), "--json"])
    assert result.exit_code == 0, result.output
    base, ft = json.loads(result.stdout)["hashes"]
    assert base["graphs_key"] == ft["graphs_key"] and base["weights_key"] != ft["weights_key"]
    assert base["config_hash"] != ft["config_hash"]
