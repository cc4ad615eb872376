"""`neuronc cache synchronize`: an optimum-neuron bundle built through the SDK doubles, published in
optimum-neuron 0.4.5's cache layout, is found again by `cache-lookup --snapshot`.

(optimum-neuron 0.4.5's own lookup code reads the same tree in tests/contract/test_optimum_neuron_contract.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.bundle import read_manifest
from neuronc.cli import app

PROFILE = """\
model: {id: ./model}
backend: optimum-neuron
target: inf2
tp_degree: 2
batch_size: 2
amp: fp32
sequence: {max_length: 256}
weights: on-load
"""
MODEL_ID = "example-org/tiny-llama"


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    out.reset()
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def bundle(runner: CliRunner, sdk_doubles: Path, tiny_llama: Path, tmp_path: Path) -> Path:
    shutil.copytree(tiny_llama, tmp_path / "model")
    profile = tmp_path / "optimum.yaml"
    profile.write_text(PROFILE)
    code, stdout, stderr = invoke(runner, "compile", str(profile), "--json")
    assert code == 0, stderr
    return Path(json.loads(stdout)["builds"][0]["bundle"])


def _the_bundle_records_the_compile_cache_entries_its_export_compiled(bundle: Path) -> None:
    recorded = read_manifest(bundle).extra["optimum_neuron"]["compile_cache"]
    assert len(recorded["modules"]) == 2  # context encoding and token generation
    for module in recorded["modules"]:
        entry = Path(recorded["cache_dir"]) / module
        assert module.startswith("neuronxcc-2.21.33363.0+82129205/MODULE_")
        assert (entry / "model.neff").is_file() and (entry / "model.done").is_file()
        flags = json.loads((entry / "compile_flags.json").read_text())
        # libneuronxla's folder suffix: the first 8 hex digits of the MD5 of json.dumps(flags) (the note's §2.1).
        assert module.endswith("+" + hashlib.md5(json.dumps(flags).encode()).hexdigest()[:8])


def test_synchronize_to_a_directory_is_found_by_cache_lookup(
    runner: CliRunner, bundle: Path, tmp_path: Path, tiny_llama: Path
) -> None:
    _the_bundle_records_the_compile_cache_entries_its_export_compiled(bundle)
    target = tmp_path / "hub-cache"
    code, stdout, stderr = invoke(
        runner, "cache", "synchronize", str(bundle), "--to", str(target), "--model-id", MODEL_ID, "--json"
    )
    assert code == 0, stderr
    data = json.loads(stdout)
    [published] = data["bundles"]
    assert published["published"] and published["skipped"] == []
    files = set(data["files"])
    registry = published["registry_path"]
    assert registry in files and published["alias_path"] in files
    compiler, reg, version, _digest, name = registry.split("/")
    assert (compiler, reg, version) == ("neuronxcc-2.21.33363.0+82129205", "0_REGISTRY", "0.4.5")
    text = (target / registry).read_bytes()
    assert hashlib.sha512(text).hexdigest()[:20] + ".json" == name  # the entry hash is its file name
    assert (target / published["alias_path"]).read_bytes() == text
    entry = json.loads(text)
    assert entry["_model_id"] == MODEL_ID and entry["_task"] == "text-generation"
    assert entry["neuron"]["tp_degree"] == 2 and entry["neuron"]["target"] == "trn1"
    for module in published["modules"]:
        assert {p.name for p in (target / module).iterdir()} == {
            "model.neff",
            "model.done",
            "model.hlo_module.pb",
            "compile_flags.json",
        }

    # cache-lookup reads the tree as a snapshot of the cache repository, for the model's own config.json.
    code, stdout, stderr = invoke(runner, "cache-lookup", str(tiny_llama), "--snapshot", str(target), "--json")
    assert code == 0, stderr
    matches = json.loads(stdout)["entries"]
    assert [(m["batch_size"], m["sequence_length"], m["tp_degree"], m["dtype"], m["target"]) for m in matches] == [
        (2, 256, 2, "float32", "trn1")
    ]
    assert matches[0]["path"] == registry and matches[0]["hash_verified"]
    # Filed under the digest optimum-neuron 0.4.5's lookup computes from the model's config.json.
    assert matches[0]["visible_to_optimum_neuron"] is True
    _upload_is_one_commit_retried_on_a_moved_branch(bundle)

    # `cache synchronize` imports neither torch nor transformers (a fresh process, as a user runs it).
    from test_startup import HEAVY, _imported_modules

    args = ["cache", "synchronize", str(bundle), "--to", str(tmp_path / "again"), "--model-id", MODEL_ID]
    assert not _imported_modules(args, dict(os.environ)) & set(HEAVY)


def test_what_is_never_published(runner: CliRunner, bundle: Path, tmp_path: Path) -> None:
    """A local model without --model-id; AWS's public cache as a default; a failed or a locked entry."""
    code, stdout, _ = invoke(runner, "cache", "synchronize", str(bundle), "--to", str(tmp_path / "x"), "--json")
    assert code == 2
    assert "--model-id" in json.loads(stdout)["bundles"][0]["skipped"][0]
    code, stdout, _ = invoke(runner, "cache", "synchronize", str(bundle), "--model-id", MODEL_ID, "--json")
    assert code == 2
    assert "aws-neuron/optimum-neuron-cache" in json.loads(stdout)["message"]
    recorded = read_manifest(bundle).extra["optimum_neuron"]["compile_cache"]
    poisoned = Path(recorded["cache_dir"]) / recorded["modules"][0]
    (poisoned / "model.neff").unlink()
    (poisoned / "model.log").write_text("ERROR: out of memory\n")
    target = tmp_path / "hub-cache"
    code, stdout, _ = invoke(
        runner, "cache", "synchronize", str(bundle), "--to", str(target), "--model-id", MODEL_ID, "--json"
    )
    assert code == 2
    [skipped] = json.loads(stdout)["bundles"][0]["skipped"]
    assert skipped.startswith(recorded["modules"][0]) and "failed" in skipped
    assert not target.exists() or not any(target.rglob("*"))
    (poisoned / "model.log").unlink()
    (poisoned / "model.done").unlink()
    (poisoned / "model.hlo_module.pb.lock").write_bytes(b"")  # a compile that has not finished: locked
    code, stdout, _ = invoke(
        runner, "cache", "synchronize", str(bundle), "--to", str(target), "--model-id", MODEL_ID, "--json"
    )
    assert code == 2
    assert "locked" in json.loads(stdout)["bundles"][0]["skipped"][0]
    assert not target.exists() or not any(target.rglob("*"))


