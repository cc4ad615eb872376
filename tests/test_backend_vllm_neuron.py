"""The vllm-neuron backend: profiles, the engine arguments, and `neuronc compile` through the doubles.

The compile runs the real pipeline and neuronc's real compile script; underneath, the doubles stand
where the real stack would (tests/sdk_doubles): a stand-in docker CLI that runs the release's "DLC
image" command on this host, and a ``vllm`` whose ``LLM`` accepts only what the recorded vLLM
accepts and fills the compile cache in the plugin's layout (tests/fixtures/vllm_neuron/).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sdk_doubles.fixtures import FakeRuntime, make_spec

from neuronc._output import out
from neuronc.backends import get_backend
from neuronc.backends.support import find_release
from neuronc.backends.vllm_neuron.engine import engine_cli, engine_kwargs, plan_graphs
from neuronc.backends.vllm_neuron.facts import KV_SIZING_ENV
from neuronc.bundle import read_manifest, verify_bundle
from neuronc.cli import app
from neuronc.errors import ProfileError

PROFILE = """
model: {{id: ./model}}
backend: vllm-neuron
target: {target}
tp_degree: 2
batch_size: 4
sequence: {{max_length: 512, context_buckets: [128, 256], token_buckets: [256, 512]}}
{extra}
"""


def write_profile(tmp_path: Path, checkpoint: Path, *, target: str = "trn2", extra: str = "") -> Path:
    if not (tmp_path / "model").exists():
        shutil.copytree(checkpoint, tmp_path / "model")
    profile = tmp_path / "vllm.yaml"
    profile.write_text(textwrap.dedent(PROFILE).format(target=target, extra=extra))
    return profile


def invoke(*args: str) -> tuple[int, Any, str]:
    out.reset()
    result = CliRunner().invoke(app, list(args))
    try:
        data = json.loads(result.stdout)
    except ValueError:
        data = result.stdout
    return result.exit_code, data, result.stderr


def spec_for(tmp_path: Path, checkpoint: Path, **kw: str) -> Any:
    write_profile(tmp_path, checkpoint, **kw)
    return make_spec((tmp_path / "vllm.yaml").read_text(), tmp_path)


# -- the profile ------------------------------------------------------------------------------------


def test_a_trn2_profile_maps_to_the_plugins_engine_arguments(tmp_path: Path, tiny_llama: Path) -> None:
    spec = spec_for(tmp_path, tiny_llama)
    assert spec.weights == "on-load"  # the backend's default: the plugin shards HF safetensors on load
    kwargs = engine_kwargs(spec, "/bundle/artifacts/checkpoint")
    assert kwargs["max_num_seqs"] == 4 and kwargs["max_model_len"] == 512 and kwargs["tensor_parallel_size"] == 2
    assert kwargs["max_num_batched_tokens"] == 256  # the largest prefill bucket, as the plugin requires
    assert kwargs["gpu_memory_utilization"] == 0.9  # explicit: LLM's default (0.92) is not vllm serve's
    assert kwargs["additional_config"] == {
        "neuron_config": {
            "num_batched_tokens_buckets": [128, 256],
            "num_seqs_buckets": [1, 2, 4],
            "decode_context_length_buckets": [256],
        }
    }
    args = engine_cli(kwargs)
    assert "--model" not in args and args[args.index("--additional-config") + 1].startswith('{"neuron_config"')
    assert args[args.index("--served-model-name") + 1] == "model"  # its directory name, not the build host path
    graphs = [g.name for g in plan_graphs(spec)]
    assert graphs[:2] == ["cte-b1-s128", "cte-b1-s256"] and "tkg-b4-s512" in graphs and len(graphs) == 8


@pytest.mark.parametrize(
    ("target", "extra", "expected"),
    [
        (
            "inf2",
            "",
            "no Neuron SDK release supports the vllm-neuron backend on inf2; for inf2 use nxdi (SDK 2.26.1–2.31.1)",
        ),
        ("trn2", "sdk: '2.30'", "does not support trn2 in Neuron SDK 2.30.0 (sdk:): it does from SDK 2.31.0"),
        ("trn2", "sdk: '2.40'", "sdk: 2.40 is not a Neuron SDK release neuronc knows (2.26.1 … 2.33.1)"),
        ("trn2", "weights: presharded", "weights: 'presharded' is not supported by 'vllm-neuron'; allowed: on-load"),
        ("trn2", "options: {num_seqs_buckets: [1, 2]}", "the largest bucket must equal batch_size 4"),
        ("trn2", "options: {neuron_config: {num_seqs_buckets: [4]}}", "set by neuronc from the profile's"),
        ("trn2", "compiler: {flags: ['-O1']}", "takes no compiler flags"),
    ],
)
def test_validate_refuses_what_no_release_or_rule_allows(
    tmp_path: Path, tiny_llama: Path, target: str, extra: str, expected: str
) -> None:
    with pytest.raises(ProfileError) as info:
        spec_for(tmp_path, tiny_llama, target=target, extra=extra)
    assert any(expected in line for line in info.value.details), info.value.details


def test_decode_buckets_must_be_multiples_of_128(tmp_path: Path, tiny_llama: Path) -> None:
    shutil.copytree(tiny_llama, tmp_path / "model")
    text = PROFILE.format(target="trn3", extra="").replace("token_buckets: [256, 512]", "token_buckets: [200, 512]")
    with pytest.raises(ProfileError) as info:
        make_spec(text, tmp_path)
    assert "multiples of 128: 200 are not" in "\n".join(info.value.details)


def test_the_default_release_is_the_newest_with_a_documented_compile_route_and_a_dlc_image(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    # 2.33's native route has no documented CPU compile (issue 28): used only when sdk: names it.
    spec = spec_for(tmp_path, tiny_llama, target="trn3")
    resolution = get_backend("vllm-neuron").rules.release_for(spec)
    assert resolution.release is not None and resolution.release.version == "2.32.0"
    assert resolution.how == "newest" and "SDK 2.33.0–2.33.1 only when sdk: names it" in resolution.notes[0]


# -- compiling in the release's DLC image ---------------------------------------------------------------


def test_compile_in_the_dlc_image_writes_the_cache_tree_and_records_the_pinned_image(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images()
    # A variable of this environment that changes what is compiled: passed in, recorded, replayed at serve.
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=transformer")
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-3")  # placement: the serving host's own, never recorded
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    bundle = Path(report["builds"][0]["bundle"])
    manifest = read_manifest(bundle)
    info = manifest.extra["vllm_neuron"]
    image = find_release("2.32.0").images[0]  # type: ignore[union-attr]
    assert info["release"] == "2.32.0" and info["plugin"] == "0.24.0.1.1.0"
    assert info["runner"]["image"] == image.reference
    assert info["runner"]["pinned"].startswith(image.repository + "@sha256:")
    assert info["logical_nc_config"] == 2 and info["platform_target"] == "trn2"  # LNC 1: refused (issue 28)
    # The toolchain key covers the image's versions (checked inside it), not this host's.
    assert {k: v for k, v in manifest.toolchain.items() if k != "neuronc"} == dict(sorted(image.packages.items()))
    assert info["versions_in_runner"]["neuronx-cc"] == "2.27.5334.0"
    # The cache tree: one complete entry per bucket, no lock or hit-marker files.
    compile_cache = bundle / "artifacts/vllm-cache/neuron/compile_cache"
    entries = sorted(p.name for p in compile_cache.iterdir())
    assert entries == sorted(info["cache_keys"]) and len(entries) == len(manifest.graphs) == 8
    for key in entries:
        names = sorted(p.name for p in (compile_cache / key).iterdir())
        assert names == [".artifact_metadata_v0.json", ".compilation_complete", "graph.hlo", f"graph_{key}.neff"]
    assert (bundle / "artifacts/checkpoint/config.json").is_file()
    assert list((bundle / "artifacts/checkpoint").glob("*.safetensors"))
    assert verify_bundle(bundle).ok
    # How it ran: by digest, no network, CPU compile for the target and LNC, the staging cache.
    (run,) = fake_runtime.runs()
    assert run["run"][run["run"].index("--network") + 1] == "none"
    assert info["runner"]["pinned"] in run["run"]
    assert run["env"]["VLLM_NEURON_CPU_COMPILE"] == "1"
    assert run["env"]["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    assert run["env"]["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert run["env"]["VLLM_CACHE_ROOT"] == "/neuronc/vllm-cache"
    # The plugin's own worker count (its default 8, cpu_compilation.md), not neuronc's pool size.
    assert "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS" not in run["env"]
    assert [m[1:] for m in run["mounts"]] == [["/neuronc", False], ["/bundle/artifacts/checkpoint", True]]
    # Shared memory for tensor-parallel work (vLLM's Docker docs), sized to tp 2: the 2 GiB floor.
    assert run["run"][run["run"].index("--shm-size") + 1] == "2g"
    # Every part of the plugin's key, pinned: the route as compiled (set explicitly), the KV block count
    # the engine sized (passed back as --num-gpu-blocks-override), the compile's NEURON_* variables.
    # Below 0.29 the route stays unset (the plugin's default; the 0.24 line names its XLA value
    # neuron_libtorch, so vllm_neuron may be refused): recorded as unset.
    assert "VLLM_NEURON_BACKEND" not in run["env"] and info["route"] is None
    assert run["env"]["NEURON_CC_FLAGS"] == "--model-type=transformer"
    assert info["compile_env"] == {"NEURON_CC_FLAGS": "--model-type=transformer"}
    # Recorded because it shapes the graphs, so hashed (docs/keys.md); the placement variable is neither.
    assert manifest.hashed_inputs["environment"] == info["compile_env"]
    blocks = info["num_gpu_blocks"]
    assert isinstance(blocks, int) and blocks > 0
    assert info["engine_kwargs"]["num_gpu_blocks_override"] == blocks
    args = info["engine_args"]
    assert args[args.index("--num-gpu-blocks-override") + 1] == str(blocks)
    # A second compile is a store hit: nothing runs.
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0 and report["builds"][0]["status"] == "hit" and len(fake_runtime.runs()) == 1
    # Under another KV sizing value the graphs differ: another key, a miss that compiles (issue 34 item 5).
    monkeypatch.setenv(KV_SIZING_ENV[0], "0.5")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0 and report["builds"][0]["status"] != "hit" and len(fake_runtime.runs()) == 2, (report, err)
    assert report["builds"][0]["config_hash"] != manifest.config_hash
    other = read_manifest(Path(report["builds"][0]["bundle"]))
    assert other.hashed_inputs["environment"] == {**info["compile_env"], KV_SIZING_ENV[0]: "0.5"}


def test_the_0_21_plugin_gets_its_own_variable_names(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images()
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.31.1'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    (run,) = fake_runtime.runs()
    assert "VLLM_NEURON_PARALLEL_COMPILE_WORKERS" not in run["env"]  # the plugin's default (8)
    manifest = read_manifest(Path(report["builds"][0]["bundle"]))
    assert manifest.extra["vllm_neuron"]["plugin"] == "0.21.0.1.0.0"
    # Variables that shape no graph: a compile host with them compiles the same graphs. Never recorded,
    # hashed or replayed: the 0.21 plugin raises at start on VLLM_NEURON_DISABLE_COMPILE_CACHE next to the
    # serve files' VLLM_NEURON_DISABLE_WARMUP_COMPILE (fork compile/backend.py; compilation_cache.md).
    shapeless = {
        "VLLM_NEURON_DISABLE_COMPILE_CACHE": "1",
        "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE": "1",
        "VLLM_NEURON_REMOTE_CACHE": "/shared/cache",
        "VLLM_NEURON_COMPILATION_TIMEOUT": "600",
        "VLLM_NEURON_ASSERT_CACHE_HIT": "1",
        "NEURON_RT_LOG_LEVEL": "INFO",
        "VLLM_NEURON_PARALLEL_COMPILE_WORKERS": "3",
    }
    for key, value in shapeless.items():
        monkeypatch.setenv(key, value)
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0 and report["builds"][0]["status"] == "hit", (report, err)  # the same key
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=transformer")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0 and report["builds"][0]["status"] != "hit", (report, err)
    bundle = Path(report["builds"][0]["bundle"])
    info = read_manifest(bundle).extra["vllm_neuron"]
    assert info["compile_env"] == {"NEURON_CC_FLAGS": "--model-type=transformer"}
    assert read_manifest(bundle).hashed_inputs["environment"] == info["compile_env"]
    run = fake_runtime.runs()[-1]
    assert run["env"]["VLLM_NEURON_PARALLEL_COMPILE_WORKERS"] == "3"  # the user's count reaches the plugin
    code, deployed, err = invoke("deploy", str(bundle), "--for", "vllm", "--json", "--out", str(tmp_path / "d"))
    assert code == 0, (deployed, err)
    served = (tmp_path / "d" / "vllm.env").read_text()
    assert "VLLM_NEURON_DISABLE_WARMUP_COMPILE=1" in served
    assert not [key for key in shapeless if key in served], served


def test_an_image_not_on_this_machine_is_pulled_only_when_allowed(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images(local=False)
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.33.0'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 5, (report, err)
    error = report["builds"][0]["error"]
    assert "is not on this machine" in error["message"] and "NEURONC_PULL_IMAGES=1" in error["hint"]
    assert not any("pull" in c.get("command", []) for c in fake_runtime.state()["calls"])
    monkeypatch.setenv("NEURONC_PULL_IMAGES", "1")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    assert any(c.get("command", [])[:1] == ["pull"] for c in fake_runtime.state()["calls"])


def test_an_image_that_does_not_ship_the_releases_versions_is_refused(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    image = find_release("2.32.0").images[0]  # type: ignore[union-attr]
    fake_runtime.add_image(image.reference, {**image.packages, "neuronx-cc": "2.27.9999.0"})
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32.0'")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 5
    error = report["builds"][0]["error"]
    assert "does not hold the versions of Neuron SDK 2.32.0's image" in error["message"]
    assert "neuronx-cc: expected 2.27.5334.0, the image has 2.27.9999.0" in error["details"]


def test_a_release_without_an_image_is_refused_with_the_way_forward(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.33.1'")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 5
    assert "no Deep Learning Container image of Neuron SDK 2.33.1" in report["builds"][0]["error"]["message"]


def test_a_compile_that_dies_publishes_nothing(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images()
    monkeypatch.setenv("NEURONC_SDK_DOUBLE_FAIL", "vllm")
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 3
    error = report["builds"][0]["error"]
    assert "RuntimeError: neuronx-cc terminated" in error["message"]
    monkeypatch.delenv("NEURONC_SDK_DOUBLE_FAIL")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"), "--require-hit")
    assert code == 6


# -- compiling on a host with the SDK -----------------------------------------------------------------


def test_on_a_host_with_the_plugin_the_installed_release_compiles_here(
    tmp_path: Path, tiny_llama: Path, vllm_neuron_host: Any
) -> None:
    vllm_neuron_host("2.32.0")
    backend = get_backend("vllm-neuron")
    assert backend.toolchain.availability().available
    profile = write_profile(tmp_path, tiny_llama, target="trn3")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    manifest = read_manifest(Path(report["builds"][0]["bundle"]))
    info = manifest.extra["vllm_neuron"]
    assert info["runner"] == {"kind": "host", "release": "2.32.0", "plugin": "0.24.0.1.1.0"}
    assert manifest.extra["neuron_sdk"]["chosen_by"] == "installed"
    assert manifest.toolchain["vllm-neuron"] == "0.24.0.1.1.0" and "transformers" in manifest.toolchain
    assert info["platform_target"] == "trn3" and info["logical_nc_config"] == 2


def test_a_host_of_another_release_is_refused_when_the_profile_names_one(
    tmp_path: Path, tiny_llama: Path, vllm_neuron_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    vllm_neuron_host("2.31.1")
    monkeypatch.setenv("NEURONC_VLLM_NEURON_RUNNER", "host")
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 5
    assert (
        "asks for Neuron SDK 2.32; the toolchain installed here is SDK 2.31.1"
        in report["builds"][0]["error"]["message"]
    )


def test_without_the_plugin_or_a_runtime_the_backend_says_what_to_install(vllm_neuron_host: Any) -> None:
    availability = get_backend("vllm-neuron").toolchain.availability()
    assert not availability.available
    assert "no container runtime (docker or podman) on PATH" in (availability.reason or "")
    assert "docker or podman" in (availability.install_hint or "")


# -- the other commands, like for every backend --------------------------------------------------------


def test_inspect_verify_plan_matrix_and_cache_lookup_work_for_it(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.add_release_images()
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    store = str(tmp_path / "store")
    code, plan, err = invoke("plan", str(profile), "--json", "--store", store)
    assert code == 0, (plan, err)
    [row] = plan["builds"]
    assert row["store"]["status"] == "miss" and len(row["graphs"]) == 8
    assert row["neuron_sdk"] == {
        "release": "2.32.0",
        "chosen_by": "profile",
        "requested": "2.32",
        "problem": None,
        "notes": [],
        "support": "beta",
    }
    code, matrix, _ = invoke("matrix", str(profile), "--json")
    assert code == 0 and [e["key"] for e in matrix["include"]] == [row["key"]]
    code, report, err = invoke("compile", str(profile), "--json", "--store", store)
    assert code == 0, (report, err)
    bundle = report["builds"][0]["bundle"]
    code, plan, _ = invoke("plan", str(profile), "--json", "--store", store)
    assert plan["builds"][0]["store"]["status"] == "hit"
    code, inspected, _ = invoke("inspect", bundle, "--json")
    assert code == 0 and inspected["backend"] == "vllm-neuron"
    assert "VLLM_NEURON_DISABLE_WARMUP_COMPILE=1" in inspected["load_snippet"]
    code, verified, _ = invoke("verify", bundle, "--json")
    assert code == 0 and verified["verify"]["ok"] is True
    # The bundle's toolchain is SDK 2.32.0's image; nothing of it is installed on this host.
    code, verified, _ = invoke("verify", bundle, "--against-env", "--json")
    assert code == 5 and verified["environment"]["neuron_sdk"] == {"bundle": "2.32.0", "installed": None}
    # The Hugging Face Neuron cache holds optimum-neuron exports only: for this backend it is n/a.
    snapshot = Path(__file__).parent / "fixtures" / "hf-neuron-cache" / "snapshot"
    code, lookup, err = invoke("cache-lookup", str(profile), "--json", "--snapshot", str(snapshot))
    assert code == 0, (lookup, err)
    [build] = lookup["builds"]
    assert build["status"] == "not-applicable" and "vllm-neuron" in " ".join(build["notes"]), build


def test_a_host_whose_versions_two_releases_share_compiles_for_either(
    tmp_path: Path, tiny_llama: Path, vllm_neuron_host: Any
) -> None:
    # A 2.33 host without libtorch-neuronx-lite metadata is both 2.33.0 and 2.33.1 (they differ in the
    # lite build only): sdk: '2.33.0' compiles here.
    vllm_neuron_host("2.33.0")
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.33.0'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    assert read_manifest(Path(report["builds"][0]["bundle"])).extra["vllm_neuron"]["runner"]["kind"] == "host"
    # The same build without sdk: (another store: sdk: is not hashed, so the first store has it).
    profile = write_profile(tmp_path / "auto", tiny_llama)
    # Without sdk: the installed 2.33 is not used (its native route's CPU compile is unverified, issue 28):
    # refused at validate, naming sdk:.
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store2"))
    assert code == 2, (report, err)
    text = json.dumps(report)
    assert "(the installed toolchain) builds vllm-neuron for trn2 only when the profile's sdk: names it" in text
    assert "set sdk: '2.33'" in text


def test_the_serve_lines_seed_a_writable_cache_from_a_read_only_bundle(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat
    import subprocess

    from neuronc.bundle import BUNDLE_PLACEHOLDER

    fake_runtime.add_release_images()
    # A KV sizing variable set at compile time shapes every NEFF: the server must get it too.
    monkeypatch.setenv("VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION", "0.25")
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, err = invoke("compile", str(profile), "--json", "--out", str(tmp_path / "out"))
    assert code == 0, (report, err)
    bundle = Path(report["builds"][0]["bundle"])
    for path in [bundle, *bundle.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    # A stand-in `vllm` that says what it was started with and whether it could write its lock files.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(
        "#!/bin/sh\n"
        # Modes, not access: root (this suite's CI user) may write anywhere; the plugin's user may not.
        'test "$(find "$VLLM_CACHE_ROOT" ! -perm -u+w | wc -l)" -eq 0 && echo writable\n'
        'echo "fail-on-miss=$VLLM_NEURON_DISABLE_WARMUP_COMPILE lnc=$NEURON_LOGICAL_NC_CONFIG'
        ' kv=$VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION"\n'
        'ls "$VLLM_CACHE_ROOT/neuron/compile_cache" | wc -l\n'
        'echo "$@"\n'
    )
    (bin_dir / "vllm").chmod(0o755)
    snippet = str(read_manifest(bundle).extra["load_snippet"]).replace(BUNDLE_PLACEHOLDER, str(bundle))
    try:
        done = subprocess.run(
            ["bash", "-ec", snippet],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
            check=False,
        )
    finally:
        for path in [bundle, *bundle.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["writable", "fail-on-miss=1 lnc=2 kv=0.25"], (done.stdout, done.stderr)
    assert int(lines[2]) == 8  # the 8 entries
    assert lines[3].startswith(f"serve {bundle}/artifacts/checkpoint --served-model-name model")
