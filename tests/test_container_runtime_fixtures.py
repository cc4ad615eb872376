"""The container-runtime fixtures hide ``docker`` by shadowing it, never by dropping PATH directories.

Debian's docker.io (which Debian 12's docker-compose brings) installs ``docker`` in /usr/bin, beside
``sh`` and ``bash``; a fixture that removed every PATH directory holding a ``docker`` took the shells
with it, and the suite's subprocesses failed with "No such file or directory: 'bash'". Each test here
builds that layout: one directory first on PATH with ``sh``, ``bash`` and a ``docker`` that answers as a
client without an engine does, then asks for the fixture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sdk_doubles.fixtures import FakeRuntime

from neuronc.backends.containers import find_runtime


@pytest.fixture
def debian_usr_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH holding ``sh``, ``bash`` and a ``docker`` without an engine (as /usr/bin on Debian)."""
    usr_bin = tmp_path / "usr-bin"
    usr_bin.mkdir()
    for shell in ("sh", "bash"):
        real = shutil.which(shell)
        assert real is not None, f"{shell} is not on this machine's PATH"
        (usr_bin / shell).symlink_to(real)
    docker = usr_bin / "docker"
    docker.write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n",
        encoding="utf-8",
    )
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(usr_bin), os.environ.get("PATH", "")]))
    return usr_bin


def _shell_runs() -> str:
    done = subprocess.run(["bash", "-c", "echo ran"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_no_runtime_fixture_hides_a_docker_beside_the_shells(
    debian_usr_bin: Path, request: pytest.FixtureRequest
) -> None:
    assert find_runtime() is not None  # the layout really has a docker to hide
    request.getfixturevalue("vllm_neuron_host")
    assert find_runtime() is None
    assert shutil.which("bash") == str(debian_usr_bin / "bash")
    assert shutil.which("sh") == str(debian_usr_bin / "sh")
    assert _shell_runs() == "ran"


def test_fake_runtime_fixture_shadows_a_docker_beside_the_shells(
    debian_usr_bin: Path, request: pytest.FixtureRequest
) -> None:
    fake: FakeRuntime = request.getfixturevalue("fake_runtime")
    runtime = find_runtime()
    assert runtime is not None
    assert runtime.executable == str(fake.bin_dir / "docker")
    assert shutil.which("bash") == str(debian_usr_bin / "bash")
    assert _shell_runs() == "ran"
