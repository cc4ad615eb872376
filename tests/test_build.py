"""The compile pipeline (neuronc.pipeline) with the real store, writer, splitter and reader.

Only the backend is a double (tests/plugins/pipeline_backend.py, registered like a plugin).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import fake_hub_cache, write_profile, write_tiny_llama
from plugins import pipeline_backend

from neuronc.bundle import read_manifest, verify_bundle
from neuronc.errors import BackendUnavailableError, CompileError, InvalidInputError, ProfileError
from neuronc.pipeline import BuildReport, compile_profiles, failed_logs_root, overall_exit_code
from neuronc.store import LocalStore

TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    yield
    pipeline_backend.unregister()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace: the tiny model in ``model/`` and a store in ``store/``."""
    write_tiny_llama(tmp_path / "model")
    return tmp_path


def compiles(ws: Path) -> int:
    log = ws / "compiles.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def staging_leftovers(store: Path) -> list[str]:
    staging = store / ".staging"
    return sorted(p.name for p in staging.iterdir() if not p.name.endswith(".lock")) if staging.is_dir() else []


def run(ws: Path, *profiles: Path, **kwargs: object) -> list[BuildReport]:
    return compile_profiles(list(profiles), store=ws / "store", **kwargs)  # type: ignore[arg-type]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the happy path -------------------------------------------------------------------------------


