"""The pre-boot verdict (neuronc.verdict): `verify --against-image`, `verify --against-env`, and `deploy`.

The vllm-neuron bundles are the ones test_deploy_vllm_neuron.py writes (the layout and record
``run_compile`` leaves); images are the support matrix's DLC references, or images the stand-in docker
holds (tests/sdk_doubles/container_runtime.py), read through ``run --rm --network none``.
"""

from __future__ import annotations

import json
from dataclasses import replace
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


VLLM_NEURON_PARTS = [
    "neuronx-cc",
    "nki",
    "libtorch-neuronx-lite",
    "torch",
    "vllm-neuron",
    "vllm",
    "target",
    "tp",
    "lnc",
    "route",
    "kv_blocks",
    "engine_args",
    "environment",
]


def test_its_own_releases_image_starts_it_and_another_releases_does_not(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.32.0"), "--json")
    assert code == 0, (report, err)
    verdict = report["verdict"]
    assert verdict["answer"] == "yes" and verdict["starts_without_compiling"] is True
    assert verdict["differences"] == [] and verdict["unchecked"] == [] and verdict["warnings"] == []
    assert [p["field"] for p in verdict["parts"]] == VLLM_NEURON_PARTS
    # What neuronc's own serve files set is reported as pinned, never as evidence about the image.
    assert verdict["pinned"] == ["tp", "lnc", "kv_blocks", "engine_args"]
    statuses = {p["field"]: p["status"] for p in verdict["parts"]}
    assert all(statuses[f] == "same" for f in VLLM_NEURON_PARTS if f not in verdict["pinned"])
    # The matrix pins no torch: the image's is the release its libtorch-neuronx-lite build is for.
    torch = next(p for p in verdict["parts"] if p["field"] == "torch")
    assert torch["image"] == "2.11.0" and "libtorch-neuronx-lite 2.11.0.1.0.1284" in torch["note"]
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.31.1"), "--json")
    assert code == 5, (report, err)
    assert report["verdict"]["answer"] == "no" and report["verdict"]["starts_without_compiling"] is False
    differences = {d["field"]: d for d in report["verdict"]["differences"]}
    assert differences["neuronx-cc"]["bundle"] == "2.27.5334.0"
    assert differences["neuronx-cc"]["image"] == _release("2.31.1").images[0].packages["neuronx-cc"]
    assert differences["vllm-neuron"] == {"field": "vllm-neuron", "bundle": "0.24.0.1.1.0", "image": "0.21.0.1.0.0"}
    assert "neuronx-cc: bundle 2.27.5334.0, image" in "\n".join(report["error"]["details"])
    # Without --json: every part, then the answer.
    code, text, _ = invoke("verify", str(bundle), "--against-image", _reference("2.31.1"))
    assert code == 5 and "starts with zero compiles: no" in text and "neuronx-cc: bundle 2.27.5334.0" in text


def test_a_bundle_against_an_image_of_another_vllm_neuron_build_is_no_naming_it(tmp_path: Path) -> None:
    release = _release("2.32.0")
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False)
    verdict = bundle_verdict(bundle, _side(release, versions={"vllm-neuron": "0.24.0.1.2.0"}))
    assert verdict.answer == "no" and [p.field for p in verdict.differences] == ["vllm-neuron"]
    assert verdict.lines() == ["vllm-neuron: bundle 0.24.0.1.1.0, image 0.24.0.1.2.0"]


