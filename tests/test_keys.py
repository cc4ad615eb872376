"""Config hash and toolchain key: stable under cosmetic changes, moved by any compile-relevant one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronc.backends import get_backend
from neuronc.keys import (
    HASHED_FIELDS,
    ConfigKey,
    canonical_json,
    config_key,
    diff_inputs,
    effective_compiler_flags,
    spec_model_dir,
    toolchain_key,
    toolchain_label,
)
from neuronc.profile import parse_profile
from neuronc.spec import BuildSpec

BASE = """\
name: first
description: a profile
model:
  id: org/model
  revision: abc123
backend: transformers-neuronx
target: inf2
tp_degree: 8
batch_size: 4
amp: bf16
sequence:
  max_length: 4096
  context_buckets: [1024, 2048]
  token_buckets: [4096]
compiler:
  flags: ["-O1"]
"""


def _key(spec: BuildSpec, environ: dict[str, str] | None = None) -> ConfigKey:
    """``config_key`` as the pipeline calls it, the revision taken as written (these tests pin none)."""
    backend = get_backend(spec.backend)
    return config_key(
        spec,
        flags_mode=backend.toolchain.compiler_flags_mode,
        model_dir=spec_model_dir(spec),
        revision=spec.model.revision,
        environ=environ or {},
    )


def _hash(text: str, filename: str = "a.yaml", environ: dict[str, str] | None = None) -> str:
    return _key(parse_profile(text, filename).specs[0], environ).hash


def test_hash_is_full_sha256() -> None:
    digest = _hash(BASE)
    assert len(digest) == 64
    int(digest, 16)


def test_cosmetic_changes_keep_the_hash() -> None:
    reordered = """\
# a comment
backend: transformers-neuronx
sequence: {token_buckets: [4096], context_buckets: [1024, 2048], max_length: 4096}
compiler: {flags: ["-O1"]}
amp: bf16
batch_size: 4
tp_degree: 8
target: inf2
model: {revision: abc123, id: org/model}
name: renamed
description: something else entirely
"""
    assert _hash(BASE) == _hash(reordered, filename="elsewhere/other-name.yaml")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tp_degree: 8", "tp_degree: 4"),
        ("batch_size: 4", "batch_size: 8"),
        ("amp: bf16", "amp: fp16"),
        ("max_length: 4096", "max_length: 8192"),
        ("[1024, 2048]", "[512, 2048]"),
        ("token_buckets: [4096]", "token_buckets: [2048, 4096]"),
        ('flags: ["-O1"]', 'flags: ["-O2"]'),
        ("revision: abc123", "revision: def456"),
        ("id: org/model", "id: org/other"),
        ("target: inf2", "target: trn1"),
        # nxdi applies no compiler flags: the profile drops them with the backend.
        (
            "backend: transformers-neuronx\n" + BASE.split("backend: transformers-neuronx\n")[1],
            "backend: nxdi\n"
            + BASE.split("backend: transformers-neuronx\n")[1].replace('compiler:\n  flags: ["-O1"]\n', ""),
        ),
    ],
)
def test_compile_relevant_changes_move_the_hash(old: str, new: str) -> None:
    assert old in BASE
    assert _hash(BASE) != _hash(BASE.replace(old, new))


def test_neuron_cc_flags_are_folded_in_but_cache_flags_are_not() -> None:
    plain = _hash(BASE)
    assert _hash(BASE, environ={"NEURON_CC_FLAGS": "--enable-saturate-infinity"}) != plain
    assert _hash(BASE, environ={"NEURON_CC_FLAGS": "--cache_dir=/tmp/x --retry_failed_compilation"}) == plain
    spec = parse_profile(BASE, "a.yaml").specs[0]
    mode = get_backend(spec.backend).toolchain.compiler_flags_mode
    assert effective_compiler_flags(spec, mode, {"NEURON_CC_FLAGS": "-O2 --cache_dir=/x"}) == ["-O1", "-O2"]


def test_neuron_cc_flags_do_not_touch_the_cpu_backend() -> None:
    cpu = "model: {id: org/m}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n"
    assert _hash(cpu) == _hash(cpu, environ={"NEURON_CC_FLAGS": "-O3"})


def test_each_matrix_build_has_its_own_hash() -> None:
    text = BASE + "matrix:\n  batch_size: [1, 2, 4]\n"
    hashes = [_key(s).hash for s in parse_profile(text, "m.yaml").specs]
    assert len(set(hashes)) == 3
    assert hashes[2] == _hash(BASE)  # batch 4 in the matrix equals batch 4 written out


def test_hashed_fields_are_recorded() -> None:
    key = _key(parse_profile(BASE, "a.yaml").specs[0])
    # "environment" is hashed only where the backend names variables that shape its output (none here).
    assert key.fields == tuple(f for f in HASHED_FIELDS if f != "environment")
    assert set(key.inputs) == set(key.fields)
    assert "name" not in key.inputs and "description" not in key.inputs


VLLM_NEURON = """\
model:
  id: org/model
backend: vllm-neuron
target: trn2
sdk: '2.32'
tp_degree: 2
batch_size: 4
amp: bf16
sequence:
  max_length: 2048
  context_buckets: [512, 1024]
  token_buckets: [2048]
