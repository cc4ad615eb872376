"""`neuronc deploy --for vllm` on vllm-neuron (torch.compile) bundles of SDK 2.31.0-2.33.1.

The bundles are written by the real BundleWriter in the layout ``run_compile`` leaves (the checkpoint
and the plugin's cache tree under artifacts/), with an ``extra.vllm_neuron`` record made by the
backend's own functions (``engine_kwargs``, ``engine_cli``, ``logical_nc``) the way ``run_compile``
records it; the last test compiles one through the SDK doubles (the stand-in docker running the
release's "DLC image") and deploys that. serve.sh and the compose file's start-up command are run
for real (sh, cp) against a stand-in ``vllm`` that reports what it was started with.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from plugins.fake_backend import make_spec, spec_key
from test_deploy import _env, _exec_argv, _files

from neuronc.backends.support import Image, Release, Serves, find_release, image_pins, releases
from neuronc.backends.vllm_neuron.engine import (
    CACHE_DIR,
    CHECKPOINT_DIR,
    ENGINE_FIELDS,
    engine_args_problem,
    engine_cli,
    engine_kwargs,
    logical_nc,
    served_flags,
)
from neuronc.backends.vllm_neuron.facts import KV_SIZING_ENV, route_to_set
from neuronc.bundle import BuildRecord, BundleWriter, Graph, read_manifest
from neuronc.deploy import DeployOptions, render
from neuronc.deploy.vllm_neuron import CONTAINER_CACHE, seed_script
from neuronc.errors import BundleFormatError, InvalidInputError
from neuronc.spec import ResolvedSequence

SEQ = ResolvedSequence(max_length=1024, max_context_length=512, context_buckets=(256, 512), token_buckets=(512, 1024))
KEYS = ("0" * 31 + "a", "0" * 31 + "b")
ROWS = [r for r in releases() if "vllm-neuron" in r.backends]
DIGEST = "sha256:" + "ab" * 32


def _image(release: Release) -> Image | None:
    found = release.images_serving(Serves.VLLM_NEURON)
    return found[0] if found else None


def _torch_for(packages: dict[str, str]) -> str | None:
    lite = packages.get("libtorch-neuronx-lite")
    return ".".join(lite.split(".")[:3]) if lite else None


def _vllm_neuron_bundle(
    tmp_path: Path,
    release: Release,
    *,
    in_image: bool = True,
    target: str = "trn2",
    lnc: int | None = None,
    toolchain: dict[str, str] | None = None,
    kv: dict[str, str] | None = None,
    blocks: int = 4096,
    compile_env: dict[str, str] | None = None,
    **record: Any,
) -> Path:
    """A vllm-neuron bundle as ``run_compile`` leaves it, compiled in ``release``'s image or on a host."""
    options = {"logical_nc_config": lnc} if lnc is not None else {}
    spec = make_spec(
        model=make_spec().model.model_copy(update={"id": "meta-llama/Llama-3.1-8B"}),
        backend="vllm-neuron",
        target=target,
        tp_degree=4,
        batch_size=8,
        sequence=SEQ,
        weights="on-load",
        compiler_flags=(),
        options=options,
        sdk=release.version,
    )
    image = _image(release)
    packages = dict(image.packages) if image else {n: v[0] for n, v in release.packages.items()}
    # As run_compile records it: the KV block count the compile sized, pinned for the server.
    kwargs = {**engine_kwargs(spec, f"/bundle/{CHECKPOINT_DIR}"), "num_gpu_blocks_override": blocks}
    runner: dict[str, Any] = {"kind": "host", "release": release.version, "plugin": packages["vllm-neuron"]}
    if in_image and image is not None:
        runner = {**runner, "kind": "docker", "image": image.reference, "runtime": "docker"}
        runner["pinned"] = f"{image.repository}@{DIGEST}"
    info = {
        "release": release.version,
        "plugin": packages["vllm-neuron"],
        "vllm": packages["vllm"],
        "runner": runner,
        "target": target,
        "platform_target": target,
        "logical_nc_config": logical_nc(spec),
        "checkpoint": CHECKPOINT_DIR,
        "cache_root": CACHE_DIR,
        "cache_keys": list(KEYS),
        "engine_kwargs": {**kwargs, "model": CHECKPOINT_DIR, "tokenizer": CHECKPOINT_DIR},
        "engine_args": engine_cli(kwargs),
        "kv_sizing_env": kv or {},
        "route": route_to_set(packages["vllm-neuron"]),
        "num_gpu_blocks": blocks,
        "compile_env": {**(kv or {}), **(compile_env or {})},
        # As compile_script.py reads them where it runs: torch is the release the image's lite is built for.
        "versions_in_runner": {**packages, "torch": _torch_for(packages)},
        "python": image.python_version if image is not None else None,
        **record,
    }
    key = spec_key(spec)
    dest = tmp_path / f"bundle-vllm-neuron-{release.version}-{key.short}"
    with BundleWriter(dest) as writer:
        writer.write_text("profile.yaml", "# profile\n")
        for name in ("config.json", "tokenizer.json", "model.safetensors"):
            writer.write_text(f"{CHECKPOINT_DIR}/{name}", "{}\n")
        cache = f"{CACHE_DIR}/neuron/compile_cache"
        for k in KEYS:
            writer.write_text(f"{cache}/{k}/graph.hlo", "hlo\n")
            writer.write_text(f"{cache}/{k}/graph_{k}.neff", "neff\n")
            writer.write_text(f"{cache}/{k}/.artifact_metadata_v0.json", json.dumps({"cache_key": k}))
            writer.write_text(f"{cache}/{k}/.compilation_complete", "completed:0\nneff_size:5\n")
        neff = f"{cache}/{KEYS[0]}/graph_{KEYS[0]}.neff"
        graphs = [Graph(name="cte-b1-s256", role="context_encoding", batch=1, bucket=256, artifact=neff)]
        chain = {"neuronc": "0.1.0", **(toolchain if toolchain is not None else packages)}
        extra = {"vllm_neuron": info}
        return writer.finish(BuildRecord.for_build(spec, key, chain, graphs=graphs, extra=extra))