def test_an_image_the_matrix_knows_only_in_part_cannot_tell_and_says_how_to_check(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.33.0"), in_image=False)
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.33.0"), "--json")
    assert code == 7, (report, err)
    verdict = report["verdict"]
    assert verdict["answer"] == "cannot tell" and verdict["starts_without_compiling"] is None
    # No source names the 2.33.0 image's lite (nor so its torch), and its Dockerfile's ENV was not read.
    assert verdict["unchecked"] == ["libtorch-neuronx-lite", "torch", "environment"], verdict["parts"]
    why = {u["field"]: u["why"] for u in verdict["unchecked_why"]}
    assert "NEURONC_PULL_IMAGES=1" in why["environment"] and "by digest" in why["environment"]
    assert report["error"]["error"] == "cannot_tell" and report["error"]["exit_code"] == 7
    assert any(line.startswith("environment: bundle none, image unknown (") for line in report["error"]["details"])
    code, text, _ = invoke("verify", str(bundle), "--against-image", _reference("2.33.0"))
    assert code == 7 and "starts with zero compiles: cannot tell" in text and "- unchecked (" in text


def _side(release: Release, **changes: Any) -> ServingSide:
    image = _image(release)
    assert image is not None
    versions = {**image.packages, **changes.pop("versions", {})}
    for name in changes.pop("unknown", ()):
        versions.pop(name, None)
    return ServingSide(
        image.reference,
        "test",
        versions,
        changes.pop("targets", image.targets),
        changes.pop("env", {}),
        pins_only=True,
        python=image.python_version,
        how="read the image",
    )


# Each row flips one compared part of the plugin's key on the serving side and must see "no", naming it.
FLIPS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("neuronx-cc", {}, {"versions": {"neuronx-cc": "2.27.9999.0"}}),
    ("nki", {}, {"versions": {"nki": "0.6.9"}}),
    ("libtorch-neuronx-lite", {}, {"versions": {"libtorch-neuronx-lite": "2.11.0.1.0.9999"}}),
    ("torch", {}, {"versions": {"torch": "2.12.0"}}),
    ("vllm-neuron", {}, {"versions": {"vllm-neuron": "0.24.0.1.2.0"}}),
    ("vllm", {}, {"versions": {"vllm": "0.24.1"}}),
    ("target", {}, {"targets": ("trn3",)}),
    # The serve files leave the route unset below 0.29: an image's own VLLM_NEURON_BACKEND then wins.
    ("route", {}, {"env": {"VLLM_NEURON_BACKEND": "neuron_native"}}),
    ("environment", {}, {"env": {"NEURON_CC_FLAGS": "-O3"}}),
    # The compile host's switch is replayed by the serve files: an image's own value cannot override it.
    ("neuronx-cc", {"compile_env": {"NEURON_CC_FLAGS": "-O1"}}, {"versions": {"neuronx-cc": "2.0.0.0"}}),
]


@pytest.mark.parametrize(
    ("field", "bundle_change", "image_change"), FLIPS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FLIPS)]
)
def test_flipping_each_key_part_flips_the_verdict(
    tmp_path: Path, field: str, bundle_change: dict[str, Any], image_change: dict[str, Any]
) -> None:
    release = _release("2.32.0")
    same = bundle_verdict(_vllm_neuron_bundle(tmp_path / "same", release, in_image=False), _side(release))
    assert same.answer == "yes", same.lines()
    bundle = _vllm_neuron_bundle(tmp_path / "flipped", release, in_image=False, **bundle_change)
    verdict = bundle_verdict(bundle, _side(release, **image_change))
    assert verdict.answer == "no" and verdict.starts_without_compiling is False
    assert [d.field for d in verdict.differences] == [field], verdict.lines()


# Each row removes what neuronc knows of one part: never "yes", always "cannot tell" naming it.
UNKNOWNS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *[(name, {}, {"unknown": (name,)}) for name in ("neuronx-cc", "nki", "vllm-neuron", "vllm")],
    # The matrix records no torch: without the lite it is built for, the image's torch is unknown too.
    ("libtorch-neuronx-lite", {}, {"unknown": ("libtorch-neuronx-lite",)}),
    ("target", {}, {"targets": None}),
    ("environment", {}, {"env": None}),
    ("torch", {"versions_in_runner": {}}, {}),
    ("kv_blocks", {"num_gpu_blocks": None}, {}),
    ("environment", {"runner": {"kind": "docker", "image": "registry.example/own:1"}}, {}),
]


@pytest.mark.parametrize(
    ("field", "bundle_change", "image_change"), UNKNOWNS, ids=[f"{u[0]}-{i}" for i, u in enumerate(UNKNOWNS)]
)
def test_removing_the_knowledge_of_each_part_cannot_tell(
    tmp_path: Path, field: str, bundle_change: dict[str, Any], image_change: dict[str, Any]
) -> None:
    release = _release("2.32.0")
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False, **bundle_change)
    verdict = bundle_verdict(bundle, _side(release, **image_change))
    assert verdict.answer == "cannot tell" and verdict.starts_without_compiling is None, verdict.lines()
    assert field in [p.field for p in verdict.unchecked], verdict.lines()
    failure = verdict.failure("b")
    assert failure is not None and failure.exit_code == 7 and any(line.startswith(field) for line in failure.details)