class _Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.url = "http://hub.local"
        self.request = None


class _Hub:
    """Records the huggingface_hub calls `upload` makes; the first commit meets a moved branch (412)."""

    def __init__(self) -> None:
        self.commits: list[dict[str, Any]] = []
        self.head = 0

    def repo_info(self, repo_id: str) -> Any:
        self.head += 1
        return type("Info", (), {"sha": f"{self.head:040x}"})()

    def create_commit(self, repo_id: str, operations: list[Any], **kwargs: Any) -> Any:
        from huggingface_hub.errors import HfHubHTTPError

        self.commits.append({"repo": repo_id, "operations": operations, **kwargs})
        if len(self.commits) == 1:
            raise HfHubHTTPError("412 Precondition Failed", response=_Response(412))  # type: ignore[arg-type]
        return type("CommitInfo", (), {"oid": "c" * 40})()


def _upload_is_one_commit_retried_on_a_moved_branch(bundle: Path) -> None:
    from neuronc.hubcache.publish import collect, upload

    pub = collect(bundle, model_id=MODEL_ID)
    hub = _Hub()
    result = upload([pub], "my-org/neuron-cache", api=hub, sleep=lambda s: None)
    assert result == {"repo": "my-org/neuron-cache", "commit": "c" * 40, "files": 10, "tries": 2}
    first, second = hub.commits
    assert first["parent_commit"] != second["parent_commit"]  # the second try names the new head
    paths = sorted(op.path_in_repo for op in second["operations"])
    assert pub.registry_path in paths and pub.alias_path in paths
    assert sum(p.endswith("/model.neff") for p in paths) == 2