def _service(files: dict[str, str], name: str = "vllm-0") -> dict[str, Any]:
    service = yaml.safe_load(files["docker-compose.yml"])["services"][name]
    assert isinstance(service, dict)
    return service


def _stub_vllm(tmp_path: Path) -> Path:
    """A ``vllm`` that writes its arguments, its environment and the cache it was given to a JSON file."""
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys, pathlib\n"
        "root = pathlib.Path(os.environ['VLLM_CACHE_ROOT'])\n"
        "tree = sorted(str(p.relative_to(root)) for p in root.rglob('*') if p.is_file())\n"
        "(root / 'neuron/compile_cache/.lock-probe').write_text('x')  # the plugin writes lock files here\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith(('VLLM_', 'NEURON_'))}\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': env, 'tree': tree}))\n"
    )
    stub.chmod(0o755)
    return stub


# -- the image of each release ------------------------------------------------------------------------


def test_the_vllm_neuron_releases_are_2_31_0_to_2_33_1() -> None:
    assert [r.version for r in ROWS] == ["2.31.0", "2.31.1", "2.32.0", "2.33.0", "2.33.1"]
    assert {r.version: _image(r) is not None for r in ROWS} == {
        "2.31.0": True,
        "2.31.1": True,
        "2.32.0": True,
        "2.33.0": True,
        "2.33.1": False,
    }


# A host compile deploys to the release's image only where the matrix knows every version the image pins:
# no source names the libtorch-neuronx-lite of 2.33.0's image (test_a_pin_no_source_names_is_refused).
SERVED = [
    pytest.param(r, in_image, id=f"{r.version}-{'compiled-in-the-dlc' if in_image else 'compiled-on-a-host'}")
    for r in ROWS
    if (image := _image(r)) is not None
    for in_image in (True, False)
    if in_image or None not in image_pins(image).values()
]


