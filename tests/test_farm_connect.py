"""`--executor ray` against a cluster that is not there, and the Ray options' own checks (issue 34).

Ray retries an unreachable GCS for ever, in C++ code that Ctrl-C and SIGTERM do not interrupt. The
driver must end by itself: exit 5 naming the address (nothing listens, the name does not resolve,
or something listens that never answers as Ray would), and exit 130 on Ctrl-C while it waits. Real
`neuronc` processes and real sockets; no cluster is started (these need Ray installed, nothing else).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app

SHIPPED_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "tiny-llama-cpu.yaml"


def _neuronc(*args: str, cwd: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    return proc, time.monotonic() - started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def black_hole() -> Iterator[str]:
    """host:port where the kernel completes TCP handshakes (a listen backlog) and nothing ever answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def _error(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout.strip(), proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    error = data.get("error", data)
    return error if isinstance(error, dict) else data


@pytest.mark.ray
@pytest.mark.parametrize("command", ["plan", "compile"])
def test_nothing_listening_is_exit_5_naming_the_address_at_once(tmp_path: Path, command: str) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_free_port()}"
    extra = ["--store", "s3://no-bucket/x"] if command == "compile" else []
    proc, took = _neuronc(command, str(SHIPPED_PROFILE), "--executor", "ray", "--ray-address", address, *extra,
                          "--json", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    assert f"cannot connect to the Ray cluster at {address}" in _error(proc)["message"]
    assert took < 45, took  # Ray alone would retry for ever


@pytest.mark.ray
def test_an_unresolvable_host_is_exit_5(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    for address in ("no-such-host.invalid:6379", "ray://no-such-host.invalid:10001"):
        proc, _ = _neuronc("plan", str(SHIPPED_PROFILE), "--executor", "ray", "--ray-address", address, "--json",
                           cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 5, proc.stderr
        message = _error(proc)["message"]
        assert address in message and "cannot resolve no-such-host.invalid" in message


@pytest.mark.ray
def test_a_port_that_never_answers_is_bounded_by_the_connect_timeout(tmp_path: Path, black_hole: str) -> None:
    pytest.importorskip("ray")
    proc, took = _neuronc("plan", str(SHIPPED_PROFILE), "--executor", "ray", "--ray-address", black_hole,
                          "--ray-connect-timeout", "3", "--json", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    assert _error(proc)["message"] == f"cannot connect to the Ray cluster at {black_hole}: no answer in 3 s"
    assert took < 40, took


@pytest.mark.ray
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_connecting_is_exit_130(tmp_path: Path, black_hole: str, sig: signal.Signals) -> None:
    pytest.importorskip("ray")
    env = {**os.environ, "NEURONC_STORE": str(tmp_path / "store"), "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "neuronc", "plan", str(SHIPPED_PROFILE), "--executor", "ray",
             "--ray-address", black_hole, "--ray-connect-timeout", "600"],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp_path,
        )  # fmt: skip
        try:
            # Wait until the driver is inside ray.init (Ray logs its first failed GCS attempt after 5 s),
            # or 40 s on a loaded machine: a signal at any moment after that must end it.
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and b"Failed to connect to GCS" not in log.read_bytes():
                assert proc.poll() is None, log.read_text()
                time.sleep(0.2)
            proc.send_signal(sig)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 130, log.read_text()


# -- the options, checked before anything connects ------------------------------------------------


def _cli(*args: str) -> Any:
    out.reset()
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    "option",
    [
        ["--ray-address", "head:6379"],
        ["--ray-resources", "nan_please=nan"],
        ["--ray-runtime-env", "{}"],
        ["--ray-retries", "3"],
        ["--ray-shared-store"],
        ["--ray-connect-timeout", "5"],
    ],
)
def test_ray_options_without_executor_ray_are_refused(tmp_path: Path, option: list[str]) -> None:
    result = _cli("compile", str(SHIPPED_PROFILE), "--store", str(tmp_path / "s"), *option)
    assert result.exit_code == 2, result.output
    assert f"{option[0]}" in result.output and "only apply with --executor ray" in result.output
    assert not (tmp_path / "s").exists()
    if option[0] in {"--ray-address", "--ray-resources", "--ray-runtime-env", "--ray-connect-timeout"}:
        planned = _cli("plan", str(SHIPPED_PROFILE), *option)
        assert planned.exit_code == 2 and "only apply with --executor ray" in planned.output


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x=nan", "not a finite amount"),
        ("x=inf", "not a finite amount"),
        ("x=-1", "not a finite amount"),
        ("x=lots", "is not a number"),
        ("CPU =1", "CPU is Ray's own resource"),
        (" GPU=1", "GPU is Ray's own resource"),
        ("memory\t=1", "memory is Ray's own resource"),
        ("object_store_memory=1", "Ray's own resource"),
        ("node:10.0.0.1=1", "Ray's own resource"),
        ("=1", "no resource name"),
        ("a b=1", "is not a resource name"),
        ("x=1,x=2", "given twice"),
    ],
)
def test_ray_resources_are_finite_custom_amounts(value: str, why: str) -> None:
    from click import BadParameter

    from neuronc.cli._executor import parse_resources

    with pytest.raises(BadParameter, match=why):
        parse_resources([value])


def test_ray_resources_names_are_stripped() -> None:
    from neuronc.cli._executor import parse_resources

    assert parse_resources([" neuron_cores = 32 ", "sdk_2_26, zero=0"]) == {
        "neuron_cores": 32.0,
        "sdk_2_26": 1.0,
        "zero": 0.0,
    }


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("pip: [neuronc\nenv_vars: {A: 1}\n", ":2:9"),  # an unclosed flow sequence
        ("pip: !!python/object/apply:os.system ['id']\n", ":1:6"),
        ("a: 1\n  b: 2\n", ":2:4"),
    ],
)
def test_a_bad_runtime_env_yaml_file_is_exit_2_at_file_line(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    result = _cli("compile", str(SHIPPED_PROFILE), "--executor", "ray", "--ray-address", "h:1",
                  "--ray-runtime-env", str(path), "--json")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{path}{where}" in result.output, result.output
    assert "Traceback" not in result.output
