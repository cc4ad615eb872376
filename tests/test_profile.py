"""Profile loading and validation: good and bad corpora with the exact messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neuronc.errors import ProfileError
from neuronc.profile import auto_buckets, load_profile, parse_profile

FIXTURES = Path(__file__).parent / "fixtures" / "profiles"
GOOD = sorted((FIXTURES / "good").glob("*.yaml"))
BAD = sorted((FIXTURES / "bad").glob("*.yaml"))
SHIPPED = sorted((Path(__file__).parent.parent / "profiles").glob("*.yaml"))


@pytest.mark.parametrize("path", GOOD + SHIPPED, ids=lambda p: p.name)
def test_good_profiles_validate(path: Path) -> None:
    loaded = load_profile(path)
    assert loaded.specs
    for spec in loaded.specs:
        seq = spec.sequence
        assert list(seq.context_buckets) == sorted(set(seq.context_buckets))
        assert seq.context_buckets[-1] <= seq.max_context_length <= seq.max_length
        assert seq.token_buckets[-1] <= seq.max_length


def _error_lines(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load_profile(path.name)
    return [info.value.message, *info.value.details]


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
@pytest.mark.usefixtures("pristine_backends")
def test_bad_profiles_report_exact_messages(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.parent)
    lines = _error_lines(path)
    expected_file = path.with_suffix(".expected")
    if os.environ.get("NEURONC_UPDATE_GOLDEN"):
        expected_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert lines == expected_file.read_text(encoding="utf-8").splitlines()


def test_every_bad_fixture_has_expected_messages() -> None:
    assert BAD
    for path in BAD:
        assert path.with_suffix(".expected").is_file(), path


def test_matrix_expands_one_build_per_combination() -> None:
    loaded = load_profile(FIXTURES / "good" / "matrix-auto-buckets.yaml")
    assert [b.batch_size for b in loaded.specs] == [1, 4, 8]
    assert [b.build_index for b in loaded.specs] == [0, 1, 2]
    assert loaded.specs[1].matrix_values == {"batch_size": 4}
    # NxD Inference's generate_buckets(128, 1024) and (128, 2048)
    assert loaded.specs[0].sequence.context_buckets == (128, 256, 512, 1024)
    assert loaded.specs[0].sequence.token_buckets == (128, 256, 512, 1024, 2048)


def test_two_dimensional_matrix_is_a_cartesian_product() -> None:
    text = """
model: {id: org/m, revision: r}
backend: nxdi
target: inf2
sequence: {max_length: 1024}
matrix:
  tp_degree: [2, 8]
  amp: [bf16, fp16]