@pytest.mark.parametrize(("release", "in_image"), SERVED)
def test_each_release_serves_from_a_writable_cache_with_a_miss_fatal(
    tmp_path: Path, release: Release, in_image: bool
) -> None:
    image = _image(release)
    assert image is not None
    kv = {KV_SIZING_ENV[0]: "0.25"}
    recorded = {"NEURON_CC_FLAGS": "--model-type=transformer"}
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=in_image, kv=kv, compile_env=recorded)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="trn2.48xlarge", replicas=2))
    # The image the compile ran in, by digest; else the release's image from the support matrix.
    assert rendered.image == (f"{image.repository}@{DIGEST}" if in_image else image.reference)
    files = _files(rendered)
    env = _env(files["vllm.env"].replace("'", ""))
    plugin = str(image.plugin)
    switch = "VLLM_NEURON_" if plugin.startswith("0.21.") else "NEURON_LIBTORCH_"
    # Both no-compile switches, the route and LNC as compiled, and the compile's recorded variables.
    assert env == {
        "VLLM_NEURON_DISABLE_WARMUP_COMPILE": "1",
        f"{switch}DISABLE_GRAPH_CAPTURE_BACKEND": "1",
        # The route only from 0.29 (below, unset is the plugin's own default); the target the key names.
        **({"VLLM_NEURON_BACKEND": "neuron_native"} if plugin.startswith("0.29.") else {}),
        "NEURON_LOGICAL_NC_CONFIG": "2",
        "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2",
        **kv,
        **recorded,
    }
    args = read_manifest(bundle).extra["vllm_neuron"]["engine_args"]
    assert args[args.index("--num-gpu-blocks-override") + 1] == "4096"  # the block count the compile sized
    for index in (0, 1):
        service = _service(files, f"vllm-{index}")
        assert service["image"] == rendered.image
        assert service["environment"] == {"VLLM_CACHE_ROOT": CONTAINER_CACHE, **env}
        assert service["volumes"] == [
            {
                "type": "bind",
                "source": f"{bundle.absolute()}/artifacts",
                "target": "/bundle/artifacts",
                "read_only": True,
            }
        ]
        command = service["command"]
        assert command[:2] == ["sh", "-c"] and "/bundle/artifacts/vllm-cache/." in command[2]
        assert command[4:7] == ["vllm", "serve", "/bundle/artifacts/checkpoint"]
        assert command[7:] == [*args, "--port", "8080"]  # where the DLC health check polls
    text = "\n".join(files.values())
    assert "NEURON_COMPILED_ARTIFACTS" not in text  # the torch.compile plugin reads only VLLM_CACHE_ROOT
    scenario = json.loads(files["guidellm-scenario.json"])
    assert scenario["spec"]["profile"]["max_concurrency"] == 8 * 2


def test_2_33_1_has_no_image_and_is_refused_naming_2_33_0s(tmp_path: Path) -> None:
    release, previous = find_release("2.33.1"), find_release("2.33.0")
    assert release is not None and previous is not None
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False)
    with pytest.raises(InvalidInputError) as caught:
        render(bundle, "vllm")
    assert caught.value.exit_code == 2
    assert "Neuron SDK 2.33.1 has no AWS vLLM container for vllm-neuron (torch.compile) bundles" in str(caught.value)
    image = _image(previous)
    assert image is not None
    assert f"{image.reference} (SDK 2.33.0; vLLM 0.29.0, vllm-neuron 0.29.0.1.2.0)" in str(caught.value.hint)
    # 2.33.1 rebuilt libtorch-neuronx-lite (.4089) and no source names 2.33.0's image's: not a fit (issue 28).
    assert "ship this bundle's versions" not in str(caught.value.hint)
    assert render(bundle, "vllm", DeployOptions(image=image.reference)).image == image.reference


def test_a_host_compile_with_other_versions_than_the_releases_image_is_refused(tmp_path: Path) -> None:
    release = find_release("2.32.0")
    image = _image(release) if release is not None else None
    assert release is not None and image is not None
    toolchain = {**image.packages, "neuronx-cc": "2.27.9999.0"}
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False, toolchain=toolchain)
    with pytest.raises(InvalidInputError, match="every compiled graph would miss the plugin's cache") as caught:
        render(bundle, "vllm")
    assert "neuronx-cc 2.27.9999.0" in str(caught.value) and "--image" in str(caught.value.hint)


