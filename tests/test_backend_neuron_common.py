"""What the Neuron backends share: device and platform detection, the per-build environment, flags, tp degrees."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from sdk_doubles.fixtures import make_spec

from neuronc.backends import get_backend
from neuronc.backends.base import CompileJob
from neuronc.backends.neuron.env import (
    DEFAULT_COMPILE_CACHE,
    build_env,
    host_platform,
    neuron_device_present,
    platform_target,
    split_cache_flags,
)
from neuronc.errors import ProfileError
from neuronc.keys import CompilerFlagsMode, applied_compiler_flags

PROFILE = """
model: {id: org/model}
backend: transformers-neuronx
target: inf2
tp_degree: 2
sequence: {max_length: 256}
compiler: {flags: ["-O1", "--enable-saturate-infinity"]}
"""
NXDI_TRN2 = """
model: {id: org/model}
backend: nxdi
target: trn2
tp_degree: 2
sequence: {max_length: 256}
"""


def test_neuron_device_detection(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    proc = tmp_path / "devices"
    proc.write_text("Character devices:\n  1 mem\n 10 misc\n")
    assert not neuron_device_present(proc, dev)
    proc.write_text("Character devices:\n  1 mem\n238 neuron\n")
    assert neuron_device_present(proc, dev)
    proc.write_text("Character devices:\n")
    (dev / "neuron0").touch()
    assert neuron_device_present(proc, dev)
    assert not neuron_device_present(tmp_path / "missing", tmp_path / "nodev")


def test_host_platform_from_the_instance_type(tmp_path: Path) -> None:
    product = tmp_path / "product_name"
    for name, platform in (("inf2.48xlarge", "trn1"), ("trn1n.32xlarge", "trn1"), ("trn2.48xlarge", "trn2")):
        product.write_text(name + "\n")
        assert host_platform(product, device_present=True) == platform
    product.write_text("m5.xlarge\n")
    assert host_platform(product, device_present=True) is None
    assert host_platform(product, device_present=False) is None
    assert host_platform(tmp_path / "missing", device_present=True) is None


def test_platform_targets() -> None:
    assert [platform_target(t) for t in ("inf2", "trn1", "trn2")] == ["trn1", "trn1", "trn2"]


def test_cache_flags_are_kept_apart() -> None:
    assert split_cache_flags(["-O1", "--cache_dir=s3://b/c", "--no-cache", "--retry_failed_compilation"]) == (
        ["-O1"],
        ["--cache_dir=s3://b/c", "--no-cache", "--retry_failed_compilation"],
    )


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (CompilerFlagsMode.NONE, []),
        (CompilerFlagsMode.PROFILE, ["-O1"]),
        (CompilerFlagsMode.PROFILE_AND_ENV, ["-O1", "--verbose=35"]),
    ],
)
def test_applied_compiler_flags_follow_the_mode_and_never_count_cache_flags(
    mode: CompilerFlagsMode, expected: list[str]
) -> None:
    environ = {"NEURON_CC_FLAGS": "--verbose=35 --cache_dir=/shared/cache"}
    assert applied_compiler_flags(mode, ("-O1", "--no_cache"), environ) == expected


def test_build_env_on_a_cpu_host(tmp_path: Path) -> None:
    spec = make_spec(PROFILE, tmp_path)
    environ = {"NEURON_CC_FLAGS": "--verbose=35 --cache_dir=/shared/cache"}
    flags = applied_compiler_flags(CompilerFlagsMode.PROFILE_AND_ENV, spec.compiler_flags, environ)
    env = build_env(spec, {}, tmp_path / "work", compiler_flags=flags, environ=environ, host=None, detect_host=False)
    assert shlex.split(env["NEURON_CC_FLAGS"]) == [
        "-O1",
        "--enable-saturate-infinity",
        "--verbose=35",
        "--cache_dir=/shared/cache",
    ]
    assert env["NEURON_COMPILE_CACHE_URL"] == DEFAULT_COMPILE_CACHE
    assert env["BASE_COMPILE_WORK_DIR"] == f"{tmp_path}/work/nxd/"
    assert env["TMPDIR"] == f"{tmp_path}/work/tmp"
    assert env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"


def test_build_env_without_flags_keeps_only_the_cache_location(tmp_path: Path) -> None:
    spec = make_spec(PROFILE, tmp_path)
    environ = {"NEURON_CC_FLAGS": "--verbose=35 --cache_dir=/shared/cache"}
    env = build_env(spec, {}, tmp_path, environ=environ, host="trn1")
    assert env["NEURON_CC_FLAGS"] == "--cache_dir=/shared/cache"


def test_build_env_on_a_neuron_host_keeps_the_users_cache_and_job_env_wins(tmp_path: Path) -> None:
    spec = make_spec(PROFILE, tmp_path)
    environ = {"NEURON_COMPILE_CACHE_URL": "s3://team/neuron-cache"}
    env = build_env(spec, {"TMPDIR": "/scratch"}, tmp_path, environ=environ, host="trn1")
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in env
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://team/neuron-cache"
    assert env["TMPDIR"] == "/scratch"


def test_a_host_of_another_family_compiles_for_the_target_as_optimum_does(tmp_path: Path) -> None:
    inf2 = make_spec(PROFILE, tmp_path)
    trn2 = make_spec(NXDI_TRN2, tmp_path)
    assert build_env(inf2, {}, tmp_path, host="trn2")["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"
    assert build_env(trn2, {}, tmp_path, host="trn1")["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in build_env(trn2, {}, tmp_path, host="trn2")


def test_nxdi_pins_the_logical_nc_config_in_the_environment(tmp_path: Path) -> None:
    spec = make_spec(NXDI_TRN2, tmp_path)
    backend = get_backend("nxdi")
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=tmp_path,
        artifacts_dir=tmp_path / "a",
        logs_dir=tmp_path / "l",
        work_dir=tmp_path / "w",
    )
    env = backend.compile_env(job)  # type: ignore[attr-defined]
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert env["NEURON_CC_FLAGS"] == ""


@pytest.mark.parametrize("name", ["nxdi", "optimum-neuron"])
def test_backends_that_read_no_compiler_flags_refuse_them_at_validate_time(name: str, tmp_path: Path) -> None:
    text = PROFILE.replace("transformers-neuronx", name)
    with pytest.raises(ProfileError) as info:
        make_spec(text, tmp_path)
    details = "\n".join(info.value.details)
    assert "compiler.flags" in details
    assert get_backend(name).toolchain.compiler_flags_mode is CompilerFlagsMode.NONE
    assert "NEURON_CC_FLAGS" in get_backend(name).rules.compiler_flags_problem()


@pytest.mark.parametrize(("tp", "ok"), [(1, True), (4, True), (16, True), (64, True), (3, False), (12, False)])
def test_trn2_takes_the_documented_tp_degrees_only(tp: int, ok: bool, tmp_path: Path) -> None:
    text = f"model: {{id: org/model}}\nbackend: nxdi\ntarget: trn2\ntp_degree: {tp}\nsequence: {{max_length: 256}}\n"
    if ok:
        assert make_spec(text, tmp_path).tp_degree == tp
        return
    with pytest.raises(ProfileError) as info:
        make_spec(text, tmp_path)
    assert "allowed: 1, 2, 4, 8, 16, 32, 64" in "\n".join(info.value.details)


@pytest.mark.parametrize("name", ["nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"])
def test_every_neuron_backend_reports_its_toolchain_and_reads_no_rank_shards(name: str) -> None:
    backend = get_backend(name)
    versions = backend.toolchain.toolchain_versions()
    assert versions["neuronc"]
    assert "neuronx-cc" in versions and "torch-neuronx" in versions
    assert backend.toolchain.consumes_rank_shards is False
    assert backend.rules.options_model is not None
    assert not backend.runtime.can_run
    assert not backend.toolchain.availability().available
