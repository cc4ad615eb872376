"""Where a store is: ``NEURONC_STORE`` and ``--store`` open the same way, whatever the string holds.

``NEURONC_STORE=s3://bucket/prefix`` used to be a local directory named ``s3:`` in the working
directory: compile exited 0 having published nothing where CI looked. A URL in the variable now
opens the remote store exactly as ``--store URL`` does (here an endpoint nobody answers: exit 5,
naming the URL, before anything is built); a scheme neuronc does not know is exit 2. A
``~user`` path naming no user is exit 2, not a traceback.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from _bundles import neuronc, text


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """The shipped CPU profile and its tiny model, copied where the test runs."""
    proc = neuronc("profiles", "copy", "tiny-llama-cpu", tmp_path / "p", cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    return next((tmp_path / "p").glob("*.yaml"))


def _unreachable_env(url: str) -> dict[str, str]:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    return {
        "NEURONC_STORE": url,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_DEFAULT_REGION": "us-east-1",
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "NEURONC_REMOTE_RETRIES": "0",
        "NEURONC_REMOTE_DEADLINE": "20",
    }


def _error_message(document: dict[str, object]) -> str:
    """The error message of a --json document: a command's error document, or compile's report."""
    error = document.get("error")
    return str(error["message"] if isinstance(error, dict) else document.get("message"))


def _no_local_lookalike(cwd: Path) -> None:
    """Nothing like ``./s3:/bucket`` or ``./hf:/org``: the URL was never taken for a directory."""
    made = sorted(p.name for p in cwd.iterdir() if p.name.endswith(":"))
    assert not made, made


@pytest.mark.parametrize("url", ["s3://bucket/ci", "hf://org/neuronc-store"])
@pytest.mark.parametrize("require_hit", [True, False], ids=["require-hit", "build"])
def test_a_url_in_neuronc_store_opens_the_remote_store(
    tmp_path: Path, profile: Path, url: str, require_hit: bool
) -> None:
    args = ["compile", profile, "--json"] + (["--require-hit"] if require_hit else [])
    proc = neuronc(*args, cwd=tmp_path, env=_unreachable_env(url), timeout=300)
    assert proc.returncode == 5, text(proc)
    report = json.loads(proc.stdout)
    assert report["builds"] == [] or all(b["status"] != "built" for b in report["builds"]), report
    assert url in json.dumps(report), report
    assert "Traceback" not in proc.stderr.decode()
    _no_local_lookalike(tmp_path)


@pytest.mark.parametrize("command", [["store", "list"], ["compile", "{profile}", "--require-hit"]])
def test_an_unknown_scheme_is_invalid_input(tmp_path: Path, profile: Path, command: list[str]) -> None:
    args = [str(profile) if a == "{profile}" else a for a in command]
    for how in ("env", "flag"):
        env = {"NEURONC_STORE": "gs://bucket/ci"} if how == "env" else {}
        flag = ["--store", "gs://bucket/ci"] if how == "flag" else []
        proc = neuronc(*args, *flag, "--json", cwd=tmp_path, env=env)
        assert proc.returncode == 2, (how, text(proc))
        assert "unsupported scheme 'gs'" in _error_message(json.loads(proc.stdout)), (how, text(proc))
    _no_local_lookalike(tmp_path)


@pytest.mark.parametrize("command", [["store", "list"], ["compile", "{profile}", "--require-hit"]])
def test_a_home_of_a_user_that_does_not_exist_is_invalid_input(
    tmp_path: Path, profile: Path, command: list[str]
) -> None:
    args = [str(profile) if a == "{profile}" else a for a in command]
    for how in ("env", "flag"):
        env = {"NEURONC_STORE": "~nosuchuser-neuronc/store"} if how == "env" else {}
        flag = ["--store", "~nosuchuser-neuronc/store"] if how == "flag" else []
        proc = neuronc(*args, *flag, "--json", cwd=tmp_path, env=env)
        assert proc.returncode == 2, (how, text(proc))
        assert "Traceback" not in proc.stderr.decode()
        assert "~nosuchuser-neuronc" in _error_message(json.loads(proc.stdout))
