"""`neuronc deploy --for vllm` per Neuron SDK release: NxD Inference bundles of SDK 2.26.1-2.31.1 and
vllm-neuron (torch.compile) bundles of SDK 2.31.0-2.33.1, each against its row of the support matrix.

NxDI bundles are written by the real BundleWriter with the versions a release ships (test_deploy's
``_bundle``); vllm-neuron bundles by ``_vllm_neuron_bundle`` below, whose ``extra.vllm_neuron``
record is made by the backend's own functions (engine_kwargs, engine_cli) as ``run_compile`` makes
it; test_deploy_vllm_neuron.py compiles one through the SDK doubles instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_deploy import _bundle, _exec_argv, _files, _flags

from neuronc.backends.support import Image, Release, Serves, find_release, releases
from neuronc.deploy import DeployOptions, render
from neuronc.deploy import images as image_table
from neuronc.errors import InvalidInputError

NXDI = "neuronx-distributed-inference"
NXDI_ROWS = [(r, i) for r in releases() for i in r.images_serving(Serves.NXDI)]


def _nxdi_toolchain(image: Image) -> dict[str, str]:
    return {"neuronx-cc": image.packages["neuronx-cc"], NXDI: image.packages[NXDI]}


def test_every_release_2_27_0_to_2_31_1_but_2_28_1_has_an_nxdi_vllm_image() -> None:
    with_image = {r.version for r, _ in NXDI_ROWS}
    wanted = {r.version for r in releases() if "2.27.0" <= r.version <= "2.31.1"} - {"2.28.1"}
    assert with_image == wanted
    assert {i.vllm for _, i in NXDI_ROWS} == {"0.11.0", "0.13.0", "0.16.0"}
    # The deploy image table's vllm-neuron family is exactly these rows, newest release first.
    family = [i for i in image_table.IMAGES if i.family == "vllm-neuron"]
    expected = [(r.version, i.reference) for r in reversed(releases()) for i in r.images_serving(Serves.NXDI)]
    assert [(i.sdk, i.image) for i in family] == expected
    for row in family:
        assert (row.neuronx_cc, row.nxdi) == tuple(
            next(i for _, i in NXDI_ROWS if i.reference == row.image).packages[p] for p in ("neuronx-cc", NXDI)
        )


@pytest.mark.parametrize(("release", "image"), NXDI_ROWS, ids=[f"{r.version}-vllm{i.vllm}" for r, i in NXDI_ROWS])
def test_an_nxdi_bundle_of_each_release_gets_its_image_and_the_same_flags(
    tmp_path: Path, release: Release, image: Image
) -> None:
    newest_vllm = release.images_serving(Serves.NXDI)[0]
    bundle = _bundle(tmp_path, "nxdi", toolchain=_nxdi_toolchain(image), sdk=release.version)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="inf2.48xlarge", replicas=2))
    # sdk: names the release; of its images the newest vLLM serves (both of 2.27.1's ship the same versions).
    assert rendered.image == newest_vllm.reference
    files = _files(rendered)
    services = yaml.safe_load(files["docker-compose.yml"])["services"]
    for name in ("vllm-0", "vllm-1"):
        service = services[name]
        assert service["image"] == newest_vllm.reference
        assert service["environment"] == {"NEURON_COMPILED_ARTIFACTS": "/bundle/artifacts"}
        assert service["command"][:3] == ["vllm", "serve", "/bundle/model"]
        assert _flags(service["command"][3:]) == _flags(_exec_argv(files["serve.sh"])[3:]) | {"--port": "8080"}
    assert set(_flags(service["command"][3:])) == {
        "--served-model-name",
        "--tensor-parallel-size",
        "--max-num-seqs",
        "--max-model-len",
        "--dtype",
        "--no-enable-prefix-caching",
        "--num-gpu-blocks-override",
        "--port",
    }


@pytest.mark.parametrize("release", sorted({r.version for r, _ in NXDI_ROWS}))
def test_without_sdk_the_versions_choose_the_newest_release_shipping_them(tmp_path: Path, release: str) -> None:
    row = find_release(release)
    assert row is not None
    image = row.images_serving(Serves.NXDI)[0]
    rendered = render(_bundle(tmp_path, "nxdi", toolchain=_nxdi_toolchain(image)), "vllm")
    shipping = [r for r, i in NXDI_ROWS if _nxdi_toolchain(i) == _nxdi_toolchain(image)]
    assert rendered.image == shipping[-1].images_serving(Serves.NXDI)[0].reference
    assert rendered.image is not None and f"sdk{shipping[-1].version}-" in rendered.image


def test_sdk_2_28_1_has_no_image_and_is_refused_naming_2_28_0s(tmp_path: Path) -> None:
    twin = find_release("2.28.0")
    assert twin is not None
    image = twin.images_serving(Serves.NXDI)[0]
    bundle = _bundle(tmp_path, "nxdi", toolchain=_nxdi_toolchain(image), sdk="2.28.1")
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, "vllm")
    assert caught.value.exit_code == 2
    assert "Neuron SDK 2.28.1 has no AWS vLLM container for NxD Inference" in str(caught.value)
    hint = str(caught.value.hint)
    assert f"{image.reference} (SDK 2.28.0; vLLM 0.13.0, vllm-neuron 0.4.1)" in hint
    assert "ship this bundle's versions" in hint and "--image" in hint
    # Taking the named image is the user's call.
    assert render(bundle, "vllm", DeployOptions(image=image.reference)).image == image.reference
    # sdk: '2.28' names 2.28.0 as well, which has the image.
    bundle = _bundle(tmp_path / "series", "nxdi", toolchain=_nxdi_toolchain(image), sdk="2.28")
    assert render(bundle, "vllm").image == image.reference


def test_sdk_2_26_1_runs_the_v0_fork_and_gets_serve_sh_with_the_reason(tmp_path: Path) -> None:
    """No compose file for the V0 fork's image (its flags cannot be checked); serve.sh for a plugin host."""
    toolchain = {"neuronx-cc": "2.21.33363.0+82129205", NXDI: "0.6.10598+a59fdc00"}
    rendered = render(_bundle(tmp_path, "nxdi", toolchain=toolchain), "vllm")
    assert rendered.image is None
    names = {f.path for f in rendered.files}
    assert "serve.sh" in names and "docker-compose.yml" not in names
    note = " ".join(rendered.notes)
    assert "Neuron SDK 2.26.1: its image" in note
    assert "0.9.1-neuronx-py311-sdk2.26.1-ubuntu22.04 runs AWS's vLLM V0 fork" in note
    assert "neither on PyPI nor in any public source" in note and "--image" in note


