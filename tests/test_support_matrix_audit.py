"""The support matrix as its sources have it (issue 28, items 2-5): 2.33.1 from its release notes,
the torch-neuronx every NxDI image pins, one Trn3 rule, TorchNeuron under the torch-neuronx name,
what the vllm-neuron images pin, and what validate, plan and deploy say about what no source supports.

Each row cites its source key (``support_data.SOURCES``); the facts are the ones those sources give.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.backends.support import (
    PINNED,
    Serves,
    find_release,
    image_pins,
    is_torchneuron,
    pin_mismatches,
    releases,
    resolve,
)
from neuronc.cli import app

ROOT = Path(__file__).resolve().parents[1]
LITE = "libtorch-neuronx-lite"


def test_2_33_1_is_read_from_its_release_notes_and_has_no_image() -> None:
    release = find_release("2.33.1")
    assert release is not None and release.verified and "DOCS@2.33.1" in release.sources
    assert release.date == "2026-11-11"
    assert release.packages[LITE] == ("2.13.0.1.0.4089", "2.12.0.1.0.4089", "2.11.0.1.0.4089")
    assert release.packages["libneuronxla"] == ("3.0.12293.0",)
    assert "runtime 2.35.33.0" in release.note
    assert release.images == ()


def test_every_nxdi_image_records_the_torch_neuronx_its_dockerfile_pins() -> None:
    rows = {(r.version, i.vllm): i for r in releases() for i in r.images if i.serves in (Serves.NXDI, Serves.VLLM_V0)}
    assert all("torch-neuronx" in i.packages for i in rows.values()), [
        k for k, i in rows.items() if "torch-neuronx" not in i.packages
    ]
    # DLC tag 2.27.0 vllm/inference/0.11.0/Dockerfile.neuronx: NEURONX_FRAMEWORK_VERSION=2.8.0.2.10.16998,
    # 2.26.1's build, which 2.27.0's manifest does not list (the Dockerfile wins, and the row says so).
    image = rows[("2.27.0", "0.11.0")]
    assert image.packages["torch-neuronx"] == "2.8.0.2.10.16998" and image.off_release == ("torch-neuronx",)
    assert image_pins(image)["torch-neuronx"] == "2.8.0.2.10.16998"
    expected = {
        ("2.28.0", "0.13.0"): "2.9.0.2.12.22436",
        ("2.29.0", "0.16.0"): "2.9.0.2.13.24727",
        ("2.29.1", "0.16.0"): "2.9.0.2.13.26312",
        ("2.30.0", "0.16.0"): "2.9.0.2.14.27725",
        ("2.31.0", "0.16.0"): "2.9.0.2.15.32035",
        ("2.31.1", "0.16.0"): "2.9.0.2.15.32035",
    }
    assert {k: rows[k].packages["torch-neuronx"] for k in expected} == expected


def test_an_nxdi_bundle_of_2_27_0_traced_with_another_torch_neuronx_gets_no_image() -> None:
    from neuronc.deploy._releases import nxdi_fits

    image = find_release("2.27.0").images_serving(Serves.NXDI)[0]  # type: ignore[union-attr]
    toolchain = {p: image.packages[p] for p in ("neuronx-cc", "neuronx-distributed-inference")}
    assert nxdi_fits(image, {**toolchain, "torch-neuronx": "2.8.0.2.10.16998+e9bf8a50"})
    assert not nxdi_fits(image, {**toolchain, "torch-neuronx": "2.9.0.2.11.19912"})  # 2.27.0's manifest build


def test_trn3_is_one_rule_for_nxdi_and_torch_neuronx_from_2_27_0() -> None:
    for version in ("2.27.0", "2.27.1", "2.28.0", "2.28.1"):
        release = find_release(version)
        assert release is not None
        for backend in ("nxdi", "torch-neuronx"):
            assert release.supports(backend, "trn3"), (version, backend)
            assert "RN@2.27.0" in release.backends[backend].sources, (version, backend)
    assert not find_release("2.26.1").supports("torch-neuronx", "trn3")  # type: ignore[union-attr]


def test_torchneuron_is_told_from_the_xla_torch_neuronx() -> None:
    for version in ("2.13.3.0", "2.14.3.0", "2.14.3.0.1", "2.10.0"):
        assert is_torchneuron(version), version
    for version in ("2.9.0.2.15.32035", "2.9.0.2.15.32035+de43f57c", "2.8.0.2.10.16998", "1.13.1.1.13.1", None):
        assert not is_torchneuron(version), version
    release = find_release("2.33.0")
    assert release is not None and release.torchneuron == ("2.14.3.0", "2.13.3.0")
    assert release.packages["torch-neuronx"] == ("2.9.0.2.15.32035",)  # the XLA build, still listed


@pytest.mark.parametrize(("version", "available"), [("2.13.3.0", False), ("2.9.0.2.15.32035", True)])
def test_backends_does_not_call_the_xla_torch_neuronx_available_on_a_torchneuron_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, available: bool
) -> None:
    from sdk_doubles import SITE, forget_doubles, write_dist_info

    dists = write_dist_info(tmp_path / "dists", {"torch-neuronx": version, "neuronx-cc": "2.28.7631.0"})
    monkeypatch.syspath_prepend(str(dists))
    monkeypatch.syspath_prepend(str(SITE))
    forget_doubles()
    try:
        out.reset()
        result = CliRunner().invoke(app, ["backends", "--json"])
    finally:
        forget_doubles()
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout)["backends"] if r["name"] == "torch-neuronx")
    assert row["available"] is available, row
    if not available:
        assert "TorchNeuron, the native PyTorch backend, not the XLA torch-neuronx" in row["reason"]


def test_the_vllm_neuron_images_record_what_each_dlc_pins() -> None:
    images = {r.version: i for r in releases() for i in r.images_serving(Serves.VLLM_NEURON)}
    assert PINNED[Serves.VLLM_NEURON] == ("neuronx-cc", "nki", LITE)
    assert {v: image_pins(i) for v, i in images.items()} == {
        "2.31.0": {"neuronx-cc": "2.26.6360.0", "nki": "0.5.0", LITE: "2.11.0.1.0.696"},
        "2.31.1": {"neuronx-cc": "2.26.6360.0", "nki": "0.5.0", LITE: "2.11.0.1.0.696"},
        "2.32.0": {"neuronx-cc": "2.27.5334.0", "nki": "0.6.0", LITE: "2.11.0.1.0.1284"},
        "2.33.0": {"neuronx-cc": "2.28.7631.0", "nki": "0.7.0", LITE: None},  # no source names it
    }
    # No Dockerfile pins torch (vLLM brings it): no row records one it cannot cite.
    assert not [v for v, i in images.items() if "torch" in i.packages]
    image = images["2.32.0"]
    same = dict(image_pins(image))
    assert pin_mismatches(image, {**same, "torch": "2.12.0", "vllm": "0.24.1", "vllm-neuron": "0.24.9"}) == []
    assert pin_mismatches(image, {**same, LITE: "2.12.0.1.0.1284"}) == [(LITE, "2.11.0.1.0.1284", "2.12.0.1.0.1284")]
    # A pin no source names: deploy cannot show a bundle agrees with it; a compile in the image skips it.
    assert pin_mismatches(images["2.33.0"], image_pins(images["2.33.0"])) == [(LITE, None, None)]
    assert pin_mismatches(images["2.33.0"], {**image_pins(images["2.33.0"]), LITE: "x"}, strict=False) == []


def test_the_compile_checks_what_the_image_pins_and_records_the_rest() -> None:
    from neuronc.backends.vllm_neuron.build import RunnerPlan, _check_image_versions
    from neuronc.errors import EnvironmentIncompatibleError

    release = find_release("2.32.0")
    assert release is not None
    image = release.images_serving(Serves.VLLM_NEURON)[0]
    plan = RunnerPlan("docker", release, "0.24.0.1.1.0", None, image, image.reference)
    found = {**image.packages, "torch": "2.12.0", "vllm": "0.24.1", "vllm-neuron": "0.24.0.1.1.1"}
    _check_image_versions(plan, found)  # torch and vLLM as found: recorded, not required
    with pytest.raises(EnvironmentIncompatibleError) as caught:
        _check_image_versions(plan, {**found, LITE: "2.12.0.1.0.1284"})
    assert f"{LITE}: expected 2.11.0.1.0.1284, the image has 2.12.0.1.0.1284" in caught.value.details


# -- validate and plan ----------------------------------------------------------------------------------

PROFILE = """\
model: {{id: ./model}}
backend: {backend}
target: {target}
tp_degree: 2
sequence: {{max_length: 512, context_buckets: [256, 512], token_buckets: [512]}}
{extra}
"""


def _run(tmp_path: Path, tiny_llama: Path, command: str, backend: str, target: str, extra: str = "") -> Any:
    if not (tmp_path / "model").exists():
        shutil.copytree(tiny_llama, tmp_path / "model")
    profile = tmp_path / "p.yaml"
    profile.write_text(textwrap.dedent(PROFILE).format(backend=backend, target=target, extra=extra))
    out.reset()
    result = CliRunner().invoke(app, [command, str(profile), "--json"])
    return result.exit_code, json.loads(result.stdout)


def _sdk(data: Any) -> Any:
    [build] = data["profiles"][0]["builds"]
    return build["neuron_sdk"]


def test_validate_refuses_lnc_1_for_vllm_neuron_at_its_position(tmp_path: Path, tiny_llama: Path) -> None:
    code, data = _run(tmp_path, tiny_llama, "validate", "vllm-neuron", "trn2", "options: {logical_nc_config: 1}")
    assert code == 2, data
    text = json.dumps(data)
    assert "p.yaml:6:" in text and "options.logical_nc_config" in text, text
    assert "LNC 1 is not supported by the vllm-neuron backend (it compiles for LNC 2)" in text
    assert "passes no --lnc" in text
    code, data = _run(tmp_path, tiny_llama, "validate", "vllm-neuron", "trn2", "options: {logical_nc_config: 2}")
    assert code == 0, data


def test_vllm_neuron_without_sdk_is_2_32_0_and_2_33_only_when_named(tmp_path: Path, tiny_llama: Path) -> None:
    code, data = _run(tmp_path, tiny_llama, "validate", "vllm-neuron", "trn2")
    assert code == 0, data
    sdk = _sdk(data)
    assert sdk["release"] == "2.32.0" and sdk["chosen_by"] == "newest"
    assert "SDK 2.33.0–2.33.1 only when sdk: names it" in sdk["notes"][0]
    for command in ("validate", "plan"):
        code, data = _run(tmp_path, tiny_llama, command, "vllm-neuron", "trn2", "sdk: '2.33'")
        assert code == 0, data
        text = json.dumps(data)
        assert "2.33.1" in text and "CPU compile on it is unverified" in text, (command, text)


def test_nxdi_on_inf2_and_trn1_is_2_28_without_sdk_and_2_29_to_2_31_only_when_named(
    tmp_path: Path, tiny_llama: Path
) -> None:
    for target in ("inf2", "trn1"):
        code, data = _run(tmp_path, tiny_llama, "validate", "nxdi", target)
        assert code == 0, data
        assert _sdk(data)["release"] == "2.28.1", target
        code, data = _run(tmp_path, tiny_llama, "validate", "nxdi", target, "sdk: '2.31'")
        assert code == 0, data
        assert _sdk(data)["release"] == "2.31.1" and "pin 2.28 (RN-NXDI-2.29)" in _sdk(data)["notes"][0]
    # Trn2 keeps the newest release, with no note.
    code, data = _run(tmp_path, tiny_llama, "validate", "nxdi", "trn2")
    assert _sdk(data)["release"] == "2.31.1" and _sdk(data)["notes"] == []
    # An installed 2.31 builds for inf2 only when named.
    release = find_release("2.31.1")
    assert release is not None
    installed = {name: versions[0] for name, versions in release.packages.items()}
    found = resolve("nxdi", "inf2", None, installed)
    assert found.problem is not None and "only when the profile's sdk: names it" in found.problem
    assert "install SDK 2.28.1" in found.problem
    assert resolve("nxdi", "trn2", None, installed).problem is None


def test_the_docs_say_what_is_unverified() -> None:
    backends = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert "CPU compile on the native route unverified" in backends
    assert "Nothing in this matrix ran on a Neuron device" in backends
    assert "2.11.0.1.0.4089" in backends and "DOCS@2.33.1" in backends
    assert "unknown (no source)" in deploy  # 2.33.0's image's libtorch-neuronx-lite
    assert "no SageMaker serving integration" in deploy


# -- deploy ---------------------------------------------------------------------------------------------


def _vllm_neuron(tmp_path: Path, version: str, **more: Any) -> Path:
    from test_deploy_vllm_neuron import _vllm_neuron_bundle

    release = find_release(version)
    assert release is not None
    return _vllm_neuron_bundle(tmp_path, release, in_image=False, **more)


def test_deploy_compares_the_lite_build_and_not_what_the_image_does_not_pin(tmp_path: Path) -> None:
    from neuronc.deploy import render
    from neuronc.errors import InvalidInputError

    image = find_release("2.32.0").images_serving(Serves.VLLM_NEURON)[0]  # type: ignore[union-attr]
    # The SDK ships lite 2.12.0.1.0.1284 too; the image pins 2.11.0.1.0.1284: every graph would miss.
    other_lite = {**image.packages, LITE: "2.12.0.1.0.1284"}
    with pytest.raises(InvalidInputError, match="every compiled graph would miss") as caught:
        render(_vllm_neuron(tmp_path / "a", "2.32.0", toolchain=other_lite), "vllm")
    assert f"{LITE} 2.11.0.1.0.1284" in str(caught.value)
    # vLLM, vllm-neuron and torch are recorded, not required.
    recorded = {**image.packages, "vllm": "0.24.1", "vllm-neuron": "0.24.0.1.1.1", "torch": "2.11.0+cpu"}
    assert render(_vllm_neuron(tmp_path / "b", "2.32.0", toolchain=recorded), "vllm").image == image.reference


def test_a_pin_no_source_names_is_refused_for_a_host_compiled_bundle(tmp_path: Path) -> None:
    from neuronc.deploy import DeployOptions, render
    from neuronc.errors import InvalidInputError

    image = find_release("2.33.0").images_serving(Serves.VLLM_NEURON)[0]  # type: ignore[union-attr]
    bundle = _vllm_neuron(tmp_path, "2.33.0")
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, "vllm")
    assert f"{LITE} (a version no source names)" in str(caught.value) and "--image" in str(caught.value.hint)
    assert render(bundle, "vllm", DeployOptions(image=image.reference)).image == image.reference


@pytest.mark.parametrize("version", ["2.27.0", "2.29.1", "2.31.1"])
def test_sagemaker_refuses_an_nxdi_bundle_naming_the_way_to_serve_it(tmp_path: Path, version: str) -> None:
    from test_deploy import _bundle

    from neuronc.deploy import render
    from neuronc.errors import InvalidInputError

    image = find_release(version).images_serving(Serves.NXDI)[0]  # type: ignore[union-attr]
    toolchain = {p: image.packages[p] for p in ("neuronx-cc", "neuronx-distributed-inference")}
    bundle = _bundle(tmp_path, "nxdi", toolchain=toolchain, sdk=version)
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, "sagemaker")
    assert caught.value.exit_code == 2
    assert f"(Neuron SDK {version})" in str(caught.value)
    assert "carry no SageMaker serving integration" in str(caught.value)
    hint = str(caught.value.hint)
    assert f"FROM {image.reference}" in hint and "`serve`" in hint and "--for vllm" in hint


@pytest.mark.parametrize("version", ["2.31.0", "2.32.0", "2.33.0", "2.33.1"])
def test_sagemaker_refuses_a_vllm_neuron_bundle_naming_the_way_to_serve_it(tmp_path: Path, version: str) -> None:
    from neuronc.deploy import render
    from neuronc.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as caught:
        render(_vllm_neuron(tmp_path, version), "sagemaker")
    assert caught.value.exit_code == 2
    assert f"vllm-neuron bundle (Neuron SDK {version})" in str(caught.value)
    assert "carry no SageMaker serving integration" in str(caught.value)
    own = find_release(version).images_serving(Serves.VLLM_NEURON)  # type: ignore[union-attr]
    base = own[0] if own else find_release("2.33.0").images_serving(Serves.VLLM_NEURON)[0]  # type: ignore[union-attr]
    assert f"FROM {base.reference}" in str(caught.value.hint)


def test_sagemaker_cli_exits_2_with_the_reason(tmp_path: Path) -> None:
    out.reset()
    bundle = _vllm_neuron(tmp_path, "2.32.0")
    result = CliRunner().invoke(app, ["deploy", str(bundle), "--for", "sagemaker", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "no SageMaker serving integration" in result.output


def test_every_release_lists_the_build_for_the_newest_torch_first() -> None:
    """Release.packages: "the one paired with the newest torch first" (the lite builds are per torch)."""
    from packaging.version import Version

    from neuronc.backends.support import releases

    for release in releases():
        lites = release.packages.get(LITE, ())
        torches = [Version(v).release[:2] for v in lites]
        assert torches == sorted(torches, reverse=True), (release.version, lites)