"""
    builds = parse_profile(text, "m.yaml").specs
    assert [(b.tp_degree, b.amp) for b in builds] == [(2, "bf16"), (2, "fp16"), (8, "bf16"), (8, "fp16")]


@pytest.mark.parametrize(
    ("minimum", "maximum", "expected"),
    [
        (128, 4096, (128, 256, 512, 1024, 2048, 4096)),
        (128, 3000, (128, 256, 512, 1024, 2048, 3000)),
        (128, 100, (100,)),
        (128, 128, (128,)),
        (100, 300, (64, 128, 300)),
    ],
)
def test_auto_buckets_follow_nxd_inference(minimum: int, maximum: int, expected: tuple[int, ...]) -> None:
    assert auto_buckets(minimum, maximum) == expected


def test_defaults_are_resolved() -> None:
    spec = parse_profile("model: {id: o/m}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n").specs[0]
    assert spec.amp == "fp32"
    assert spec.dtype == "float32"
    assert spec.sequence.max_context_length == 64
    assert spec.sequence.context_buckets == (64,)
    assert spec.weights == "presharded"
    neuron = parse_profile("model: {id: o/m, revision: r}\nbackend: nxdi\ntarget: inf2\nsequence: {max_length: 64}\n")
    assert neuron.specs[0].amp == "bf16"


def _local_model(tmp_path: Path, heads: int = 32, positions: int = 4096) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    config = {"model_type": "llama", "num_attention_heads": heads, "max_position_embeddings": positions}
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_local_model_config_checks(tmp_path: Path) -> None:
    _local_model(tmp_path, heads=12, positions=1024)
    profile = tmp_path / "p.yaml"
    profile.write_text("model: {id: model}\nbackend: nxdi\ntarget: inf2\ntp_degree: 8\nsequence: {max_length: 2048}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(profile)
    assert info.value.details == [
        f"{profile}:4:1: tp_degree: 8 does not divide the model's 12 attention heads (config.json num_attention_heads)",
        f"{profile}:5:12: sequence.max_length: 2048 is above the model's max_position_embeddings 1024",
    ]


def test_local_model_config_checks_pass_when_consistent(tmp_path: Path) -> None:
    _local_model(tmp_path, heads=32, positions=4096)
    profile = tmp_path / "p.yaml"
    profile.write_text("model: {id: model}\nbackend: nxdi\ntarget: inf2\ntp_degree: 8\nsequence: {max_length: 2048}\n")
    loaded = load_profile(profile)
    assert loaded.warnings == []  # a local model needs no pinned revision


def test_unpinned_hub_revision_warns() -> None:
    loaded = parse_profile("model: {id: o/m}\nbackend: nxdi\ntarget: inf2\nsequence: {max_length: 64}\n", "u.yaml")
    assert loaded.warnings == [
        "u.yaml: model.revision is not pinned; the config hash will use the revision resolved at compile time"
    ]


def test_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 300_000 + "\n")
    with pytest.raises(ProfileError, match=r"the limit is 256\.0 KiB"):
        load_profile(big)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such profile"):
        load_profile(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError, match="is a directory"):
        load_profile(tmp_path)


def test_non_utf8_file(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"model: {id: caf\xe9}\n")
    with pytest.raises(ProfileError, match="not UTF-8"):
        load_profile(bad)


def test_a_loaded_build_carries_its_backend_object_down() -> None:
    """The profile loader looks each build's backend up once and pairs it with the spec in a typed
    ``Build`` (DESIGN.md: nothing below looks the backend up by name); the spec itself holds only
    the name, so its value (JSON, hash) never holds the object."""
    from neuronc.backends import get_backend
    from neuronc.build import Build
    from neuronc.spec import BuildSpec

    loaded = load_profile(FIXTURES / "good" / "matrix-auto-buckets.yaml")
    assert loaded.specs == [build.spec for build in loaded.builds]
    for build in loaded.builds:
        assert isinstance(build, Build) and isinstance(build.spec, BuildSpec)
        assert build.backend is get_backend(build.spec.backend) and build.backend.name == build.spec.backend
        # A build with a changed spec (what --revision and tp trials make) keeps its backend.
        assert build.with_spec(build.spec.model_copy(update={"tp_degree": 1})).backend is build.backend
        assert not any(name.startswith("_") for name in build.spec.model_dump())
    # A spec read back across a process boundary has only the name: ``Build.received`` pairs it again.
    crossed = BuildSpec.model_validate(loaded.specs[0].model_dump(mode="json"))
    assert Build.received(crossed) == Build(crossed, loaded.builds[0].backend)


# -- issue 41 item 4: a local model path is resolved once, at load ------------------------------------

RELATIVE_PROFILE = """\
model: {id: ./llama}
backend: optimum-neuron
target: inf2
tp_degree: 2
batch_size: 4
amp: bf16
sequence: {max_length: 256, max_context_length: 128}
weights: presharded
"""


def test_a_relative_local_model_is_absolute_after_load_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _local_model(project, heads=4, positions=512).rename(project / "llama")
    (project / "p.yaml").write_text(RELATIVE_PROFILE)
    monkeypatch.chdir(tmp_path)
    [spec] = load_profile("project/p.yaml").specs
    model = str((project / "llama").resolve())
    assert spec.model.id == model
    assert spec.profile_path == "project/p.yaml"  # how reports name the build: as given
    monkeypatch.chdir(project)
    [same] = load_profile("p.yaml").specs
    assert same.model.id == model and same.normalized() == spec.normalized()
    hub = "meta-llama/Meta-Llama-3.1-8B"
    [remote] = parse_profile(RELATIVE_PROFILE.replace("./llama", hub), "p.yaml", check_model_config=False).specs
    assert remote.model.id == hub  # a Hub id stays as written


def test_an_isolated_neuron_compile_in_another_directory_sees_the_local_model(
    sdk_doubles: Path, tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker runs in the build's work directory: a profile named by a relative path used to make it
    take ``./llama`` for a Hub id (``checkpoint_id: "./llama"`` in neuron_config.json)."""
    import shutil

    from sdk_doubles.fixtures import make_job

    from neuronc.backends import get_backend
    from neuronc.backends.neuron.files import is_hub_id

    project = tmp_path / "project"
    shutil.copytree(tiny_llama, project / "llama")
    (project / "p.yaml").write_text(RELATIVE_PROFILE)
    monkeypatch.chdir(tmp_path)
    [spec] = load_profile("project/p.yaml").specs
    job = make_job(spec, project / "llama", tmp_path)
    get_backend("optimum-neuron").compile(job)
    neuron_config = json.loads((job.artifacts_dir / "neuron_config.json").read_text())
    assert neuron_config["checkpoint_id"] is None
    monkeypatch.chdir(job.work_dir)
    assert not is_hub_id(spec)
