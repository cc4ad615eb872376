"""`neuronc profiles list|show|copy`: the profiles and demo model shipped as package data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_startup import HEAVY, _imported_modules
from test_tables import unbroken, words_of

from neuronc.cli import app
from neuronc.data import shipped_files, shipped_profiles

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "neuronc" / "data" / "profiles"
SHIPPED = sorted(p.stem for p in DATA.glob("*.yaml"))


def _source_files() -> list[str]:
    return sorted(
        p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def test_repository_profiles_is_the_package_data() -> None:
    # One copy of each file: the checkout's profiles/ (the README's quickstart path) is a symlink.
    assert (ROOT / "profiles").is_symlink()
    assert (ROOT / "profiles").resolve() == DATA.resolve()
    assert (ROOT / "profiles" / "tiny-llama-cpu.yaml").read_bytes() == (DATA / "tiny-llama-cpu.yaml").read_bytes()


def test_importlib_resources_finds_every_profile_and_model_file() -> None:
    expected = _source_files()
    assert "tiny-llama-cpu.yaml" in expected and "models/tiny-llama/model.safetensors" in expected
    assert shipped_files() == expected
    root = files("neuronc.data") / "profiles"
    for rel in expected:
        assert root.joinpath(*rel.split("/")).read_bytes() == (DATA / rel).read_bytes(), rel


def test_wheel_contains_every_profile_and_model_file(tmp_path: Path) -> None:
    """Build the (pure-Python) wheel from a copy of the source and look inside it."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "neuronc", src / "neuronc", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "neuronc" / "data" / "profiles" / "__pycache__").mkdir()  # as a checkout that ran has
    (src / "neuronc" / "data" / "profiles" / "__pycache__" / "x.pyc").write_bytes(b"")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=src,
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("neuronc-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for rel in _source_files():
            assert archive.read(f"neuronc/data/profiles/{rel}") == (DATA / rel).read_bytes(), rel
    packaged = {n for n in names if n.startswith("neuronc/data/profiles/")}
    assert packaged == {f"neuronc/data/profiles/{rel}" for rel in _source_files()}
    assert "neuronc/data/__init__.py" in names and "neuronc/cli/presets.py" in names


def test_list_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["profiles", "list", "--json"])
    assert result.exit_code == 0, result.output
    profiles = json.loads(result.stdout)["profiles"]
    assert [p["name"] for p in profiles] == SHIPPED
    assert all(p["description"] and p["backend"] and p["target"] for p in profiles)
    demo = next(p for p in profiles if p["name"] == "tiny-llama-cpu")
    assert demo == {
        "name": "tiny-llama-cpu",
        "description": "Demo model on the embedded CPU backend (torch.export + AOTInductor).",
        "file": "tiny-llama-cpu.yaml",
        "profile_name": "tiny-llama-cpu",
        "backend": "inductor",
        "target": "cpu",
        "model": "models/tiny-llama",
        "local_model": "models/tiny-llama",
    }
    assert {p["local_model"] for p in profiles if p["name"] != "tiny-llama-cpu"} == {None}


