"""The online path end to end: real huggingface_hub calls against HubDouble, a test double of the Hub.

HubDouble (tests/fixtures/hf-neuron-cache/hub_double.py) serves the fixture snapshot on 127.0.0.1
through the endpoints huggingface_hub 0.36 uses (model_info, tree listing, resolve). The CLI runs in
a subprocess with HF_ENDPOINT pointing at it, so huggingface_hub reads its environment as it would
in real use (it freezes HF_ENDPOINT and HF_HUB_OFFLINE at import time).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from neuronc.hubcache import entry_hash, resolve_cache_repo, serialize_entry

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
SNAPSHOT = FIXTURE / "snapshot"
REPO = "aws-neuron/optimum-neuron-cache"
LLAMA = "example-org/tiny-llama"
CC = "neuronxcc-2.21.33363.0+82129205"
DIGEST = "530ac5d5535fbd44ea3568b945966a64d88038666555b552362cd81756497e44"

sys.path.insert(0, str(FIXTURE))
from hub_double import HubDouble, iter_requests  # noqa: E402  (a fixture module, not a package)


def run(endpoint: str, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=endpoint, **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "neuronc", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_json(endpoint: str, *args: str, code: int = 0, **env: str) -> dict[str, Any]:
    proc = run(endpoint, *args, "--json", **env)
    assert proc.returncode == code, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def kinds(requests: list[tuple[str, str]]) -> dict[str, int]:
    return {kind: len(list(iter_requests(requests, kind))) for kind in ("info", "tree", "resolve")}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubDouble]:
    snapshot = tmp_path / "repo"
    shutil.copytree(SNAPSHOT, snapshot)
    with HubDouble({REPO: snapshot, LLAMA: FIXTURE / "models" / LLAMA}, page_size=40) as double:
        yield double


def _hashes(data: dict[str, Any]) -> list[str]:
    return sorted(e["hash"] for e in data["entries"])


def test_first_lookup_lists_and_downloads_then_a_repeat_costs_one_request(hub: HubDouble) -> None:
    first = run_json(hub.endpoint, "cache-lookup", LLAMA)
    requests = hub.reset_requests()
    seen = kinds(requests)
    assert seen["info"] == 1
    # Root listing + one scoped listing per compiler folder, several pages each (page_size=40).
    assert seen["tree"] > 6
    for _, path in iter_requests(requests, "tree"):
        listed = unquote(path.split("?")[0])
        assert listed.endswith("/0_REGISTRY") or listed.endswith("/tree/" + first["source"]["revision"]), listed
    # Each entry downloaded once (an alias shares its primary file's blob), then config.json of the model.
    registry_downloads = [p for _, p in iter_requests(requests, "resolve") if p.startswith(f"/{REPO}/")]
    assert len(registry_downloads) == first["stats"]["entries_read"]
    assert any(p.startswith(f"/{LLAMA}/resolve/") for _, p in requests)
    assert first["source"]["kind"] == "hub" and first["source"]["revision"] == hub.repos[REPO].sha
    assert first["digest_method"] == "emulated"
    assert {e["relation"] for e in first["entries"]} == {"model", "architecture"}

    second = run_json(hub.endpoint, "cache-lookup", LLAMA)
    (only,) = hub.reset_requests()
    assert only[1].startswith(f"/api/models/{REPO}")  # model_info: the revision, nothing else
    assert second["entries"] == first["entries"]
    # Parsed once: the index keeps each file's record under its path and blob id.
    assert first["stats"]["index"]["state"] == "built"
    assert first["stats"]["index"]["parsed"] >= first["stats"]["entries_read"]  # aliases are files too
    assert second["stats"]["index"] == {"state": "warm", "parsed": 0, "saved": False}

    # The same answer from the snapshot the Hub served (config.json now in the local HF cache).
    offline = run_json("http://127.0.0.1:9", "cache-lookup", LLAMA, "--snapshot", str(SNAPSHOT))
    assert _hashes(offline) == _hashes(first)


def test_a_new_revision_downloads_only_new_entries(hub: HubDouble) -> None:
    before = run_json(hub.endpoint, "cache-lookup", LLAMA, "--batch-size", "64")
    assert before["entries"] == []
    hub.reset_requests()
    folder = hub.repos[REPO].root / CC / "0_REGISTRY" / "0.4.5" / DIGEST
    doc = json.loads((folder / "f9f9f783a10b20b71829.json").read_text())
    neuron = doc.pop("neuron") | {"batch_size": 64, "max_batch_size": 64}
    model_id, task = doc.pop("_model_id"), doc.pop("_task")
    doc.pop("_entry_class")
    text = serialize_entry(doc, neuron, model_id=model_id, task=task)
    (folder / f"{entry_hash(text)}.json").write_text(text)
    hub.refresh()
    after = run_json(hub.endpoint, "cache-lookup", LLAMA, "--batch-size", "64")
    assert [e["hash"] for e in after["entries"]] == [entry_hash(text)]
    seen = kinds(hub.reset_requests())
    assert seen["info"] == 1 and seen["resolve"] == 1
    assert after["stats"]["index"]["state"] == "updated" and after["stats"]["index"]["parsed"] == 1


def test_offline_without_a_local_copy_exits_6(hub: HubDouble) -> None:
    proc = run(hub.endpoint, "cache-lookup", LLAMA, HF_HUB_OFFLINE="1")
    assert proc.returncode == 6
    assert "HF_HUB_OFFLINE is set and there is no local copy" in proc.stderr
    assert "--snapshot" in proc.stderr
    assert hub.reset_requests() == []


def test_offline_uses_the_last_local_copy(hub: HubDouble) -> None:
    online = run_json(hub.endpoint, "cache-lookup", LLAMA)
    hub.reset_requests()
    proc = run(hub.endpoint, "cache-lookup", LLAMA, "--json", HF_HUB_OFFLINE="1")
    assert proc.returncode == 0, proc.stderr
    assert hub.reset_requests() == []
    data = json.loads(proc.stdout)
    assert data["entries"] == online["entries"]
    assert data["source"]["from_local_copy"] is True
    assert "HF_HUB_OFFLINE is set: using the copy of" in proc.stderr


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_unreachable_hub_exits_6_without_a_copy() -> None:
    proc = run(_dead_endpoint(), "cache-lookup", LLAMA)
    assert proc.returncode == 6
    # What happened in words, never an HTTP library's repr (issue 17: "MaxRetryError(...)").
    assert "cannot reach" in proc.stderr and ": connection refused" in proc.stderr
    for internal in ("MaxRetryError", "NewConnectionError", "HTTPConnectionPool", "object at 0x", "Errno"):
        assert internal not in proc.stderr


def test_unreachable_hub_falls_back_to_the_local_copy(tmp_path: Path) -> None:
    with HubDouble({REPO: SNAPSHOT}) as double:
        endpoint = double.endpoint
        online = run_json(endpoint, "cache-lookup", LLAMA)
    data = run_json(endpoint, "cache-lookup", LLAMA)
    assert data["entries"] == online["entries"]
    assert data["source"]["from_local_copy"] is True
    (note,) = [note for note in data["notes"] if "cannot reach" in note]
    assert "(connection refused); using the local copy" in note and "Error" not in note


def test_private_repository_needs_hf_token(tmp_path: Path) -> None:
    with HubDouble({REPO: SNAPSHOT}, token="hf_secret") as double:
        proc = run(double.endpoint, "cache-lookup", LLAMA)
        assert proc.returncode == 2
        assert "not found" in proc.stderr and "HF_TOKEN" in proc.stderr
        data = run_json(double.endpoint, "cache-lookup", LLAMA, HF_TOKEN="hf_secret")
        assert data["entries"]


def test_repository_choice_follows_optimum_neuron(tmp_path: Path) -> None:
    home = tmp_path / "hf"
    home.mkdir()
    env = {"HF_HOME": str(home)}
    assert resolve_cache_repo(None, env) == (REPO, "default")
    (home / "optimum_neuron_custom_cache").write_text("me/stored-cache\n")
    assert resolve_cache_repo(None, env) == ("me/stored-cache", str(home / "optimum_neuron_custom_cache"))
    env["CUSTOM_CACHE_REPO"] = "me/env-cache"
    assert resolve_cache_repo(None, env) == ("me/env-cache", "CUSTOM_CACHE_REPO")
    assert resolve_cache_repo("me/flag", env) == ("me/flag", "--repo")
    assert resolve_cache_repo(None, {"XDG_CACHE_HOME": str(tmp_path)})[0] == REPO


def test_custom_cache_repo_is_used_end_to_end(tmp_path: Path) -> None:
    private = tmp_path / "private"
    shutil.copytree(SNAPSHOT / CC / "0_REGISTRY" / "0.4.5" / DIGEST, private / CC / "0_REGISTRY" / "0.4.5" / DIGEST)
    with HubDouble({REPO: SNAPSHOT, "me/private-cache": private}) as double:
        data = run_json(double.endpoint, "cache-lookup", LLAMA, CUSTOM_CACHE_REPO="me/private-cache")
        assert data["source"]["repo"] == "me/private-cache"
        assert data["source"]["repo_from"] == "CUSTOM_CACHE_REPO"
        assert {e["optimum_neuron_version"] for e in data["entries"]} == {"0.4.5"}
        stored = Path(os.environ["HF_HOME"]) / "optimum_neuron_custom_cache"
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text("me/private-cache")
        data = run_json(double.endpoint, "cache-lookup", LLAMA)
        assert data["source"]["repo"] == "me/private-cache"
        data = run_json(double.endpoint, "cache-lookup", LLAMA, "--repo", REPO)
        assert data["source"]["repo"] == REPO


def test_mirror_copies_only_registry_files_and_feeds_snapshot_lookups(hub: HubDouble, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    result = run_json(hub.endpoint, "cache", "mirror", str(mirror))
    registry_files = sorted(
        p.relative_to(SNAPSHOT).as_posix() for p in SNAPSHOT.glob("neuronxcc-*/0_REGISTRY/**/*.json")
    )
    copied = sorted(p.relative_to(mirror).as_posix() for p in mirror.rglob("*") if p.is_file())
    assert copied == sorted([*registry_files, ".neuronc-mirror.json"])
    assert result["files"] == len(registry_files) and result["revision"] == hub.repos[REPO].sha
    seen = kinds(hub.reset_requests())
    assert seen["resolve"] < len(registry_files)  # aliases share blobs with their primary file

    online = run_json(hub.endpoint, "cache-lookup", LLAMA)
    offline = run_json(hub.endpoint, "cache-lookup", LLAMA, "--snapshot", str(mirror))
    assert _hashes(offline) == _hashes(online)
    assert offline["source"]["repo"] == REPO and offline["source"]["revision"] == hub.repos[REPO].sha

    again = run_json(hub.endpoint, "cache", "mirror", str(mirror), "--compiler-version", "2.21.33363")
    kept = {p.relative_to(mirror).parts[0] for p in mirror.glob("neuronxcc-*/0_REGISTRY/**/*.json")}
    assert kept == {CC} and again["files"] < result["files"]

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x")
    assert run(hub.endpoint, "cache", "mirror", str(busy)).returncode == 2


def test_a_repository_without_registry_is_nothing_cached(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "inference-cache-config").mkdir(parents=True)
    (empty / "README.md").write_text("nothing compiled yet\n")
    (empty / "neuronxcc-2.21.33363.0+82129205" / "MODULE_1+d41d8cd9").mkdir(parents=True)
    (empty / "neuronxcc-2.21.33363.0+82129205" / "MODULE_1+d41d8cd9" / "model.done").write_text("")
    with HubDouble({REPO: empty}) as double:
        proc = run(double.endpoint, "cache-lookup", LLAMA)
        assert proc.returncode == 0, proc.stderr
        assert "No cached configurations for example-org/tiny-llama." in proc.stdout
        assert run(double.endpoint, "cache-lookup", LLAMA, "--require-hit").returncode == 6