"""
KV = "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION"  # facts.KV_SIZING_ENV[0]


def _resolved(text: str, environ: dict[str, str]) -> ConfigKey:
    """The key as every command works it out (``resolve_build``), under ``environ`` instead of os.environ."""
    from neuronc.pipeline.context import resolve_build

    build = parse_profile(text, "v.yaml").builds[0]
    return resolve_build(build, strict=False, environ=environ, commit="c" * 40).config


def test_the_variables_a_compile_records_because_they_shape_the_graphs_are_hashed() -> None:
    """Issue 34 item 5: the KV sizing variables (and every other VLLM_NEURON_*/NEURON_* variable the
    vllm-neuron compile records and replays) change the key, so a compile under another value is a miss;
    variables that shape nothing (placement, worker count, anything else) leave it alone."""
    plain = {"HOME": "/home/a", "PATH": "/usr/bin"}
    base = _resolved(VLLM_NEURON, plain)
    assert "environment" not in base.inputs and "environment" not in base.fields  # unset: the key as before
    quarter = _resolved(VLLM_NEURON, {**plain, KV: "0.25"})
    half = _resolved(VLLM_NEURON, {**plain, KV: "0.5"})
    assert len({base.hash, quarter.hash, half.hash}) == 3
    assert quarter.inputs["environment"] == {KV: "0.25"} and "environment" in quarter.fields
    assert diff_inputs(quarter.inputs, half.inputs) == [{"field": "environment", "a": {KV: "0.25"}, "b": {KV: "0.5"}}]
    for shaping in ({"VLLM_NEURON_MIN_KV_BUDGET_GIB": "4"}, {"NEURON_CC_FLAGS": "-O1"}, {"VLLM_NEURON_BACKEND": "x"}):
        assert _resolved(VLLM_NEURON, {**plain, **shaping}).hash != base.hash, shaping
    unrelated = {
        "HOME": "/home/b",
        "LANG": "C.UTF-8",
        "NEURON_RT_VISIBLE_CORES": "0-3",  # the serving host's placement, never recorded
        "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS": "8",  # the 0.24 plugin's worker count (SDK 2.32)
        "NEURON_PLATFORM_TARGET_OVERRIDE": "trn3",  # neuronc sets it from the profile's target
        "NEURON_COMPILE_CACHE_URL": "/elsewhere/neuron-compile-cache",  # a cache's location, not its content
    }
    assert _resolved(VLLM_NEURON, {**plain, **unrelated}).hash == base.hash
    # Through the backend, not by name in the core: a backend that reads no such variable ignores it.
    assert _resolved(BASE, {KV: "0.25"}).hash == _resolved(BASE, {}).hash


def test_diff_names_the_fields() -> None:
    a = _key(parse_profile(BASE, "a.yaml").specs[0]).inputs
    b = _key(parse_profile(BASE.replace("tp_degree: 8", "tp_degree: 2"), "b.yaml").specs[0]).inputs
    assert diff_inputs(a, b) == [{"field": "tp_degree", "a": 8, "b": 2}]
    assert diff_inputs(a, a) == []


def test_local_model_identity_follows_config_and_headers(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 4}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    profile = tmp_path / "p.yaml"
    profile.write_text("model: {id: m}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n")
    from neuronc.profile import load_profile

    first = _key(load_profile(profile).specs[0]).hash
    assert _key(load_profile(profile).specs[0]).hash == first
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 8}))
    assert _key(load_profile(profile).specs[0]).hash != first


def test_toolchain_key_and_label() -> None:
    versions = {"neuronc": "0.1.0", "torch": "2.13.0", "cpu_isa": "avx2"}
    assert toolchain_key(versions) == toolchain_key(dict(reversed(list(versions.items()))))
    assert toolchain_key(versions) != toolchain_key({**versions, "cpu_isa": "avx512"})
    label = toolchain_label("inductor", "torch", versions)
    assert toolchain_label("inductor", None, versions).startswith("inductor-")
    assert label.startswith("inductor-torch2.13.0-")
    assert len(label.rsplit("-", 1)[1]) == 8


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_canonical_json_is_stable_under_key_order(value: object) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    if isinstance(value, dict):
        assert canonical_json(dict(reversed(list(value.items())))) == text


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8, 24]),
    batch=st.integers(1, 64),
    buckets=st.lists(st.integers(1, 4096), min_size=1, max_size=4, unique=True).map(sorted),
)
def test_hash_is_a_function_of_the_inputs(tp: int, batch: int, buckets: list[int]) -> None:
    text = (
        f"model: {{id: o/m, revision: r}}\nbackend: nxdi\ntarget: inf2\ntp_degree: {tp}\n"
        f"batch_size: {batch}\nsequence: {{max_length: 4096, context_buckets: {buckets}}}\n"
    )
    assert _hash(text) == _hash(text.replace("backend: nxdi\n", "# moved\nbackend: nxdi\n"))
    other = text.replace(f"batch_size: {batch}", f"batch_size: {batch + 1}")
    assert _hash(text) != _hash(other)