def test_a_host_compile_with_another_lite_build_than_the_images_is_refused(tmp_path: Path) -> None:
    # 2.32.0's SDK ships lite 2.11 and 2.12 builds; its image pins the 2.11 one (compilation_cache.md:
    # the lite version is part of every key).
    release = find_release("2.32.0")
    image = _image(release) if release is not None else None
    assert release is not None and image is not None
    other = next(v for v in release.packages["libtorch-neuronx-lite"] if v != image.packages["libtorch-neuronx-lite"])
    toolchain = {**image.packages, "libtorch-neuronx-lite": other}
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False, toolchain=toolchain)
    with pytest.raises(InvalidInputError, match="every compiled graph would miss the plugin's cache") as caught:
        render(bundle, "vllm")
    assert f"libtorch-neuronx-lite {other}" in str(caught.value)


def test_trn3_runs_at_lnc_2_on_the_devices_its_tp_needs(tmp_path: Path) -> None:
    release = find_release("2.33.0")
    assert release is not None
    bundle = _vllm_neuron_bundle(tmp_path, release, target="trn3", lnc=None)
    files = _files(render(bundle, "vllm"))
    service = _service(files)
    assert service["environment"]["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert len(service["devices"]) == 1  # tp 4 at LNC 2: one Trn3 device (8 NeuronCore-v4, 4 logical)
    assert "1 replica(s) on a trn3 host" in files["docker-compose.yml"]


# -- what runs at start-up ----------------------------------------------------------------------------


def test_serve_sh_copies_the_read_only_cache_into_a_writable_root_and_starts_vllm(tmp_path: Path) -> None:
    release = find_release("2.31.1")
    assert release is not None
    recorded = {"NEURON_CC_FLAGS": "--model-type=transformer -O1"}  # a space: one value through vllm.env
    bundle = _vllm_neuron_bundle(tmp_path, release, in_image=False, kv={KV_SIZING_ENV[1]: "2"}, compile_env=recorded)
    where = tmp_path / "served $HOME bundle"
    out = tmp_path / "deploy"
    from neuronc.deploy import write

    write(render(bundle, "vllm", DeployOptions(bundle_path=str(where))), out)
    bundle.rename(where)
    for path in [where, *where.rglob("*")]:  # the store keeps bundles read-only
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    stub = _stub_vllm(tmp_path)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "HOME": "/nowhere", "TMPDIR": str(tmp_path)}
    try:
        proc = subprocess.run(["sh", str(out / "serve.sh")], capture_output=True, text=True, env=env, check=False)
    finally:
        for path in [where, *where.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    root = Path(seen["env"].pop("VLLM_CACHE_ROOT"))
    assert root.parent == tmp_path and root.name.startswith("neuronc-vllm-cache.")
    assert seen["env"] == {
        "VLLM_NEURON_DISABLE_WARMUP_COMPILE": "1",
        "VLLM_NEURON_DISABLE_GRAPH_CAPTURE_BACKEND": "1",  # the 0.21 line's name (SDK 2.31.1)
        "NEURON_LOGICAL_NC_CONFIG": "2",
        "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2",
        KV_SIZING_ENV[1]: "2",
        **recorded,
    }
    assert seen["tree"] == sorted(
        f"neuron/compile_cache/{k}/{name}"
        for k in KEYS
        for name in ("graph.hlo", f"graph_{k}.neff", ".artifact_metadata_v0.json", ".compilation_complete")
    )
    assert seen["argv"][:2] == ["serve", f"{where}/artifacts/checkpoint"]
    assert seen["argv"][-2:] == ["--port", "8080"]
    assert seen["argv"][seen["argv"].index("--num-gpu-blocks-override") + 1] == "4096"
    # A root given by the user is seeded instead of a temporary one.
    mine = tmp_path / "my-cache"
    proc = subprocess.run(
        ["sh", str(out / "serve.sh")], capture_output=True, text=True, env={**env, "VLLM_CACHE_ROOT": str(mine)}
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["env"]["VLLM_CACHE_ROOT"] == str(mine) and (mine / "neuron/compile_cache").is_dir()


def test_the_containers_start_up_command_seeds_its_cache_then_execs_the_server(tmp_path: Path) -> None:
    """The compose command's script, as docker compose hands it to sh (``$$`` -> ``$``), with the
    container paths replaced by ones on this host."""
    release = find_release("2.32.0")
    assert release is not None
    bundle = _vllm_neuron_bundle(tmp_path, release)
    command = _service(_files(render(bundle, "vllm")))["command"]
    source, root = f"{bundle}/artifacts/vllm-cache", tmp_path / "container-cache"
    assert command[2] == seed_script("/bundle/artifacts/vllm-cache", CONTAINER_CACHE)
    script = seed_script(source, str(root)).replace("$$", "$")
    stub = _stub_vllm(tmp_path)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "VLLM_CACHE_ROOT": str(root)}
    proc = subprocess.run(["sh", "-c", script, *command[3:]], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == command[5:] and len(seen["tree"]) == 4 * len(KEYS)


def test_the_compose_file_writes_dollars_as_compose_reads_them(tmp_path: Path) -> None:
    release = find_release("2.32.0")
    assert release is not None
    command = _service(_files(render(_vllm_neuron_bundle(tmp_path, release), "vllm")))["command"]
    script = command[2]
    assert '"$$@"' in script and script.replace("$$", "").count("$") == 0  # compose expands a lone $


# -- the record is checked before anything is written ------------------------------------------------


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"engine_args": ["--max-num-seqs", "8", "--port", "9"]}, "extra.vllm_neuron.engine_args"),
        ({"engine_args": ["/elsewhere", "--max-num-seqs", "8"]}, "extra.vllm_neuron.engine_args"),
        ({"engine_args": ["--served-model-name", "m$(id)"]}, "extra.vllm_neuron.engine_args"),
        ({"cache_root": "../../etc"}, "extra.vllm_neuron.cache_root"),
        ({"logical_nc_config": 3}, "extra.vllm_neuron.logical_nc_config"),
        ({"kv_sizing_env": {"LD_PRELOAD": "/x.so"}}, "extra.vllm_neuron.kv_sizing_env"),
        ({"runner": {"pinned": "public.ecr.aws/neuron/x:latest"}}, "extra.vllm_neuron.runner.pinned"),
    ],
)
def test_a_record_no_serving_file_can_be_written_from_is_refused(
    tmp_path: Path, record: dict[str, Any], field: str
) -> None:
    release = find_release("2.32.0")
    assert release is not None
    bundle = _vllm_neuron_bundle(tmp_path, release, **record)
    with pytest.raises(BundleFormatError) as caught:
        render(bundle, "vllm")
    assert any(line.startswith(field) for line in caught.value.details), caught.value.details