def test_nxdi_and_optimum_neuron_flip_to_no_and_unknown_to_cannot_tell(tmp_path: Path) -> None:
    from test_deploy import _bundle

    from neuronc.deploy import render

    for backend, compared in (
        ("nxdi", ["neuronx-cc", "neuronx-distributed-inference", "torch-neuronx", "target"]),
        ("optimum-neuron", ["optimum-neuron", "neuronx-cc", "target"]),
    ):
        from test_deploy import TOOLCHAINS

        # As the nxdi backend records it: the torch-neuronx that traced model.pt (the 2.28 image's).
        chain = {**TOOLCHAINS[backend], **({"torch-neuronx": "2.9.0.2.12.22436"} if backend == "nxdi" else {})}
        bundle = _bundle(tmp_path / backend, backend, toolchain=chain)
        image = render(bundle, "vllm").image
        assert image is not None
        from neuronc.verdict.image import image_side

        side = image_side(image, bundle)
        verdict = bundle_verdict(bundle, side)
        assert verdict.answer == "yes", (backend, verdict.lines())
        assert [p.field for p in verdict.parts if p.checked] == compared
        for name in compared:
            if name == "target":
                flipped = replace(side, targets=("trn3",), release=None)
                gone = replace(side, targets=None, release=None)
            else:
                flipped = replace(side, versions={**side.versions, name: "9.9.9"})
                gone = replace(side, versions={k: v for k, v in side.versions.items() if k != name})
            no = bundle_verdict(bundle, flipped)
            assert no.answer == "no" and [p.field for p in no.differences] == [name], (backend, name)
            unknown = bundle_verdict(bundle, gone)
            assert unknown.answer == "cannot tell" and [p.field for p in unknown.unchecked] == [name], (backend, name)


def test_optimum_neuron_versions_are_compared_as_exact_strings(tmp_path: Path) -> None:
    from test_deploy import _bundle

    bundle = _bundle(tmp_path, "optimum-neuron")
    from neuronc.bundle import read_manifest

    versions = dict(read_manifest(bundle).toolchain)
    label = {**versions, "neuronx-cc": f"{versions['neuronx-cc']}+abc123"}
    read = ServingSide("img", "the image itself", label, ("inf2",))
    verdict = bundle_verdict(bundle, read)  # optimum-neuron compares "2.x" with "2.x+abc123": they differ
    assert [p.field for p in verdict.differences] == ["neuronx-cc"]


def test_the_python_of_the_serving_side_is_a_warning_not_a_part(tmp_path: Path) -> None:
    release = _release("2.32.0")
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False)
    side = _side(release)
    other = ServingSide(side.name, side.source, side.versions, side.targets, side.env, pins_only=True, python="3.12.1")
    verdict = bundle_verdict(bundle, other)
    assert verdict.answer == "yes" and len(verdict.warnings) == 1 and "NKI" in verdict.warnings[0]
    assert "python" not in [p.field for p in verdict.parts]


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
    # The image's targets: those of the SDK release its versions are (2.32.0: trn2, trn3).
    assert report["verdict"]["unchecked"] == []
    (run,) = fake_runtime.runs()
    argv = run["run"]
    assert argv[:3] == ["--rm", "--network", "none"] and "--entrypoint" in argv
    assert argv[argv.index("--") + 1].startswith("registry.example/my-vllm-neuron@sha256:")  # options ended
    # The same image without the extra variable: every part checked, all equal.
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
    code, report, err = invoke(*args, "--out", str(tmp_path / "refused"), "--allow-unverified")
    assert code == 5 and not (tmp_path / "refused").exists()  # a no is not an unverified verdict
    code, report, err = invoke(*args, "--out", str(tmp_path / "allowed"), "--allow-compile")
    assert code == 0, (report, err)
    assert report["verdict"]["starts_without_compiling"] is False
    # The files record the verdict they were written under, and the risk taken.
    written = json.loads((tmp_path / "allowed" / "verdict.json").read_text())
    assert written["verdict"]["answer"] == "no" and written["allow_compile"] is True
    assert "verdict.json" in [Path(f["path"]).name for f in report["files"]]
    # Its own release's image (chosen by deploy itself): the verdict is yes and is reported.
    code, report, err = invoke("deploy", str(bundle), "--for", "vllm", "--json", "--out", str(tmp_path / "own"))
    assert code == 0, (report, err)
    assert report["verdict"]["starts_without_compiling"] is True and report["image"] == _reference("2.32.0")


