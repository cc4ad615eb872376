"""The pre-boot verdict (neuronc.verdict): `verify --against-image`, `verify --against-env`, and `deploy`.

The vllm-neuron bundles are the ones test_deploy_vllm_neuron.py writes (the layout and record
``run_compile`` leaves); images are the support matrix's DLC references, or images the stand-in docker
holds (tests/sdk_doubles/container_runtime.py), read through ``run --rm --network none``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sdk_doubles.fixtures import FakeRuntime
from test_deploy_vllm_neuron import _image, _vllm_neuron_bundle

from neuronc._output import out
from neuronc.backends.support import Release, find_release
from neuronc.cli import app
from neuronc.verdict import ServingSide, bundle_verdict


def _release(version: str) -> Release:
    release = find_release(version)
    assert release is not None
    return release


def invoke(*args: str) -> tuple[int, Any, str]:
    out.reset()
    result = CliRunner().invoke(app, list(args))
    try:
        data = json.loads(result.stdout)
    except ValueError:
        data = result.stdout
    return result.exit_code, data, result.stderr


def _reference(version: str) -> str:
    image = _image(_release(version))
    assert image is not None
    return image.reference


def test_its_own_releases_image_starts_it_and_another_releases_does_not(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.32.0"), "--json")
    assert code == 0, (report, err)
    verdict = report["verdict"]
    assert verdict["starts_without_compiling"] is True and verdict["differences"] == []
    fields = [p["field"] for p in verdict["parts"]]
    assert fields == [
        "neuronx-cc",
        "nki",
        "libtorch-neuronx-lite",
        "torch",
        "target",
        "tp",
        "lnc",
        "route",
        "kv_blocks",
        "engine_args",
        "environment",
    ]
    # The matrix pins no image's torch (recorded, not required) and records no image's environment.
    assert verdict["unchecked"] == ["torch", "environment"]
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.31.1"), "--json")
    assert code == 5, (report, err)
    differences = {d["field"]: d for d in report["verdict"]["differences"]}
    assert differences["neuronx-cc"]["bundle"] == "2.27.5334.0"
    assert differences["neuronx-cc"]["image"] == _release("2.31.1").images[0].packages["neuronx-cc"]
    assert "neuronx-cc: bundle 2.27.5334.0, image" in "\n".join(report["error"]["details"])
    # Without --json: every part, then the answer.
    code, text, _ = invoke("verify", str(bundle), "--against-image", _reference("2.31.1"))
    assert code == 5 and "starts with zero compiles: no" in text and "neuronx-cc: bundle 2.27.5334.0" in text


def _side(release: Release, **changes: Any) -> ServingSide:
    image = _image(release)
    assert image is not None
    versions = {**image.packages, **changes.pop("versions", {})}
    return ServingSide(image.reference, "test", versions, changes.pop("targets", image.targets), changes.pop("env", {}))


def _flip_engine(args: list[str], flag: str, value: str) -> list[str]:
    flipped = list(args)
    flipped[flipped.index(flag) + 1] = value
    return flipped


# Each row flips one part of the plugin's key, on the bundle's side or on the image's, and names it.
FLIPS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("neuronx-cc", {}, {"versions": {"neuronx-cc": "2.27.9999.0"}}),
    ("nki", {}, {"versions": {"nki": "0.6.9"}}),
    ("libtorch-neuronx-lite", {}, {"versions": {"libtorch-neuronx-lite": "2.11.0.1.0.696"}}),
    ("torch", {}, {"versions": {"torch": "2.12.0"}}),
    ("target", {}, {"targets": ("trn3",)}),
    ("tp", {"engine_args": ("--tensor-parallel-size", "8")}, {}),
    ("lnc", {"lnc": 2}, {}),
    # The serve lines set the recorded route (an image's own VLLM_NEURON_BACKEND never wins): a bundle
    # that does not record it (compiled before neuronc pinned it) may have compiled on another one.
    ("route", {"route": None}, {"env": {"VLLM_NEURON_BACKEND": "neuron_native"}}),
    ("kv_blocks", {"num_gpu_blocks": 1000}, {}),
    ("engine_args", {"engine_args": ("--max-num-seqs", "16")}, {}),
    ("environment", {}, {"env": {"NEURON_CC_FLAGS": "-O3"}}),
]


@pytest.mark.parametrize(("field", "bundle_change", "image_change"), FLIPS, ids=[f[0] for f in FLIPS])
def test_flipping_each_key_part_flips_the_verdict(
    tmp_path: Path, field: str, bundle_change: dict[str, Any], image_change: dict[str, Any]
) -> None:
    release = _release("2.32.0")
    same = bundle_verdict(_vllm_neuron_bundle(tmp_path / "same", release, in_image=False), _side(release))
    assert same.starts_without_compiling, same.lines()
    record: dict[str, Any] = {}
    kw: dict[str, Any] = {}
    if "engine_args" in bundle_change:
        flag, value = bundle_change["engine_args"]
        from neuronc.bundle import read_manifest

        bundle = _vllm_neuron_bundle(tmp_path / "probe", release, in_image=False)
        base = read_manifest(bundle).extra["vllm_neuron"]["engine_args"]
        record["engine_args"] = _flip_engine(base, flag, value)
    if "lnc" in bundle_change:  # the profile asks for LNC 2; the record (and the serve lines) say 1
        kw["lnc"] = 2
        record["logical_nc_config"] = 1
    for key in ("route", "num_gpu_blocks"):
        if key in bundle_change:
            record[key] = bundle_change[key]
    bundle = _vllm_neuron_bundle(tmp_path / "flipped", release, in_image=False, **kw, **record)
    verdict = bundle_verdict(bundle, _side(release, **image_change))
    assert not verdict.starts_without_compiling
    assert [d.field for d in verdict.differences] == [field], verdict.lines()


def test_an_image_neuronc_does_not_know_is_read_through_the_runtime(
    tmp_path: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release("2.32.0")
    image = _image(release)
    assert image is not None
    # Read from the image, torch is compared too (the matrix pins none): the bundle's and the image's agree.
    packages = {**image.packages, "torch": "2.11.0"}
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False, toolchain=packages)
    custom = "registry.example/my-vllm-neuron:1"
    fake_runtime.add_image(custom, packages, local=False, env={"NEURON_CC_FLAGS": "-O3"})
    code, report, _ = invoke("verify", str(bundle), "--against-image", custom, "--json")
    assert code == 5 and "not on this machine" in report["error"]["message"]  # pulled only when allowed
    assert "NEURONC_PULL_IMAGES=1" in report["error"]["hint"]
    monkeypatch.setenv("NEURONC_PULL_IMAGES", "1")
    code, report, _ = invoke("verify", str(bundle), "--against-image", custom, "--json")
    assert code == 5, report
    assert report["verdict"]["differences"] == [
        {"field": "environment", "bundle": "none", "image": "NEURON_CC_FLAGS=-O3"}
    ]
    assert report["verdict"]["unchecked"] == ["target"]
    (run,) = fake_runtime.runs()
    argv = run["run"]
    assert argv[:3] == ["--rm", "--network", "none"] and "--entrypoint" in argv
    # The same image without the extra variable: every part checked but the target, all equal.
    plain = "registry.example/my-vllm-neuron:2"
    fake_runtime.add_image(plain, packages)
    code, report, _ = invoke("verify", str(bundle), "--against-image", plain, "--json")
    assert code == 0 and report["verdict"]["starts_without_compiling"] is True


def test_deploy_refuses_an_image_that_would_compile_unless_allowed(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    other = _reference("2.31.1")
    args = ["deploy", str(bundle), "--for", "vllm", "--image", other, "--json"]
    code, report, err = invoke(*args, "--out", str(tmp_path / "refused"))
    assert code == 5, (report, err)
    assert "neuronx-cc: bundle 2.27.5334.0" in err and "--allow-compile" in err
    assert not (tmp_path / "refused").exists()
    code, report, err = invoke(*args, "--out", str(tmp_path / "allowed"), "--allow-compile")
    assert code == 0, (report, err)
    assert report["verdict"]["starts_without_compiling"] is False
    # Its own release's image (chosen by deploy itself): the verdict is yes and is reported.
    code, report, err = invoke("deploy", str(bundle), "--for", "vllm", "--json", "--out", str(tmp_path / "own"))
    assert code == 0, (report, err)
    assert report["verdict"]["starts_without_compiling"] is True and report["image"] == _reference("2.32.0")


def test_verify_against_env_gives_the_verdict_for_this_host(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    code, report, _ = invoke("verify", str(bundle), "--against-env", "--json")
    assert code == 5  # no vllm-neuron here
    assert report["verdict"]["image"] == "this host"
    assert "neuronx-cc" in [d["field"] for d in report["verdict"]["differences"]]


def test_a_bundle_compiled_in_its_dlc_starts_there_and_not_in_another_releases(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    from test_backend_vllm_neuron import write_profile

    fake_runtime.add_release_images()
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    bundle = report["builds"][0]["bundle"]
    from neuronc.bundle import read_manifest

    pinned = read_manifest(Path(bundle)).extra["vllm_neuron"]["runner"]["pinned"]
    for image in (_reference("2.32.0"), pinned):  # the matrix's tag; the digest the compile ran in
        code, report, err = invoke("verify", bundle, "--against-image", image, "--json")
        assert code == 0, (image, report, err)
        assert report["verdict"]["starts_without_compiling"] is True
    assert "the image the compile ran in" in report["verdict"]["source"]
    code, report, _ = invoke("verify", bundle, "--against-image", _reference("2.31.1"), "--json")
    assert code == 5 and "neuronx-cc" in [d["field"] for d in report["verdict"]["differences"]]
    code, report, err = invoke("deploy", bundle, "--for", "vllm", "--json", "--out", str(tmp_path / "deploy"))
    assert code == 0, (report, err)
    assert report["image"] == pinned and report["verdict"]["starts_without_compiling"] is True
    serve = (tmp_path / "deploy" / "vllm.env").read_text()
    assert "VLLM_NEURON_BACKEND=" in serve and "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND=" in serve


def test_nxdi_and_optimum_neuron_parts_against_their_images(tmp_path: Path) -> None:
    from test_deploy import _bundle

    from neuronc.deploy import render

    nxdi = _bundle(tmp_path / "nxdi", "nxdi")
    image = render(nxdi, "vllm").image
    assert image is not None
    code, report, err = invoke("verify", str(nxdi), "--against-image", image, "--json")
    assert code == 0, (report, err)
    fields = [p["field"] for p in report["verdict"]["parts"]]
    assert fields == ["neuronx-cc", "neuronx-distributed-inference", "torch-neuronx", "tp", "buckets"]
    # An image of another NxDI (the matrix's newest vLLM image for NxDI) names it.
    other = next(
        i.reference
        for r in reversed(releases_with_nxdi())
        for i in r
        if i.packages["neuronx-distributed-inference"] != report["verdict"]["parts"][1]["bundle"]
    )
    code, report, _ = invoke("verify", str(nxdi), "--against-image", other, "--json")
    assert code == 5 and "neuronx-distributed-inference" in [d["field"] for d in report["verdict"]["differences"]]
    optimum = _bundle(tmp_path / "optimum", "optimum-neuron")
    image = render(optimum, "vllm").image
    assert image is not None
    code, report, err = invoke("verify", str(optimum), "--against-image", image, "--json")
    assert code == 0, (report, err)
    assert [p["field"] for p in report["verdict"]["parts"]] == ["optimum-neuron", "neuronx-cc"]


def releases_with_nxdi() -> list[Any]:
    from neuronc.backends.support import Serves, releases

    return [r.images_serving(Serves.NXDI) for r in releases() if r.images_serving(Serves.NXDI)]