# What a re-sealed manifest could put into serve.sh and the compose file (issue 34 item 4), and the
# argument each refusal names: flags neuronc never writes, argparse abbreviations (``--ho`` is ``--host``,
# ``--max-num`` would be ambiguous but ``--gpu`` is not), vLLM's ``_`` spellings, ``--flag=value``, a
# value that argparse would read as the next flag, a flag given twice, a value of the wrong kind.
SMUGGLED = [
    (["--trust-remote-code"], "--trust-remote-code"),
    (["--allowed-local-media-path", "/"], "--allowed-local-media-path"),
    (["--ho", "0.0.0.0"], "--ho"),
    (["--gpu", "0.5"], "--gpu"),
    (["--max_num_seqs", "8"], "--max_num_seqs"),
    (["--max-num-seqs=8"], "--max-num-seqs=8"),
    (["--served-model-name", "--trust-remote-code"], "--served-model-name"),
    (["--served-model-name", "m", "-tp", "64"], "-tp"),
    (["--block-size", "16", "--block-size", "32"], "--block-size"),
    (["--enable-prefix-caching", "--no-enable-prefix-caching"], "--no-enable-prefix-caching"),
    (["--dtype", "auto;x"], "auto;x"),
    (["--additional-config", "[1]"], "[1]"),
    (["/etc"], "/etc"),
    (["--block-size", "--trust-remote-code"], "--trust-remote-code"),
]


