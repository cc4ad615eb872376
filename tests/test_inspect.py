"""`neuronc inspect`, `neuronc verify` and `neuronc store ...` through the CLI: exit codes and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from plugins.fake_backend import NAME, TESTS_DIR, VERSION_ENV, build_bundle, register
from plugins.registry import unregister_backend

from neuronc._output import out
from neuronc.cli import app
from neuronc.store import open_store


@pytest.fixture(autouse=True)
def _fake_backend() -> Iterator[None]:
    register()
    yield
    unregister_backend(NAME)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build_bundle(tmp_path / "bundle")


def test_inspect_shows_what_matters(runner: CliRunner, bundle: Path) -> None:
    result = runner.invoke(app, ["inspect", str(bundle)])
    assert result.exit_code == 0, result.output
    for text in (
        "acme/tiny-llama",
        "fake",
        "inf2",
        "tp 2",
        "bfloat16",
        "context [64, 128]",
        "cte-b1-s64",
        "weights/rank1.safetensors",
        "fake-cc",
        "1.2.3",
        "totals",
        "from fake import load",
    ):
        assert text in result.stdout, text


def test_inspect_json_is_stable(runner: CliRunner, bundle: Path) -> None:
    result = runner.invoke(app, ["inspect", str(bundle), "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["model"]["id"] == "acme/tiny-llama"
    assert (data["tp_degree"], data["batch_size"], data["dtype"]) == (2, 1, "bfloat16")
    assert data["sequence"]["context_buckets"] == [64, 128]
    assert [g["bytes"] for g in data["graphs"]] == [4096] * 4
    assert data["totals"]["shards"] == 2 and data["totals"]["files"] == 9
    assert len(data["keys"]["config_hash"]) == 64
    assert "verify" not in data and "environment" not in data


def test_inspect_verify_names_each_problem_and_exits_4(runner: CliRunner, bundle: Path) -> None:
    shard = bundle / "weights" / "rank0.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    (bundle / "model" / "config.json").unlink()
    (bundle / "artifacts" / "evil.so").write_bytes(b"x")
    result = runner.invoke(app, ["inspect", str(bundle), "--verify"])
    assert result.exit_code == 4
    assert "mismatch: weights/rank0.safetensors" in result.stderr
    assert "missing: model/config.json" in result.stderr
    assert "extra: artifacts/evil.so" in result.stderr


def test_verify_json_on_failure_is_one_document(runner: CliRunner, bundle: Path) -> None:
    (bundle / "logs" / "compile.log").write_text("tampered\n")
    result = runner.invoke(app, ["verify", str(bundle), "--json"])
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert data["error"]["exit_code"] == 4
    assert [m["path"] for m in data["verify"]["mismatched"]] == ["logs/compile.log"]


def test_verify_ok(runner: CliRunner, bundle: Path) -> None:
    result = runner.invoke(app, ["verify", str(bundle), "--json", "-j", "3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["verify"]["files_checked"] == 9 and data["verify"]["jobs"] == 3


@pytest.mark.parametrize(
    ("installed", "verdict", "code"),
    [("1.2.3", "identical", 0), ("1.2.3+local", "compatible", 0), ("1.3.0", "incompatible", 5)],
)
def test_against_env_verdicts(
    runner: CliRunner, bundle: Path, monkeypatch: pytest.MonkeyPatch, installed: str, verdict: str, code: int
) -> None:
    monkeypatch.setenv(VERSION_ENV, installed)
    result = runner.invoke(app, ["inspect", str(bundle), "--against-env", "--json"])
    assert result.exit_code == code, result.output
    data = json.loads(result.stdout)
    assert data["environment"]["verdict"] == verdict
    if code:
        assert [d["package"] for d in data["environment"]["differences"]] == ["fake-cc"]
        assert "fake-cc: bundle 1.2.3, installed 1.3.0" in result.stderr


def test_against_env_with_unknown_backend_is_incompatible(runner: CliRunner, bundle: Path) -> None:
    unregister_backend(NAME)
    result = runner.invoke(app, ["verify", str(bundle), "--against-env"])
    assert result.exit_code == 5
    assert "backend not available here" in result.stderr


def test_not_a_bundle_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a bundle" in result.stderr
    assert "Traceback" not in result.output


def test_store_commands(runner: CliRunner, tmp_path: Path) -> None:
    real_invoke = runner.invoke

    def invoke(*args: object, **kwargs: object) -> object:
        out.reset()  # Rich consoles hold the previous invocation's captured streams
        return real_invoke(*args, **kwargs)  # type: ignore[arg-type]

    runner.invoke = invoke  # type: ignore[method-assign]
    store = open_store()
    path = build_bundle(store=store)
    result = runner.invoke(app, ["store", "list", "--json"])
    assert result.exit_code == 0
    [row] = json.loads(result.stdout)["bundles"]
    assert (row["model"], row["backend"], row["path"]) == ("acme/tiny-llama", "fake", str(path))
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert json.loads(runner.invoke(app, ["store", "list", "--json", "--store", str(other)]).stdout)["bundles"] == []
    assert runner.invoke(app, ["store", "list", "--store", str(tmp_path / "typo")]).exit_code == 2
    leftover = store.staging_dir / ".neuronc-staging-x-1-00"
    leftover.mkdir()
    (leftover / "f").write_bytes(b"1234")
    gc = runner.invoke(app, ["store", "gc", "--json"])
    assert gc.exit_code == 0 and json.loads(gc.stdout)["bytes_freed"] == 4
    assert runner.invoke(app, ["store", "rm", "nothex"]).exit_code == 2
    rm = runner.invoke(app, ["store", "rm", row["key"]])
    assert rm.exit_code == 0 and not path.exists()
    assert runner.invoke(app, ["store", "rm", row["key"]]).exit_code == 2


def test_inspect_and_verify_do_not_import_torch(bundle: Path) -> None:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {TESTS_DIR!r})\n"
        "from plugins.fake_backend import register; register()\n"
        "import pickle\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('unpickling during inspect')\n"
        "pickle.load = pickle.loads = pickle.Unpickler = refuse\n"
        "from neuronc.cli import main\n"
        "for argv in (['inspect', sys.argv[1], '--verify', '--against-env', '--json'], ['verify', sys.argv[1]]):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
        "heavy = sorted({'torch', 'transformers', 'numpy', 'safetensors'} & set(sys.modules))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": TESTS_DIR}
    result = subprocess.run(
        [sys.executable, "-c", code, str(bundle)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stderr


def test_extra_verify_checks_plug_in_and_are_skipped_after_integrity_failure(bundle: Path) -> None:
    from neuronc.bundle import read_manifest
    from neuronc.cli.inspect import _run_checks
    from neuronc.errors import VerificationError

    calls: list[Path] = []

    def accuracy(path: Path, manifest: object) -> tuple[dict[str, object], None]:
        calls.append(path)
        return {"ok": True}, None  # the check's report, and no failure

    manifest = read_manifest(bundle)
    data: dict[str, object] = {}
    assert _run_checks(bundle, manifest, data, verify=True, against_env=False, jobs=1, accuracy=accuracy) is None
    assert data["accuracy"] == {"ok": True} and calls == [bundle]
    (bundle / "logs" / "compile.log").write_text("changed")
    failure = _run_checks(bundle, manifest, data, verify=True, against_env=False, jobs=1, accuracy=accuracy)
    assert isinstance(failure, VerificationError)
    assert data["accuracy"] == {"skipped": "an earlier check failed"} and calls == [bundle]


def test_a_failed_verify_check_keeps_its_report_and_a_raised_one_reports_nothing(bundle: Path) -> None:
    """A check returns its report with the failure it found (the report stays in the document, the
    failure ends the run), or raises a NeuroncError when it has no report to give."""
    from neuronc.bundle import read_manifest
    from neuronc.cli.inspect import _run_checks
    from neuronc.errors import EnvironmentIncompatibleError, VerificationError

    diverged = VerificationError("diverged")
    manifest = read_manifest(bundle)
    data: dict[str, object] = {}

    def accuracy(path: Path, manifest: object) -> tuple[dict[str, object], VerificationError]:
        return {"passed": False}, diverged

    assert _run_checks(bundle, manifest, data, verify=True, against_env=False, jobs=1, accuracy=accuracy) is diverged
    assert data["accuracy"] == {"passed": False} and data["verify"]["ok"] is True

    unreadable = EnvironmentIncompatibleError("no image")

    def verdict(path: Path, manifest: object) -> tuple[dict[str, object], None]:
        raise unreadable

    data = {}
    assert _run_checks(bundle, manifest, data, verify=True, against_env=False, jobs=1, verdict=verdict) is unreadable
    assert "verdict" not in data
