"""The support matrix (neuronc.backends.support): its rows, their sources, and what validate refuses by it.

The rows are data read from the SDK's manifest, the DLC repository and the release notes (each cites
its source by key); these tests hold the table to its own rules and check that `neuronc validate`
refuses a combination no release supports with the last release that did named.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.backends.support import (
    Serves,
    detect_release,
    detect_releases,
    find_release,
    last_supporting,
    matching,
    releases,
    resolve,
    span,
)
from neuronc.backends.support_data import SOURCES
from neuronc.cli import app

# Every Neuron SDK release from the last with transformers-neuronx to today's (issue 21).
EXPECTED_RELEASES = [
    "2.26.1",
    "2.27.0",
    "2.27.1",
    "2.28.0",
    "2.28.1",
    "2.29.0",
    "2.29.1",
    "2.30.0",
    "2.31.0",
    "2.31.1",
    "2.32.0",
    "2.33.0",
    "2.33.1",
]


def test_every_release_from_2_26_1_to_2_33_1_has_one_row_oldest_first() -> None:
    assert [r.version for r in releases()] == EXPECTED_RELEASES


def test_every_row_image_and_backend_cites_a_known_source() -> None:
    for release in releases():
        assert release.sources, release.version
        cited = list(release.sources)
        cited += [s for image in release.images for s in image.sources]
        cited += [s for entry in release.backends.values() for s in entry.sources]
        unknown = [s for s in cited if s not in SOURCES]
        assert not unknown, (release.version, unknown)


def test_an_image_ships_the_versions_its_release_lists() -> None:
    for release in releases():
        for image in release.images:
            for package, version in image.packages.items():
                if package in image.off_release:
                    # The Dockerfile wins over the manifest: another release's build, said in the row's note.
                    assert any(version in r.packages.get(package, ()) for r in releases()), (image.tag, package)
                    assert version in release.note, (release.version, package)
                elif package in release.packages:
                    assert version in release.packages[package], (release.version, image.tag, package)
            if image.plugin:
                assert image.tag.startswith(image.plugin if image.serves is Serves.VLLM_NEURON else image.vllm or "")
            assert f"sdk{release.version}" in image.tag, (release.version, image.tag)


def test_the_end_of_each_stack_is_where_the_newest_source_puts_it() -> None:
    # transformers-neuronx: end of support from 2.26, no package after 2.26.1.
    assert span("transformers-neuronx", "inf2") == "2.26.1"
    # NxD Inference: not shipped from 2.32; Inf2/Trn1 kept in maintenance at 2.31 (the 2026-10-16
    # end-of-support announcement, newer than the 2.29 release note that said Trn2 and newer only).
    assert span("nxdi", "trn2") == "2.26.1–2.31.1"
    assert span("nxdi", "inf2") == "2.26.1–2.31.1"
    assert span("nxdi", "trn3") == "2.27.0–2.31.1"
    # The plugin's torch.compile path: Trn2/Trn3 from 2.31.
    assert span("vllm-neuron", "trn2") == "2.31.0–2.33.1"
    assert span("vllm-neuron", "inf2") == "none"
    last = last_supporting("torch-neuronx", "inf2")
    assert last is not None and last.version == "2.31.1"


def test_an_sdk_value_names_the_newest_patch_of_its_minor() -> None:
    assert [r.version for r in matching("2.31")] == ["2.31.0", "2.31.1"]
    resolution = resolve("nxdi", "trn2", "2.31", installed=None)
    assert resolution.release is not None and resolution.release.version == "2.31.1"
    assert resolution.problem is None and resolution.how == "profile"


def test_the_installed_toolchain_is_recognized_by_its_versions() -> None:
    release = find_release("2.29.1")
    assert release is not None
    installed = {name: versions[0] + "+abcdef" for name, versions in release.packages.items()}
    found = detect_release(installed)
    assert found is not None and found.version == "2.29.1"
    assert detect_release({"neuronx-cc": "2.0.0.0"}) is None
    # A compiler from 2.29.0 with 2.29.1's torch-neuronx is no release.
    mixed = {**installed, "neuronx-cc": "2.24.5133.0"}
    assert detect_release(mixed) is None


NXDI_PROFILE = """
model: {{id: ./model}}
backend: {backend}
target: {target}
tp_degree: 2
sequence: {{max_length: 256}}
{extra}
"""


def validate(tmp_path: Path, tiny_llama: Path, backend: str, target: str, extra: str) -> tuple[int, dict[str, object]]:
    import shutil

    if not (tmp_path / "model").exists():
        shutil.copytree(tiny_llama, tmp_path / "model")
    profile = tmp_path / "p.yaml"
    profile.write_text(textwrap.dedent(NXDI_PROFILE).format(backend=backend, target=target, extra=extra))
    out.reset()
    result = CliRunner().invoke(app, ["validate", str(profile), "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize(
    ("backend", "target", "extra", "expected"),
    [
        (
            "transformers-neuronx",
            "inf2",
            "sdk: '2.27'",
            "the transformers-neuronx backend does not support inf2 in Neuron SDK 2.27.1 (sdk:); "
            "the last release that does is SDK 2.26.1",
        ),
        (
            "nxdi",
            "trn2",
            "sdk: '2.32.0'",
            "the nxdi backend does not support trn2 in Neuron SDK 2.32.0 (sdk:); the last release that does is SDK "
            "2.31.1",
        ),
        (
            "vllm-neuron",
            "inf2",
            "",
            "no Neuron SDK release supports the vllm-neuron backend on inf2; for inf2 use nxdi (SDK 2.26.1–2.31.1)",
        ),
    ],
)
def test_validate_refuses_an_unsupported_combination_naming_the_last_good_release(
    tmp_path: Path, tiny_llama: Path, backend: str, target: str, extra: str, expected: str
) -> None:
    code, data = validate(tmp_path, tiny_llama, backend, target, extra)
    assert code == 2, data
    text = json.dumps(data, ensure_ascii=False)
    assert expected in text, text
    assert "p.yaml" in text  # the file is named, with the line of the field


def test_validate_accepts_a_supported_release(tmp_path: Path, tiny_llama: Path) -> None:
    code, data = validate(tmp_path, tiny_llama, "nxdi", "trn2", "sdk: '2.31'")
    assert code == 0, data
    [build] = data["profiles"][0]["builds"]  # type: ignore[index]
    assert build["neuron_sdk"]["release"] == "2.31.1" and build["neuron_sdk"]["support"] == "maintenance"
    assert build["neuron_sdk"]["chosen_by"] == "profile"


def test_backends_lists_the_releases_per_target(tmp_path: Path) -> None:
    out.reset()
    result = CliRunner().invoke(app, ["backends", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["backends"]}
    assert rows["vllm-neuron"]["sdk_releases"] == {"trn2": "2.31.0–2.33.1", "trn3": "2.31.0–2.33.1"}
    assert rows["transformers-neuronx"]["sdk_releases"] == {"inf2": "2.26.1", "trn1": "2.26.1"}
    assert rows["nxdi"]["sdk_releases"]["trn2"] == "2.26.1–2.31.1"
    assert rows["inductor"]["sdk_releases"] == {}


def test_a_patch_release_that_changed_no_package_is_told_apart_by_its_sources() -> None:
    # 2.28.1 ships 2.28.0's packages (both read from their manifests): the newer is the answer, and
    # both agree. 2.33.1 (its release notes, issue 28) rebuilt libtorch-neuronx-lite, whose 2.33.0
    # version no source gives: a host with 2.33.1's lite is 2.33.1; one with another lite is 2.33.0.
    other_lite = {"libtorch-neuronx-lite": "2.13.0.1.0.9999"}
    for version, more, agreeing, answer in (
        ("2.28.0", {}, ["2.28.0", "2.28.1"], "2.28.1"),
        ("2.33.1", {}, ["2.33.0", "2.33.1"], "2.33.1"),
        ("2.33.1", other_lite, ["2.33.0"], "2.33.0"),
    ):
        release = find_release(version)
        assert release is not None
        installed = {**{name: versions[0] for name, versions in release.packages.items()}, **more}
        assert [r.version for r in detect_releases(installed)] == agreeing
        found = detect_release(installed)
        assert found is not None and found.version == answer