def test_build_publishes_a_complete_verified_bundle(ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    [report] = run(ws, profile)
    assert (report.status, report.exit_code, report.error) == ("built", 0, None)
    bundle = Path(report.bundle or "")
    assert bundle.parent.parent.parent == ws / "store"
    assert bundle.parent.parent.name == "local--model"  # a local checkpoint, named as such in the store
    assert verify_bundle(bundle).ok
    manifest = read_manifest(bundle)
    assert manifest.config_hash == report.config_hash and manifest.toolchain_key == report.toolchain_key
    # Weights: one tp=1 shard whose recorded bytes and hash are the file's.
    [shard] = manifest.shards
    shard_file = bundle / "weights" / "rank-000-of-001.safetensors"
    assert (shard.rank, shard.file) == (0, "weights/rank-000-of-001.safetensors")
    assert (shard.bytes, shard.sha256) == (shard_file.stat().st_size, sha256(shard_file))
    # Config and tokenizer files, and nothing else, in model/; the profile as given.
    assert sorted(p.name for p in (bundle / "model").iterdir()) == [
        "config.json",
        "generation_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert (bundle / "profile.yaml").read_text() == profile.read_text()
    # The weights source names the checkpoint file with its hash.
    assert manifest.weights is not None and manifest.weights.mode == "presharded"
    source = {f.path: f.sha256 for f in manifest.weights.files}
    assert source["model.safetensors"] == sha256(ws / "model" / "model.safetensors")
    # Graphs as the backend reported them; per-stage wall time and peak RSS.
    assert [g.name for g in manifest.graphs] == ["cte-b1-s16", "cte-b1-s32", "tkg-b1-s64"]
    assert [g.name for g in report.graphs] == [g.name for g in manifest.graphs]
    stages = {s.name: s for s in manifest.stages}
    assert {"plan", "lookup", "resolve", "split", "model_files", "compile"} <= set(stages)
    assert all(s.peak_rss_bytes and s.peak_rss_bytes > 10 * 2**20 for s in stages.values())
    assert [s.name for s in report.stages][-1] == "publish"
    assert report.peak_rss_bytes and report.peak_rss_bytes > 10 * 2**20
    assert staging_leftovers(ws / "store") == []
    assert compiles(ws) == 1


def test_second_compile_is_a_store_hit_and_compiles_nothing(ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    [first] = run(ws, profile)
    [second] = run(ws, profile)
    assert (first.status, second.status) == ("built", "hit")
    assert second.bundle == first.bundle and second.config_hash == first.config_hash
    assert [s.name for s in second.stages] == ["plan", "lookup"]
    assert [g.name for g in second.graphs] == [g.name for g in first.graphs]
    assert compiles(ws) == 1
    # A profile that differs only in what is not hashed (its name, its file) is the same build.
    renamed = write_profile(ws / "renamed.yaml")
    renamed.write_text(renamed.read_text().replace("name: p", "name: something-else"))
    [third] = run(ws, renamed)
    assert (third.status, third.bundle) == ("hit", first.bundle)


def test_miss_names_the_hashed_fields_that_differ_from_the_nearest_bundle(ws: Path) -> None:
    run(ws, write_profile(ws / "a.yaml", context_buckets=[16, 32]))
    messages: list[str] = []
    [report] = run(ws, write_profile(ws / "b.yaml", context_buckets=[16, 48]), log=messages.append)
    assert report.status == "built"
    assert report.nearest is not None
    assert report.nearest.differences == [{"field": "sequence.context_buckets", "a": [16, 32], "b": [16, 48]}]
    assert report.nearest.toolchain_differences == {}
    assert any("sequence.context_buckets: [16,32] → [16,48]" in m for m in messages), messages


def test_toolchain_change_is_a_miss_that_says_so(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = write_profile(ws / "p.yaml")
    run(ws, profile)
    monkeypatch.setenv("NEURONC_FAKE_CC_VERSION", "9.9.9")
    [report] = run(ws, profile)
    assert report.status == "built" and report.nearest is not None
    assert report.nearest.differences == []
    assert report.nearest.toolchain_differences == {"fake-cc": {"a": "1.2.3", "b": "9.9.9"}}
    assert len(LocalStore(ws / "store").list()) == 2


# -- failures -------------------------------------------------------------------------------------


def test_nearest_bundle_matches_the_checkpoint_not_the_spelling_of_its_path(ws: Path) -> None:
    run(ws, write_profile(ws / "a.yaml", context_buckets=[16, 32]))
    # The same checkpoint directory, named by an absolute path instead of "model".
    other = write_profile(ws / "b.yaml", model=str(ws / "model"), context_buckets=[16, 48])
    [report] = run(ws, other, require_hit=True)
    assert (report.status, report.exit_code) == ("failed", 6)
    assert report.nearest is not None
    assert [d["field"] for d in report.nearest.differences] == ["sequence.context_buckets"]
    assert report.error is not None and any("nearest bundle" in line for line in report.error.details)


def test_require_hit_miss_is_exit_6_and_compiles_nothing(ws: Path) -> None:
    [report] = run(ws, write_profile(ws / "p.yaml"), require_hit=True)
    assert (report.status, report.exit_code) == ("failed", 6)
    assert report.error is not None and report.error.kind == "cache_miss"
    assert compiles(ws) == 0
    assert LocalStore(ws / "store").list() == []


def test_unavailable_backend_is_exit_5_before_any_work(ws: Path) -> None:
    good = write_profile(ws / "good.yaml")
    missing = write_profile(ws / "missing.yaml", backend="missing")
    with pytest.raises(BackendUnavailableError) as info:
        run(ws, good, missing)
    assert info.value.exit_code == 5
    assert "missing" in info.value.message and "neuronc-test-sdk-that-does-not-exist" in " ".join(info.value.details)
    assert info.value.hint and "pip install" in info.value.hint
    assert compiles(ws) == 0 and LocalStore(ws / "store").list() == []


def test_only_checks_just_the_backends_of_the_builds_it_selects(ws: Path) -> None:
    """One CI job per key (`neuronc matrix`): a build left out by --only may use a backend missing here."""
    good = write_profile(ws / "good.yaml")
    missing = write_profile(ws / "missing.yaml", backend="missing")
    [key] = [r.config_hash for r in run(ws, good)]
    assert key is not None
    [report] = run(ws, good, missing, only=[key[:12]])
    assert (report.status, report.config_hash) == ("hit", key)


def test_invalid_profile_is_exit_2_before_any_work(ws: Path) -> None:
    bad = ws / "bad.yaml"
    bad.write_text("model: {id: model}\nbakend: pipeline\n")
    with pytest.raises(ProfileError):
        run(ws, write_profile(ws / "good.yaml"), bad)
    assert compiles(ws) == 0


def test_a_build_that_cannot_fit_fails_preflight_before_compiling(ws: Path) -> None:
    big = ws / "big"
    big.mkdir()
    config = {
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    (big / "config.json").write_text(json.dumps(config))
    [report] = run(ws, write_profile(ws / "p.yaml", model="big", target="inf2"))
    assert (report.status, report.exit_code) == ("failed", 2)
    assert report.error and report.error.kind == "preflight_failed" and "does not fit inf2" in report.error.message
    assert compiles(ws) == 0 and staging_leftovers(ws / "store") == []


def test_compile_failure_is_exit_3_with_the_log_tail_and_other_builds_continue(ws: Path) -> None:
    failing = write_profile(ws / "failing.yaml", options={"fail": True})
    good = write_profile(ws / "good.yaml")
    reports = run(ws, failing, good)
    assert [r.status for r in reports] == ["failed", "built"]
    assert overall_exit_code(reports) == 3
    error = reports[0].error
    assert isinstance(error, CompileError) and error.exit_code == 3 and error.kind == "compile_failed"
    assert "ERROR: fake-cc: unsupported operator 'aten::frobnicate'" in "\n".join(error.details)
    # The staging directory is gone, but the compiler log survives where the error says.
    assert error.log_path is not None
    log_path = Path(error.log_path)
    assert log_path.is_file() and "frobnicate" in log_path.read_text()
    assert log_path.is_relative_to(failed_logs_root())
    # Every path the error names exists after the failure: the kept copy, not the removed staging log.
    assert error.hint is not None and f"full compiler output: {log_path}" in error.hint
    named = [word for text in [error.message, error.hint, *error.details] for word in text.split() if "/" in word]
    assert named and all(Path(word.rstrip(":;,")).exists() for word in named)
    assert staging_leftovers(ws / "store") == []
    assert [e.path for e in LocalStore(ws / "store").list()] == [Path(reports[1].bundle or "")]


def test_compiler_crash_is_a_compile_failure(ws: Path) -> None:
    [report] = run(ws, write_profile(ws / "p.yaml", options={"crash": True}))
    assert (report.status, report.exit_code) == ("failed", 3)
    assert report.error and "RuntimeError: segfault-ish failure" in report.error.message
    assert staging_leftovers(ws / "store") == []


def test_environment_error_stops_the_remaining_builds(ws: Path) -> None:
    # One worker slot: the builds of a matrix run two at a time (the pool's threads), so the slow
    # second build is running when the first fails; the third has not started and is skipped.
    first = write_profile(ws / "env.yaml", options={"env_error": True})
    second = write_profile(ws / "slow.yaml", options={"sleep": 1.0})
    third = write_profile(ws / "good.yaml")
    reports = run(ws, first, second, third, jobs=1)
    assert [(r.status, r.exit_code) for r in reports] == [("failed", 5), ("built", 0), ("skipped", 0)]
    assert reports[2].messages == [f"skipped after an environment error in {reports[0].label}"]
    assert overall_exit_code(reports) == 5
    assert compiles(ws) == 2


def test_interrupt_removes_staging_and_propagates(ws: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        run(ws, write_profile(ws / "p.yaml", options={"interrupt": True}))
    assert staging_leftovers(ws / "store") == []
    assert LocalStore(ws / "store").list() == []


def test_exit_code_is_the_most_severe() -> None:
    def reports(*codes: int) -> list[BuildReport]:
        return [BuildReport(profile="p", build_index=i, status="failed", exit_code=c) for i, c in enumerate(codes)]

    assert overall_exit_code([]) == 0
    assert overall_exit_code(reports(0, 6, 2)) == 2
    assert overall_exit_code(reports(6, 3, 2)) == 3
    assert overall_exit_code(reports(4, 3)) == 3
    assert overall_exit_code(reports(3, 5)) == 5
    assert overall_exit_code(reports(0, 6)) == 6


# -- selection and output -------------------------------------------------------------------------


def test_only_builds_the_build_with_that_key(ws: Path) -> None:
    profile = write_profile(ws / "m.yaml", matrix={"batch_size": [1, 2, 4]})
    [key] = [r.config_hash for r in run(ws, profile, require_hit=True)[1:2]]
    assert key is not None
    [report] = run(ws, profile, only=[key[:12]])
    assert (report.build_index, report.status, report.config_hash) == (1, "built", key)
    assert compiles(ws) == 1
    with pytest.raises(InvalidInputError, match="matches no build"):
        run(ws, profile, only=["abcdef0123"])
    with pytest.raises(InvalidInputError, match="at least 6 hex digits"):
        run(ws, profile, only=["ab"])


def test_out_dir_gets_a_copy_of_the_bundle(ws: Path) -> None:
    profile = write_profile(ws / "p.yaml")
    [report] = run(ws, profile, out_dir=ws / "out")
    assert report.out == str(ws / "out")
    assert verify_bundle(ws / "out").ok
    assert read_manifest(ws / "out").config_hash == report.config_hash
    # Again (a hit): the copy is replaced atomically; another build's copy replaces it too.
    [again] = run(ws, profile, out_dir=ws / "out")
    assert again.status == "hit" and verify_bundle(ws / "out").ok
    [other] = run(ws, write_profile(ws / "q.yaml", context_buckets=[32]), out_dir=ws / "out")
    assert read_manifest(ws / "out").config_hash == other.config_hash
    assert sorted(p.name for p in ws.iterdir() if p.name.startswith(".out")) == []


def test_out_dir_never_overwrites_other_data(ws: Path) -> None:
    (ws / "precious").mkdir()
    (ws / "precious" / "notes.txt").write_text("keep me")
    [report] = run(ws, write_profile(ws / "p.yaml"), out_dir=ws / "precious")
    assert (report.status, report.exit_code) == ("failed", 2)
    assert report.error and "not a bundle" in report.error.message
    assert (ws / "precious" / "notes.txt").read_text() == "keep me"


def test_several_builds_get_one_out_subdirectory_each(ws: Path) -> None:
    reports = run(ws, write_profile(ws / "m.yaml", matrix={"batch_size": [1, 2]}), out_dir=ws / "out")
    assert [r.status for r in reports] == ["built", "built"]
    outs = sorted(Path(r.out or "") for r in reports)
    assert [p.parent for p in outs] == [ws / "out", ws / "out"]
    assert all(verify_bundle(p).ok for p in outs)
    assert {p.name for p in outs} == {f"model-{r.build_index}-{(r.config_hash or '')[:12]}" for r in reports}


def test_on_load_weights_skip_the_split(ws: Path) -> None:
    [report] = run(ws, write_profile(ws / "p.yaml", weights="on-load", target="inf2"))
    assert report.status == "built"
    manifest = read_manifest(Path(report.bundle or ""))
    assert manifest.shards == [] and "split" not in [s.name for s in manifest.stages]


def test_a_backend_that_shards_its_own_way_gets_no_rank_shards(ws: Path) -> None:
    [report] = run(ws, write_profile(ws / "p.yaml", backend="own-shards"))
    assert report.status == "built", report.error
    manifest = read_manifest(Path(report.bundle or ""))
    assert manifest.shards == [] and not any(f.path.startswith("weights/") for f in manifest.files)
    assert "split" not in [s.name for s in report.stages]


# -- hub models -----------------------------------------------------------------------------------


def test_hub_model_is_resolved_to_a_commit_offline(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "a" * 40
    fake_hub_cache(ws / "hf", "acme/tiny", commit, write_tiny_llama(ws / "src"))
    monkeypatch.setenv("HF_HOME", str(ws / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    profile = write_profile(ws / "p.yaml", model="acme/tiny")
    [report] = run(ws, profile)
    assert report.status == "built", report.error
    manifest = read_manifest(Path(report.bundle or ""))
    assert manifest.hashed_inputs["weights"] == {"hub_id": "acme/tiny", "revision": commit}
    assert manifest.weights is not None and manifest.weights.revision == commit
    source = {f.path: f.sha256 for f in manifest.weights.files}
    assert source["model.safetensors"] == sha256(ws / "src" / "model.safetensors")
    assert verify_bundle(Path(report.bundle or "")).ok
    # Pinning the same commit is the same build.
    pinned = ws / "pinned.yaml"
    pinned.write_text(profile.read_text().replace("id: acme/tiny", f"id: acme/tiny\n  revision: '{commit}'"))
    [again] = run(ws, pinned)
    assert (again.status, again.config_hash) == ("hit", report.config_hash)


def test_unknown_hub_revision_offline_is_exit_2(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(ws / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    [report] = run(ws, write_profile(ws / "p.yaml", model="acme/not-cached"))
    assert (report.status, report.exit_code) == ("failed", 2)
    assert report.error and "offline and not in the Hugging Face cache" in report.error.message


# -- concurrency ----------------------------------------------------------------------------------

_WORKER = """
import json, sys
sys.path.insert(0, {tests!r})
from plugins import pipeline_backend
pipeline_backend.register()
from neuronc.pipeline import compile_profiles
[r] = compile_profiles([{profile!r}], store={store!r})
print(json.dumps({{"status": r.status, "bundle": r.bundle, "messages": r.messages}}))
"""


def test_concurrent_builds_of_one_key_compile_once(ws: Path) -> None:
    profile = write_profile(ws / "p.yaml", options={"sleep": 0.3})
    code = _WORKER.format(tests=str(TESTS), profile=str(profile), store=str(ws / "store"))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout))
    assert sorted(r["status"] for r in results) == ["built", "hit", "hit", "hit"]
    waited = [r for r in results if r["messages"]]
    assert all(r["messages"] == ["built concurrently by another process; reused"] for r in waited)
    assert len({r["bundle"] for r in results}) == 1
    assert compiles(ws) == 1
    assert verify_bundle(results[0]["bundle"]).ok
    assert staging_leftovers(ws / "store") == []


@pytest.mark.parametrize(
    ("model_id", "served"),
    [
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("gpt2", "gpt2"),
        ("/home/ci/work/models/my-llama", "my-llama"),
        ("/home/ci/work/models/my-llama/", "my-llama"),
        ("./model", "model"),
        ("../ft", "ft"),
    ],
)
def test_a_local_model_is_served_under_its_directory_name_never_the_hosts_path(model_id: str, served: str) -> None:
    from neuronc.spec import served_model_name

    assert served_model_name(model_id) == served