@pytest.mark.parametrize("columns", ["80", "120"])
def test_list_table_never_breaks_a_name(runner: CliRunner, monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    result = runner.invoke(app, ["profiles", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= int(columns) for line in lines)
    for name in SHIPPED:
        assert any(line.split()[:1] == [name] for line in lines), name
    descriptions = [p.description for p in shipped_profiles()]
    if f"not shown at {columns} columns: description" in result.stdout:
        # The description gives way first on a narrow terminal (`profiles show` prints it); the
        # backend, which tells profiles apart, stays.
        assert "transformers-neuronx" in result.stdout
        return
    assert unbroken(result.stdout, words_of(descriptions), int(columns)) == []


def test_show_prints_the_yaml_as_shipped(runner: CliRunner) -> None:
    for name in ("tiny-llama-cpu", "tiny-llama-cpu.yaml"):
        result = runner.invoke(app, ["profiles", "show", name])
        assert result.exit_code == 0, result.output
        assert result.stdout == (DATA / "tiny-llama-cpu.yaml").read_text(encoding="utf-8")
    # The profile's own `name:` works too.
    result = runner.invoke(app, ["profiles", "show", "llama3.1-8b-instruct-inf2-tp8"])
    assert result.stdout == (DATA / "llama3.1-8b-instruct-nxdi-inf2.yaml").read_text(encoding="utf-8")


def test_unknown_name_is_invalid_input_with_a_suggestion(runner: CliRunner) -> None:
    result = runner.invoke(app, ["profiles", "show", "tiny-lama"])
    assert result.exit_code == 2
    assert "no shipped profile named 'tiny-lama'. Did you mean 'tiny-llama-cpu'?" in result.stderr
    assert "neuronc profiles list" in result.stderr
    result = runner.invoke(app, ["profiles", "copy", "nope", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert (error["error"], error["exit_code"], error["message"]) == (
        "invalid_input",
        2,
        "no shipped profile named 'nope'",
    )


def test_copy_demo_brings_its_model_and_validates_to_the_same_hash(runner: CliRunner, tmp_path: Path) -> None:
    dest = tmp_path / "work"
    result = runner.invoke(app, ["profiles", "copy", "tiny-llama-cpu", str(dest), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["profile"] == str(dest / "tiny-llama-cpu.yaml")
    assert data["model_dir"] == str(dest / "models" / "tiny-llama")
    written = sorted(Path(f).relative_to(dest).as_posix() for f in data["files"])
    assert written == sorted(["tiny-llama-cpu.yaml", *(f for f in _source_files() if f.startswith("models/"))])
    for rel in written:
        assert (dest / rel).read_bytes() == (DATA / rel).read_bytes(), rel
    assert not [p for p in dest.rglob("*.tmp")]
    # The copy is a working profile, and the same build as the shipped one.
    hashes = runner.invoke(app, ["hash", str(dest / "tiny-llama-cpu.yaml"), str(DATA / "tiny-llama-cpu.yaml")])
    assert hashes.exit_code == 0, hashes.output
    result = runner.invoke(app, ["validate", str(dest / "tiny-llama-cpu.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    shipped = runner.invoke(app, ["validate", str(DATA / "tiny-llama-cpu.yaml"), "--json"])
    copied_hash = json.loads(result.stdout)["profiles"][0]["builds"][0]["config_hash"]
    assert copied_hash == json.loads(shipped.stdout)["profiles"][0]["builds"][0]["config_hash"]


def test_copy_refuses_to_overwrite_without_force(runner: CliRunner, tmp_path: Path) -> None:
    assert runner.invoke(app, ["profiles", "copy", "tiny-llama-cpu", str(tmp_path)]).exit_code == 0
    edited = tmp_path / "models" / "tiny-llama" / "config.json"
    edited.write_text("{}\n")
    result = runner.invoke(app, ["profiles", "copy", "tiny-llama-cpu", str(tmp_path)])
    assert result.exit_code == 2
    assert "not overwriting 7 existing files" in result.stderr and "--force" in result.stderr
    assert edited.read_text() == "{}\n"
    result = runner.invoke(app, ["profiles", "copy", "tiny-llama-cpu", str(tmp_path), "--force"])
    assert result.exit_code == 0, result.output
    assert edited.read_bytes() == (DATA / "models" / "tiny-llama" / "config.json").read_bytes()


def test_copy_to_a_file_name_and_to_the_working_directory(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = runner.invoke(app, ["profiles", "copy", "tiny-llama-cpu", str(tmp_path / "sub" / "mine.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sub" / "mine.yaml").read_bytes() == (DATA / "tiny-llama-cpu.yaml").read_bytes()
    assert (tmp_path / "sub" / "models" / "tiny-llama" / "model.safetensors").is_file()
    # A Hub profile is one YAML file; no DEST means the working directory.
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["profiles", "copy", "opt-6.7b-tnx-inf2-tp2"])
    assert result.exit_code == 0, result.output
    assert "wrote opt-6.7b-tnx-inf2-tp2.yaml" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opt-6.7b-tnx-inf2-tp2.yaml", "sub"]


def test_every_shipped_profile_validates(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", *(str(DATA / f"{name}.yaml") for name in SHIPPED), "--json"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in shipped_profiles()] == SHIPPED


@pytest.mark.parametrize(
    "args",
    [
        ["profiles", "list"],
        ["profiles", "list", "--json"],
        ["profiles", "show", "tiny-llama-cpu"],
        ["profiles", "copy"],
    ],
    ids=lambda a: " ".join(a),
)
def test_profiles_commands_do_not_import_heavy_modules(args: list[str], tmp_path: Path) -> None:
    if args[-1] == "copy":
        args = [*args, "tiny-llama-cpu", str(tmp_path)]
    modules = _imported_modules(args)
    assert not (modules & set(HEAVY)), sorted(modules & set(HEAVY))
    if "copy" in args:
        assert (tmp_path / "models" / "tiny-llama" / "model.safetensors").is_file()
