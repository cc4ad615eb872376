"""What the Neuron backends share: device detection, the per-build environment, option checks."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from sdk_doubles.fixtures import make_spec

from neuronc.backends import get_backend
from neuronc.backends._neuron_common import (
    DEFAULT_COMPILE_CACHE,
    build_env,
    neuron_device_present,
    platform_target,
    split_cache_flags,
)

PROFILE = """
model: {id: org/model}
backend: nxdi
target: inf2
tp_degree: 2
sequence: {max_length: 256}
compiler: {flags: ["-O1", "--enable-saturate-infinity"]}
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


def test_platform_targets() -> None:
    assert [platform_target(t) for t in ("inf2", "trn1", "trn2")] == ["trn1", "trn1", "trn2"]


def test_cache_flags_are_kept_apart() -> None:
    assert split_cache_flags(["-O1", "--cache_dir=s3://b/c", "--no-cache", "--retry_failed_compilation"]) == (
        ["-O1"],
        ["--cache_dir=s3://b/c", "--no-cache", "--retry_failed_compilation"],
    )


def test_build_env_on_a_cpu_host(tmp_path: Path) -> None:
    spec = make_spec(PROFILE, tmp_path)
    environ = {"NEURON_CC_FLAGS": "--verbose=35 --cache_dir=/shared/cache"}
    env = build_env(spec, {}, tmp_path / "work", environ=environ, device_present=False)
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


def test_build_env_on_a_neuron_host_keeps_the_users_cache_and_job_env_wins(tmp_path: Path) -> None:
    spec = make_spec(PROFILE, tmp_path)
    environ = {"NEURON_COMPILE_CACHE_URL": "s3://team/neuron-cache"}
    env = build_env(spec, {"TMPDIR": "/scratch"}, tmp_path, environ=environ, device_present=True)
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in env
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://team/neuron-cache"
    assert env["TMPDIR"] == "/scratch"


def test_nxdi_pins_the_logical_nc_config_in_the_environment(tmp_path: Path) -> None:
    from neuronc.backends.base import CompileJob

    spec = make_spec(PROFILE.replace("target: inf2", "target: trn2"), tmp_path)
    backend = get_backend("nxdi")
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=tmp_path,
        artifacts_dir=tmp_path / "a",
        logs_dir=tmp_path / "l",
        work_dir=tmp_path / "w",
    )
    assert backend.compile_env(job)["NEURON_LOGICAL_NC_CONFIG"] == "2"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"])
def test_every_neuron_backend_reports_its_toolchain_and_reads_no_rank_shards(name: str) -> None:
    backend = get_backend(name)
    versions = backend.toolchain_versions()
    assert versions["neuronc"]
    assert "neuronx-cc" in versions and "torch-neuronx" in versions
    assert backend.consumes_rank_shards is False  # type: ignore[attr-defined]
    assert not backend.availability().available