@pytest.mark.parametrize(("args", "named"), SMUGGLED, ids=[" ".join(a) for a, _ in SMUGGLED])
def test_engine_args_allow_only_the_flags_the_compile_writes(tmp_path: Path, args: list[str], named: str) -> None:
    from test_backend_vllm_neuron import invoke

    release = find_release("2.32.0")
    assert release is not None
    written = list(read_manifest(_vllm_neuron_bundle(tmp_path / "c", release)).extra["vllm_neuron"]["engine_args"])
    for flag in set(args) & set(written):  # each smuggled flag in place of the compile's (one value each)
        at = written.index(flag)
        del written[at : at + 2]
    bundle = _vllm_neuron_bundle(tmp_path, release, engine_args=[*written, *args])
    code, report, err = invoke("deploy", str(bundle), "--for", "vllm", "--out", str(tmp_path / "out"), "--json")
    assert code == 2, (report, err)
    (line,) = [d for d in report["details"] if d.startswith("extra.vllm_neuron.engine_args")]
    assert repr(named) in line, line
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_allow_list_is_what_the_compile_can_write(tmp_path: Path) -> None:
    """Every option set: the compile's kwargs are exactly ENGINE_FIELDS (and the checkpoint), and what
    ``engine_cli`` writes from them passes the check deploy makes, switched on and off."""
    options = {
        "gpu_memory_utilization": 0.00001,
        "block_size": 32,
        "enable_prefix_caching": False,
        "num_gpu_blocks_override": 512,
    }
    spec = make_spec(
        backend="vllm-neuron", target="trn2", tp_degree=4, batch_size=8, sequence=SEQ, weights="on-load",
        compiler_flags=(), options=options,
    )  # fmt: skip
    kwargs = engine_kwargs(spec, "/bundle/ckpt")
    assert set(kwargs) - {"model", "tokenizer"} == set(ENGINE_FIELDS)
    for prefix in (False, True):
        args = engine_cli({**kwargs, "enable_prefix_caching": prefix})
        assert engine_args_problem(args) is None, args
        assert {a for a in args if a.startswith("--")} <= set(served_flags())
    with pytest.raises(ValueError, match="trust_remote_code"):
        engine_cli({**kwargs, "trust_remote_code": True})  # the compile cannot write what deploy refuses


def test_each_allowed_flag_is_an_engine_argument_of_every_vllm_the_plugin_images_pin() -> None:
    """Recorded facts (tests/fixtures/vllm_neuron/engine_args.json: ``class EngineArgs`` of each vLLM
    wheel's vllm/engine/arg_utils.py, whose ``add_cli_args`` writes ``--field-name``); the serving
    contract parses each flag with the version's own parser (tests/contract/serving/test_vllm_parser.py)."""
    recorded = json.loads((Path(__file__).parent / "fixtures/vllm_neuron/engine_args.json").read_text())["versions"]
    pinned = {i.vllm for r in releases() for i in r.images_serving(Serves.VLLM_NEURON) if i.vllm}
    assert pinned and pinned <= set(recorded), (pinned, set(recorded))
    for version in sorted(pinned):
        fields = set(recorded[version]["engine_args_fields"])
        assert set(ENGINE_FIELDS) <= fields, (version, set(ENGINE_FIELDS) - fields)


def test_serve_sh_exec_line_quotes_the_additional_config(tmp_path: Path) -> None:
    release = find_release("2.31.0")
    assert release is not None
    bundle = _vllm_neuron_bundle(tmp_path, release)
    argv = _exec_argv(_files(render(bundle, "vllm"))["serve.sh"])
    config = json.loads(argv[argv.index("--additional-config") + 1])
    assert config["neuron_config"]["num_batched_tokens_buckets"] == [256, 512]
    assert shlex.join(argv).count("--additional-config") == 1 and os.sep in argv[2]