def test_deploy_refuses_cannot_tell_unless_the_unverified_verdict_is_accepted(tmp_path: Path) -> None:
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.33.0"), in_image=False)
    args = ["deploy", str(bundle), "--for", "vllm", "--image", _reference("2.33.0"), "--json"]
    code, report, err = invoke(*args, "--out", str(tmp_path / "refused"))
    assert code == 7 and report["error"] == "cannot_tell", (report, err)
    assert "--allow-unverified" in err and "environment: bundle none, image unknown" in err
    assert not (tmp_path / "refused").exists()
    code, report, err = invoke(*args, "--out", str(tmp_path / "taken"), "--allow-unverified")
    assert code == 0, (report, err)
    assert report["verdict"]["answer"] == "cannot tell" and report["verdict"]["starts_without_compiling"] is None
    written = json.loads((tmp_path / "taken" / "verdict.json").read_text())
    assert written["verdict"]["unchecked"] == report["verdict"]["unchecked"] and written["allow_unverified"] is True


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
    assert "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND=" in serve
    # Below 0.29 the route stays unset (the plugin's own default; the 0.24 line names its XLA value
    # neuron_libtorch), and the platform target the key names is pinned (0.21 compile/cache.py).
    assert "VLLM_NEURON_BACKEND" not in serve and "NEURON_PLATFORM_TARGET_OVERRIDE=trn2" in serve


def test_nxdi_and_optimum_neuron_parts_against_their_images(tmp_path: Path) -> None:
    from test_deploy import TOOLCHAINS, _bundle

    from neuronc.deploy import render

    nxdi = _bundle(tmp_path / "nxdi", "nxdi", toolchain={**TOOLCHAINS["nxdi"], "torch-neuronx": "2.9.0.2.12.22436"})
    image = render(nxdi, "vllm").image
    assert image is not None
    code, report, err = invoke("verify", str(nxdi), "--against-image", image, "--json")
    assert code == 0, (report, err)
    fields = [p["field"] for p in report["verdict"]["parts"]]
    assert fields == ["neuronx-cc", "neuronx-distributed-inference", "torch-neuronx", "target", "tp", "buckets"]
    assert report["verdict"]["pinned"] == ["tp", "buckets"]  # the NeuronConfig in the bundle, not the image
    # A bundle that does not record the torch-neuronx that traced it: cannot tell, never yes.
    unrecorded = _bundle(tmp_path / "nxdi-old", "nxdi")
    code, report, _ = invoke("verify", str(unrecorded), "--against-image", image, "--json")
    assert code == 7 and report["verdict"]["unchecked"] == ["torch-neuronx"]
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
    assert [p["field"] for p in report["verdict"]["parts"]] == ["optimum-neuron", "neuronx-cc", "target"]


def releases_with_nxdi() -> list[Any]:
    from neuronc.backends.support import Serves, releases

    return [r.images_serving(Serves.NXDI) for r in releases() if r.images_serving(Serves.NXDI)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("versions_in_runner", ["neuronx-cc", "2.27"]), ("versions_in_runner", {"torch": 2}), ("python", 3.13)],
)
def test_an_ill_typed_record_is_refused_not_a_traceback(tmp_path: Path, field: str, value: Any) -> None:
    """Issue 41 item 14: a re-sealed manifest with an ill-typed vllm-neuron record is exit 2, naming the field."""
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False, **{field: value})
    code, report, err = invoke("verify", str(bundle), "--against-image", _reference("2.32.0"), "--json")
    assert code == 2 and f"extra.vllm_neuron.{field}" in report["error"]["message"], (report, err)
    code, report, err = invoke("deploy", str(bundle), "--for", "vllm", "--json", "--out", str(tmp_path / "d"))
    assert code == 2 and f"extra.vllm_neuron.{field}" in report["message"], (report, err)  # the error object
    assert not (tmp_path / "d").exists()