def test_docs_deploy_names_every_vllm_image_of_the_support_matrix() -> None:
    """docs/deploy.md's per-release table (scripts/gen_support_matrix.py) names every tag the matrix holds."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text(encoding="utf-8")
    kinds = (Serves.NXDI, Serves.VLLM_NEURON, Serves.VLLM_V0)
    missing = [i.tag for r in releases() for k in kinds for i in r.images_serving(k) if f"`{i.tag}`" not in text]
    assert not missing, missing


def test_torch_neuronx_is_compared_where_the_image_row_records_it() -> None:
    """NxDI's model.pt is traced with one torch-neuronx: an image row that records its version must match."""
    from dataclasses import replace

    from neuronc.deploy._releases import nxdi_fits

    release = find_release("2.27.1")
    assert release is not None
    newest = release.images_serving(Serves.NXDI)[0]
    pinned = replace(newest, packages={**newest.packages, "torch-neuronx": "2.9.0.2.11.19912"})
    toolchain = _nxdi_toolchain(newest)
    assert nxdi_fits(pinned, toolchain)  # the bundle does not record it: not compared
    assert nxdi_fits(pinned, {**toolchain, "torch-neuronx": "2.9.0.2.11.19912+abc"})
    assert not nxdi_fits(pinned, {**toolchain, "torch-neuronx": "2.8.0.2.11.19912"})
    # Every NxDI image row records its torch-neuronx (issue 28): the check runs for every bundle that does.
    for _, image in NXDI_ROWS:
        assert "torch-neuronx" in image.packages, image.tag
        assert not nxdi_fits(image, {**_nxdi_toolchain(image), "torch-neuronx": "2.7.0.2.12.22436"}), image.tag


def test_a_2_27_1_bundle_gets_the_image_with_its_torch_neuronx() -> None:
    """SDK 2.27.1's two images ship torch-neuronx 2.9 (vLLM 0.13.0) and 2.8 (vLLM 0.11.0)."""
    from neuronc.deploy._releases import nxdi_image

    release = find_release("2.27.1")
    assert release is not None
    toolchain = _nxdi_toolchain(release.images_serving(Serves.NXDI)[0])
    for torch_neuronx, vllm in (("2.9.0.2.11.19912", "0.13.0"), ("2.8.0.2.11.19912", "0.11.0")):
        image = nxdi_image({**toolchain, "torch-neuronx": torch_neuronx}, "2.27.1", "trn2")
        assert image is not None and image.vllm == vllm, torch_neuronx
