"""A hostile (or broken) cache repository and a damaged local copy of it: clean exits, files named.

The repository is served by HubDouble (tests/fixtures/hf-neuron-cache/hub_double.py), a test double
of the Hub's HTTP endpoints on 127.0.0.1; the real huggingface_hub client talks to it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"
REPO = "aws-neuron/optimum-neuron-cache"
CC = "neuronxcc-2.21.33363.0+82129205"
DIGEST = "530ac5d5535fbd44ea3568b945966a64d88038666555b552362cd81756497e44"
FOLDER = f"{CC}/0_REGISTRY/0.4.5/{DIGEST}"
LLAMA_DIR = FIXTURE / "models" / "example-org" / "tiny-llama"
NAME = "0123456789abcdef0123"

sys.path.insert(0, str(FIXTURE))
from hub_double import HubDouble  # noqa: E402  (a fixture module, not a package)


def run(endpoint: str, *args: str, **env_extra: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=endpoint, **env_extra)
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", *args], env=env, cwd=ROOT, capture_output=True, timeout=120, check=False
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    return proc


def run_json(endpoint: str, *args: str, code: int = 0, **env: str) -> dict[str, Any]:
    proc = run(endpoint, *args, "--json", **env)
    assert proc.returncode == code, proc.stderr.decode(errors="replace")
    data: dict[str, Any] = json.loads(proc.stdout.decode("utf-8"))
    return data


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE / "snapshot" / FOLDER, root / FOLDER)
    return root


@pytest.fixture
def hub(repo: Path) -> Iterator[HubDouble]:
    with HubDouble({REPO: repo}) as double:
        yield double


def _cache() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "neuronc" / "hf-neuron-cache"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 50_000 + b"]" * 50_000, "nested more than 64 levels deep"),
        (b'{"model_type": "llama", "neuron": {"batch_size": 1' + b"0" * 30 + b"}}", "integer with 31 digits"),
        (b'{"model_type": {"x": 1}, "neuron": {"batch_size": 1}}', "must be a string, got an object"),
        (b" " * (2 * 1024 * 1024), None),  # refused at download: over the size of any entry
    ],
)
def test_hostile_entries_served_by_the_hub_are_skipped(
    hub: HubDouble, repo: Path, body: bytes, reason: str | None
) -> None:
    (repo / FOLDER / f"{NAME}.json").write_bytes(body)
    hub.refresh()
    data = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    assert data["hit"] is True
    if reason is None:
        assert any("could not be downloaded" in note for note in data["notes"])
    else:
        assert any(s["path"].endswith(f"{NAME}.json") and reason in s["reason"] for s in data["skipped"])


def test_listed_paths_that_are_no_entry_names(hub: HubDouble, repo: Path) -> None:
    (repo / FOLDER / "has space.json").write_text("{}")
    (repo / FOLDER / "caf\u00e9.json").write_text("{}")
    hub.refresh()
    data = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    reasons = {s["path"].rsplit("/", 1)[-1]: s["reason"] for s in data["skipped"]}
    assert "characters no registry name has" in reasons["has space.json"]
    assert "characters no registry name has" in reasons["caf\u00e9.json"]


@pytest.mark.parametrize("damage", ["listing-deep", "listing-garbage", "listing-wrong-types", "index", "last"])
def test_a_damaged_local_copy_is_listed_again(hub: HubDouble, damage: str) -> None:
    first = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    repo_dir = next(_cache().glob("*/aws-neuron--optimum-neuron-cache"))
    (listing,) = (repo_dir / "revisions").glob("*.json")
    if damage == "listing-deep":
        listing.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif damage == "listing-garbage":
        listing.write_bytes(os.urandom(4096))
    elif damage == "listing-wrong-types":
        listing.write_text(json.dumps({"revision": listing.stem, "files": [["a", 1, "x"]]}))
    elif damage == "index":
        for path in (_cache() / "index").glob("*.bin"):
            path.write_bytes(path.read_bytes()[:100])
    else:
        (repo_dir / "last.json").write_text('{"revision": ["not", "a", "sha"]}')
    again = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    assert again["entries"] == first["entries"]
    if damage == "index":
        assert again["stats"]["index"]["state"] == "rebuilt"


def test_offline_with_a_damaged_last_listing_is_exit_6(hub: HubDouble) -> None:
    run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    repo_dir = next(_cache().glob("*/aws-neuron--optimum-neuron-cache"))
    (repo_dir / "last.json").write_bytes(b"\xff" * 10)
    data = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR), code=6, HF_HUB_OFFLINE="1")
    assert "no local copy" in data["message"]


def test_a_blob_replaced_by_a_fifo_is_downloaded_again_not_opened(hub: HubDouble) -> None:
    first = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    shutil.rmtree(_cache() / "index")
    blob = next(p for p in (_cache() / "blobs").rglob("*") if p.is_file())
    blob.unlink()
    os.mkfifo(blob)
    again = run_json(hub.endpoint, "cache-lookup", str(LLAMA_DIR))
    assert again["entries"] == first["entries"]
    assert blob.is_file()  # a FIFO is not a blob: fetched again, written over it


# -- cache mirror into a hostile directory ----------------------------------------------------------


def test_mirror_refuses_hostile_metadata(hub: HubDouble, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / ".neuronc-mirror.json").write_text('{"repo": "x", "paths": "../../etc/passwd"}')
    data = run_json(hub.endpoint, "cache", "mirror", str(mirror), code=2)
    assert "not a neuronc mirror" in data["message"] and ".neuronc-mirror.json" in data["message"]
    assert "field 'paths': must be a list" in data["message"]


def test_mirror_never_writes_or_deletes_through_a_link_out(hub: HubDouble, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "0_REGISTRY" / "0.4.5" / DIGEST).mkdir(parents=True)
    victim = outside / "0_REGISTRY" / "0.4.5" / DIGEST / f"{NAME}.json"
    victim.write_text("keep me")
    mirror = tmp_path / "mirror"
    run_json(hub.endpoint, "cache", "mirror", str(mirror))
    meta = json.loads((mirror / ".neuronc-mirror.json").read_text())
    meta["paths"].append(f"{CC}/0_REGISTRY/0.4.5/{DIGEST}/{NAME}.json")
    (mirror / ".neuronc-mirror.json").write_text(json.dumps(meta))
    shutil.rmtree(mirror / CC)
    (mirror / CC).symlink_to(outside)  # the compiler folder now leads out of the mirror
    data = run_json(hub.endpoint, "cache", "mirror", str(mirror), code=2)
    assert "through a symbolic link out of the mirror" in data["message"]
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in (outside / "0_REGISTRY" / "0.4.5" / DIGEST).iterdir()) == [f"{NAME}.json"]


def test_mirror_replaces_a_fifo_where_an_entry_belongs(hub: HubDouble, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    run_json(hub.endpoint, "cache", "mirror", str(mirror))
    target = mirror / FOLDER / "f9f9f783a10b20b71829.json"
    good = target.read_bytes()
    target.unlink()
    os.mkfifo(target)
    run_json(hub.endpoint, "cache", "mirror", str(mirror))
    assert target.read_bytes() == good