def _silent_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A container engine that never answers (a client whose daemon hangs)."""
    engine = tmp_path / "bin" / "docker"
    engine.parent.mkdir()
    engine.write_text("#!/bin/sh\nexec sleep 60\n", encoding="utf-8")
    engine.chmod(0o755)
    monkeypatch.setenv("NEURONC_CONTAINER_RUNTIME", str(engine))
    monkeypatch.setenv("NEURONC_CONTAINER_TIMEOUT", "1")
    return engine


def test_an_engine_that_never_answers_is_exit_5_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41 item 15: not a traceback after 120 s; the limit is NEURONC_CONTAINER_TIMEOUT."""
    import time

    engine = _silent_engine(tmp_path, monkeypatch)
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    started = time.monotonic()
    code, report, err = invoke("verify", str(bundle), "--against-image", "registry.example/x:1", "--json")
    assert code == 5 and report["error"]["error"] == "backend_unavailable", (report, err)
    assert str(engine) in report["error"]["message"] and "within 1 s" in report["error"]["message"]
    assert "NEURONC_CONTAINER_TIMEOUT" in report["error"]["hint"]
    assert time.monotonic() - started < 30
    args = ["deploy", str(bundle), "--for", "vllm", "--image", "registry.example/x:1", "--json"]
    code, report, err = invoke(*args, "--out", str(tmp_path / "d"))
    assert code == 5 and str(engine) in report["message"], (report, err)
    monkeypatch.setenv("NEURONC_CONTAINER_TIMEOUT", "soon")
    code, report, _ = invoke("verify", str(bundle), "--against-image", "registry.example/x:1", "--json")
    assert code == 2 and "NEURONC_CONTAINER_TIMEOUT" in report["error"]["message"]


@pytest.mark.parametrize("reference", ["-a", "--help", "registry.example/x:1 -a", "x:1\n-a", ""])
def test_against_image_takes_only_an_image_reference(
    tmp_path: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch, reference: str
) -> None:
    """Issue 41 item 16: checked as deploy --image is; nothing reaches docker as an option."""
    monkeypatch.setenv("NEURONC_PULL_IMAGES", "1")
    bundle = _vllm_neuron_bundle(tmp_path, _release("2.32.0"), in_image=False)
    code, report, err = invoke("verify", str(bundle), f"--against-image={reference}", "--json")
    assert code == 2 and "--against-image" in report["error"]["message"], (report, err)
    assert "calls" not in fake_runtime.state() or fake_runtime.state()["calls"] == []


def test_every_engine_command_ends_its_options_before_the_image(
    tmp_path: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release("2.32.0")
    image = _image(release)
    assert image is not None
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False)
    fake_runtime.add_image("registry.example/own:1", {**image.packages, "torch": "2.11.0"}, local=False)
    monkeypatch.setenv("NEURONC_PULL_IMAGES", "1")
    code, report, err = invoke("verify", str(bundle), "--against-image", "registry.example/own:1", "--json")
    assert code == 0, (report, err)
    commands = [c.get("command") or ["run", *c["run"]] for c in fake_runtime.state()["calls"]]
    for argv in commands:
        assert "--" in argv and argv[argv.index("--") + 1].startswith("registry.example/own"), argv


def test_this_hosts_chip_is_its_ec2_instance_type(tmp_path: Path) -> None:
    from neuronc.hardware import host_target

    dmi = tmp_path / "dmi"
    dmi.mkdir()
    assert host_target(dmi) is None  # no DMI: cannot say
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    (dmi / "product_name").write_text("trn1n.32xlarge\n")
    assert host_target(dmi) == "trn1"
    (dmi / "product_name").write_text("c7i.large\n")
    assert host_target(dmi) is None
    (dmi / "sys_vendor").write_text("QEMU\n")
    (dmi / "product_name").write_text("inf2.xlarge\n")
    assert host_target(dmi) is None  # only EC2's product name is an instance type
