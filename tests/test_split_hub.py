"""`neuronc split org/name`: a Hugging Face repo id is taken from the local Hugging Face cache (offline here).

The cache is laid out as huggingface_hub lays it out (blobs, snapshot symlinks, refs); huggingface_hub's
own snapshot_download finds the snapshot. No Hub access.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pipeline import fake_hub_cache, write_tiny_llama
from click.testing import CliRunner

from neuronc._output import out
from neuronc.checkpoint import check_split
from neuronc.cli import app

COMMIT = "c" * 40


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake_hub_cache(tmp_path / "hf", "acme/tiny", COMMIT, write_tiny_llama(tmp_path / "src"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _split(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["split", *args])
    out.configure(json_mode=False)
    return result.exit_code, result.stdout, result.stderr


def test_repo_id_is_split_from_the_hugging_face_cache(hub: Path) -> None:
    code, stdout, stderr = _split("acme/tiny", "--tp", "2", "--out", str(hub / "w"), "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    snapshot = hub / "hf" / "hub" / "models--acme--tiny" / "snapshots" / COMMIT
    assert Path(data["model_dir"]) == snapshot
    assert check_split(hub / "w").ok  # reads the source back through the recorded snapshot path


def test_revision_pins_a_commit(hub: Path) -> None:
    code, _, stderr = _split("acme/tiny", "--revision", COMMIT, "--tp", "2", "--out", str(hub / "w"))
    assert code == 0, stderr
    code, _, stderr = _split("acme/tiny", "--revision", "d" * 40, "--tp", "2", "--out", str(hub / "w2"))
    assert code == 2
    assert f"cannot download 'acme/tiny@{'d' * 40}'" in stderr
    assert not (hub / "w2").exists()


def test_repo_id_not_in_the_cache_offline_is_exit_2(hub: Path) -> None:
    code, _, stderr = _split("acme/absent", "--tp", "2", "--out", str(hub / "w"))
    assert code == 2
    assert "cannot download 'acme/absent@main'" in stderr
    assert "pass a checkpoint directory that exists, or a repo id" in stderr
    assert not (hub / "w").exists()


def test_a_local_directory_wins_over_a_repo_id_and_takes_no_revision(hub: Path) -> None:
    write_tiny_llama(hub / "acme" / "tiny", seed=5)  # ./acme/tiny exists: it is the checkpoint
    code, stdout, stderr = _split("acme/tiny", "--tp", "2", "--out", str(hub / "w"), "--json")
    assert code == 0, stderr
    assert Path(json.loads(stdout)["model_dir"]) == (hub / "acme" / "tiny").resolve()
    code, _, stderr = _split("acme/tiny", "--revision", "main", "--tp", "2", "--out", str(hub / "w2"))
    assert code == 2
    assert "--revision applies to a repo id" in stderr


def test_a_missing_path_that_is_not_a_repo_id_is_named(hub: Path) -> None:
    code, _, stderr = _split("./no/such/dir", "--tp", "2", "--out", str(hub / "w"))
    assert code == 2
    assert "no/such/dir: no such directory" in stderr
