"""`neuronc compile --model ... --backend ...`: a build from flags is the build of the equivalent profile.

The demo profile's settings as flags are a store hit of the demo bundle (the same key), and
`--save-profile` writes that profile: it loads, it has the schema line, and it hashes the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _demo import Demo
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app
from neuronc.profile import load_profile
from neuronc.profile.from_flags import ProfileFlags, profile_text


def invoke(runner: CliRunner, *args: str | Path) -> tuple[int, str, str]:
    out.reset()
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def demo_flags(model: Path) -> list[str]:
    """profiles/tiny-llama-cpu.yaml as flags (weights: presharded is the inductor backend's default)."""
    return [
        "--model",
        str(model),
        "--backend",
        "inductor",
        "--target",
        "cpu",
        "--tp",
        "1",
        "--batch",
        "1",
        "--amp",
        "fp32",
        "--max-length",
        "128",
        "--context-buckets",
        "32,64",
        "--token-buckets",
        "128",
    ]


def test_the_demo_settings_as_flags_are_a_store_hit_of_the_demo_bundle(
    runner: CliRunner, demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONC_STORE", str(demo.store))
    saved = tmp_path / "profiles" / "demo-from-flags.yaml"
    code, stdout, stderr = invoke(
        runner, "compile", *demo_flags(demo.model_dir), "--require-hit", "--save-profile", saved, "--json"
    )
    assert code == 0, stderr
    [build] = json.loads(stdout)["builds"]
    assert build["status"] == "hit"
    assert build["config_hash"] == demo.report.config_hash
    assert build["bundle"] == str(demo.bundle)

    # --save-profile round-trips: the file is a commented profile with its schema line, and it is
    # the same build (the same normalised spec, the same key).
    text = saved.read_text()
    assert text.startswith("# Written by neuronc") and "# yaml-language-server: $schema=" in text
    schema = text.split("$schema=", 1)[1].split("\n", 1)[0]
    assert (saved.parent / schema).resolve() == (Path(__file__).parents[1] / "docs" / "profile.schema.json")
    [spec] = load_profile(saved).specs
    [original] = load_profile(demo.profile).specs
    ours, theirs = spec.normalized(), original.normalized()
    assert Path(saved.parent, ours["model"].pop("id")).resolve() == demo.model_dir.resolve()
    theirs["model"].pop("id")
    assert ours == theirs
    code, stdout, stderr = invoke(runner, "compile", saved, "--require-hit", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["builds"][0]["config_hash"] == demo.report.config_hash


def test_dry_run_compiles_nothing_and_prints_the_profile_and_its_key(
    runner: CliRunner, demo: Demo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NEURONC_STORE", str(tmp_path / "empty-store"))
    code, stdout, stderr = invoke(runner, "compile", *demo_flags(demo.model_dir), "--dry-run", "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["dry_run"] is True and data["saved_to"] is None
    assert data["builds"][0]["config_hash"].startswith(demo.report.config_hash or "?")
    assert 'backend: "inductor"' in data["profile"]
    assert not (tmp_path / "empty-store").exists() or not any((tmp_path / "empty-store").rglob("manifest.json"))
    code, stdout, _ = invoke(runner, "compile", *demo_flags(demo.model_dir), "--dry-run")
    assert code == 0
    assert "config hash" in stdout and "max_length: 128" in stdout


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        (["--tp", "3"], "--tp"),
        (["--amp", "fp8"], "--amp"),
        (["--target", "trn9"], "--target"),
        (["--context-buckets", "256"], "--context-buckets"),
        (["--weights", "everywhere"], "--weights"),
        (["--sdk", "banana"], "--sdk"),
    ],
)
def test_errors_name_the_flag(runner: CliRunner, tmp_path: Path, change: list[str], flag: str) -> None:
    model = Path(__file__).parents[1] / "profiles" / "models" / "tiny-llama"
    args = demo_flags(model)
    args += change  # the later value of a repeated option wins
    code, stdout, stderr = invoke(runner, "compile", *args, "--dry-run", "--json")
    assert code == 2, stderr
    error = json.loads(stdout)["error"]  # the compile report's top-level error
    assert error["error"] == "profile_invalid"
    assert any(line.startswith(f"{flag}: ") for line in error["details"]), error["details"]
    assert not any(".yaml:" in line for line in error["details"])  # no file the user never wrote


def test_missing_flags_bad_buckets_and_profiles_with_flags_are_refused(runner: CliRunner, tmp_path: Path) -> None:
    code, stdout, _ = invoke(runner, "compile", "--model", "org/name", "--json")
    assert code == 2
    assert "--backend, --target, --max-length are required" in json.loads(stdout)["error"]["message"]
    code, stdout, _ = invoke(
        runner, "compile", *demo_flags(tmp_path), "--context-buckets", "32,x", "--dry-run", "--json"
    )
    assert code == 2
    assert json.loads(stdout)["error"]["message"].startswith("--context-buckets '32,x'")
    profile = Path(__file__).parents[1] / "profiles" / "tiny-llama-cpu.yaml"
    code, stdout, _ = invoke(runner, "compile", profile, "--tp", "2", "--json")
    assert code == 2
    assert "profile arguments and model flags (--tp) cannot be combined" in json.loads(stdout)["error"]["message"]
    code, _, stderr = invoke(runner, "compile")  # a usage error, as Click reports a missing argument
    assert code == 2
    assert "Missing argument 'PROFILES'. Pass profile files, or --model with" in stderr
    code, stdout, _ = invoke(runner, "compile", profile, "--save-profile", tmp_path / "x.yaml", "--json")
    assert code == 2
    assert "--save-profile needs --model" in json.loads(stdout)["error"]["message"]


def test_a_hub_model_keeps_its_id_and_revision(tmp_path: Path) -> None:
    flags = ProfileFlags(
        model="meta-llama/Llama-3.1-8B",
        revision="0123456789abcdef0123456789abcdef01234567",
        backend="optimum-neuron",
        target="inf2",
        tp=2,
        batch=4,
        amp="bf16",
        max_length=4096,
    )
    text = profile_text(flags, tmp_path)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    [spec] = load_profile(path, check_model_config=False).specs
    assert (spec.model.id, spec.model.revision) == ("meta-llama/Llama-3.1-8B", flags.revision)
    assert (spec.backend, spec.target, spec.tp_degree, spec.batch_size, spec.amp) == (
        "optimum-neuron",
        "inf2",
        2,
        4,
        "bf16",
    )
    assert spec.sequence.max_length == 4096


def test_profiles_new_writes_the_profile_of_the_same_key(runner: CliRunner, tmp_path: Path) -> None:
    root = Path(__file__).parents[1] / "profiles"
    path = tmp_path / "nested" / "demo.yaml"
    code, stdout, stderr = invoke(
        runner, "profiles", "new", path, *demo_flags(root / "models" / "tiny-llama"), "--json"
    )
    assert code == 0, stderr
    assert json.loads(stdout) == {"path": str(path), "profile": path.read_text(), "builds": 1}
    code, stdout, stderr = invoke(runner, "validate", path, root / "tiny-llama-cpu.yaml", "--json")
    assert code == 0, stderr
    ours, shipped = (p["builds"][0]["config_hash"] for p in json.loads(stdout)["profiles"])
    assert ours == shipped