# -- a bundle compiled through the SDK doubles -----------------------------------------------------------


def test_a_bundle_compiled_in_the_dlc_image_deploys_with_that_image_and_its_own_cache(
    tmp_path: Path, tiny_llama: Path, fake_runtime: Any
) -> None:
    from test_backend_vllm_neuron import invoke, write_profile

    fake_runtime.add_release_images()
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.31.1'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    bundle = Path(report["builds"][0]["bundle"])
    info = read_manifest(bundle).extra["vllm_neuron"]
    out = tmp_path / "deploy"
    code, report, err = invoke("deploy", str(bundle), "--for", "vllm", "--out", str(out), "--json")
    assert code == 0, (report, err)
    compose = yaml.safe_load((out / "docker-compose.yml").read_text())
    services = {k: s for k, s in compose["services"].items() if k.startswith("vllm-")}
    assert services, compose
    for service in services.values():
        assert service["image"] == info["runner"]["pinned"]  # the image the graphs were compiled in
        assert service["command"][4:] == [
            "vllm",
            "serve",
            "/bundle/artifacts/checkpoint",
            *info["engine_args"],
            "--port",
            "8080",
        ]
        assert service["environment"]["NEURON_LOGICAL_NC_CONFIG"] == "2"
        assert service["environment"]["VLLM_NEURON_DISABLE_WARMUP_COMPILE"] == "1"
    # serve.sh seeds a cache root holding exactly the entries the compile recorded.
    stub = _stub_vllm(tmp_path)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "HOME": "/nowhere", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["sh", str(out / "serve.sh")], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    tree = json.loads(proc.stdout)["tree"]
    assert sorted({p.split("/")[2] for p in tree}) == sorted(info["cache_keys"])


def test_a_vllm_neuron_bundle_without_its_record_is_refused(tmp_path: Path) -> None:
    release = find_release("2.32.0")
    assert release is not None
    bundle = _vllm_neuron_bundle(tmp_path, release)
    manifest = bundle / "manifest.json"
    data = json.loads(manifest.read_text())
    data["extra"].pop("vllm_neuron")
    manifest.chmod(0o644)
    manifest.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match=r"no extra\.vllm_neuron record") as caught:
        render(bundle, "vllm")
    assert "recompile" in str(caught.value.hint)


def test_deploy_reaches_the_vllm_neuron_engine_record_only_through_the_backends_serving_capability() -> None:
    """The record's checks and the serve environment are the vllm-neuron backend's (issue 40 item 4):
    deploy asks ``recorded_engine`` for a bundle's backend; other backends, known or not, have none."""
    from neuronc.backends import get_backend
    from neuronc.backends.serving import RecordedEngine, recorded_engine
    from neuronc.backends.vllm_neuron.facts import CACHE_ROOT_ENV, FAIL_ON_MISS_ENV, RECORDED_ENV_PREFIXES

    engine = recorded_engine("vllm-neuron")
    assert isinstance(engine, RecordedEngine)
    assert engine is get_backend("vllm-neuron").serving
    assert (engine.cache_root_env, engine.fail_on_miss_env) == (CACHE_ROOT_ENV, FAIL_ON_MISS_ENV)
    assert engine.kv_sizing_env == KV_SIZING_ENV
    assert engine.recorded_env_prefixes == RECORDED_ENV_PREFIXES
    assert engine.engine_args_problem(["--host", "0.0.0.0"]) is not None
    assert engine.env_value_problem("NEURON_CC_FLAGS", "--target trn2") is None
    assert engine.env_value_problem("NEURON_CC_FLAGS", "$(id)") is not None
    assert {name: recorded_engine(name) for name in ("nxdi", "optimum-neuron", "inductor", "no-such-backend")} == {
        "nxdi": None,
        "optimum-neuron": None,
        "inductor": None,
        "no-such-backend": None,
    }
