"""The foundation commands through Click's test runner: validate, schema, hash, backends, --version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronc import __version__
from neuronc.cli import app

ROOT = Path(__file__).resolve().parent.parent
NXDI_PROFILE = ROOT / "profiles" / "llama3.1-8b-instruct-nxdi-inf2.yaml"
BAD = ROOT / "tests" / "fixtures" / "profiles" / "bad"


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"neuronc {__version__}"


def test_help_lists_commands(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("validate", "schema", "hash", "backends"):
        assert name in result.stdout


def test_validate_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", str(NXDI_PROFILE), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["valid"] is True
    (profile,) = data["profiles"]
    (build,) = profile["builds"]
    assert len(build["config_hash"]) == 64
    assert build["normalized"]["tp_degree"] == 8
    assert build["normalized"]["sequence"]["context_buckets"] == [1024, 2048, 4096, 8192]
    graphs = build["plan"]["graphs"]
    assert [g["name"] for g in graphs] == [
        "cte-b4-s1024",
        "cte-b4-s2048",
        "cte-b4-s4096",
        "cte-b4-s8192",
        "tkg-b4-s4096",
        "tkg-b4-s8192",
        "tkg-b4-s16384",
    ]


def test_validate_human_output(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", str(NXDI_PROFILE)])
    assert result.exit_code == 0
    assert "config hash" in result.stdout
    assert "tkg-b4-s16384" in result.stdout


def test_validate_bad_profile_exit_2_with_messages(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", str(BAD / "typos-types-buckets.yaml")])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Did you mean 'backend'?" in result.stderr
    assert "hint:" in result.stderr
    assert result.stdout == ""


def test_validate_bad_profile_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", str(NXDI_PROFILE), str(BAD / "inductor-tp.yaml"), "--json"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert [p["valid"] for p in data["profiles"]] == [True, False]
    assert any("tp_degree 1 only" in e for e in data["profiles"][1]["errors"])


def test_validate_missing_file(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "none.yaml"), "--json"])
    assert result.exit_code == 2
    assert "no such profile" in json.loads(result.stdout)["profiles"][0]["errors"][0]


def test_schema_is_json_schema(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"model", "backend", "target", "sequence"} <= set(schema["required"])
    assert schema["additionalProperties"] is False


def test_published_schema_is_current(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema"])
    assert (ROOT / "docs" / "profile.schema.json").read_text() == result.stdout, (
        "run: neuronc schema -o docs/profile.schema.json"
    )


def test_shipped_profiles_satisfy_the_published_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = json.loads((ROOT / "docs" / "profile.schema.json").read_text())
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_hash_and_diff(runner: CliRunner, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(
        NXDI_PROFILE.read_text().replace("batch_size: 4", "batch_size: 2").replace("tp_degree: 8", "tp_degree: 4")
    )
    plain = runner.invoke(app, ["hash", str(NXDI_PROFILE), "--json"])
    assert plain.exit_code == 0
    assert len(json.loads(plain.stdout)["hashes"][0]["config_hash"]) == 64
    result = runner.invoke(app, ["hash", "--diff", str(NXDI_PROFILE), str(other), "--json"])
    assert result.exit_code == 0, result.output
    (comparison,) = json.loads(result.stdout)["comparisons"]
    assert comparison["same"] is False
    assert [d["field"] for d in comparison["differences"]] == ["tp_degree", "batch_size"]
    same = runner.invoke(app, ["hash", "--diff", str(NXDI_PROFILE), str(NXDI_PROFILE)])
    assert "same config hash" in same.stdout


def test_hash_diff_needs_two(runner: CliRunner) -> None:
    result = runner.invoke(app, ["hash", "--diff", str(NXDI_PROFILE)])
    assert result.exit_code == 2
    assert "exactly two" in result.stderr


def test_backends_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["backends", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)["backends"]}
    assert set(rows) >= {"inductor", "nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"}
    # The Neuron SDK is not installable from PyPI: the NxD backend must say what is missing.
    assert rows["nxdi"]["available"] is False
    assert "neuronx-distributed-inference" in rows["nxdi"]["reason"]
    assert "pip.repos.neuron.amazonaws.com" in rows["nxdi"]["install_hint"]
    assert rows["inductor"]["versions"]["cpu_isa"]


def test_unknown_command_is_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2


def test_debug_env_shows_the_traceback_and_keeps_the_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # A CI job that sets NEURONC_DEBUG globally keeps the exit-code contract.
    env = {**os.environ, "NEURONC_DEBUG": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", "validate", str(BAD / "empty.yaml")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr and "ProfileError" in proc.stderr
    assert "error:" in proc.stderr


yaml_fragments = st.sampled_from(
    [
        "model: {id: o/m}\n",
        "model:\n  id: o/m\n  revision: r\n",
        "backend: nxdi\n",
        "backend: inductor\n",
        "target: cpu\n",
        "target: inf2\n",
        "tp_degree: 8\n",
        "tp_degree: -1\n",
        "batch_size: [1]\n",
        "sequence: {max_length: 128, context_buckets: [64, 32]}\n",
        "sequence:\n  max_length: 128\n  token_buckets: auto\n",
        "matrix: {batch_size: [1, 2]}\n",
        "matrix: {tp_degree: []}\n",
        "amp: bf16\n",
        "&a x: *a\n",
        "- item\n",
        "!!python/object:os.system x\n",
        "key: !!binary aGk=\n",
        "{unclosed\n",
        "\t tab: 1\n",
        "backend: nxdi\n",
        "options: {logical_nc_config: 2}\n",
        "weights: reference\n",
        "? complex\n: key\n",
        "[1, 2]: list-key\n",
        "null\n",
        "...\n",
        "---\n---\n",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fragments=st.lists(yaml_fragments, max_size=8), noise=st.binary(max_size=40), cut=st.integers(0, 400))
def test_fuzz_validate_never_tracebacks(tmp_path: Path, fragments: list[str], noise: bytes, cut: int) -> None:
    runner = CliRunner()
    text = "".join(fragments).encode()
    mutated = text[:cut] + noise + text[cut:] if noise else text
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(mutated)
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code in (0, 2), (mutated, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    json.loads(result.stdout)


def test_hash_diff_between_two_bundles(runner: CliRunner, tmp_path: Path) -> None:
    from plugins.fake_backend import build_bundle, make_spec

    a = build_bundle(tmp_path / "a", spec=make_spec(batch_size=1))
    b = build_bundle(tmp_path / "b", spec=make_spec(batch_size=2))
    result = runner.invoke(app, ["hash", "--diff", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    (comparison,) = json.loads(result.stdout)["comparisons"]
    assert comparison["same"] is False
    assert [d["field"] for d in comparison["differences"]] == ["batch_size"]


@pytest.mark.parametrize(
    ("args", "whole"),
    [(["--help", "compile"], True), (["--help"], True), (["--wide", "compile", "--help"], False)],
)
def test_root_help_before_a_command_lists_every_command(args: list[str], whole: bool) -> None:
    """The CLI builds only the command named (neuronc.cli._cli.Group); help before it still lists every command."""
    proc = subprocess.run([sys.executable, "-m", "neuronc", *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    listed = {name for name in ("validate", "inspect", "deploy", "cache-lookup") if f"  {name} " in proc.stdout}
    assert (
        (listed == {"validate", "inspect", "deploy", "cache-lookup"})
        if whole
        else "Usage: neuronc compile" in proc.stdout
    )


def test_a_ctrl_c_a_library_wraps_in_its_own_exception_is_still_an_interruption(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pydantic-core re-raises a KeyboardInterrupt that arrives while it builds a schema as a
    SchemaError; that Ctrl-C must still end the run as one (exit 130, not a traceback and exit 1)."""
    import os
    import signal
    import time

    from neuronc._output import out
    from neuronc.cli import _cli as cli
    from neuronc.cli._app import handle_errors

    def body(json_out: bool = False) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(500):  # the handler raises on the next bytecode; never wait for ever
                time.sleep(0.01)
        except KeyboardInterrupt:
            raise ValueError("Error building serializer: KeyboardInterrupt") from None
        raise AssertionError("SIGINT was not delivered")

    out.reset()
    # pytest-xdist workers ignore SIGINT: Python's own handler, as a console script has, for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(cli.Exit) as ended:
            handle_errors(body)(json_out=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ended.value.exit_code == 130
    document = json.loads(capsys.readouterr().out)
    assert (document["exit_code"], document["error"]) == (130, "interrupted")
    # Without an interruption, the same exception is a bug and propagates as one.
    with pytest.raises(RuntimeError):
        handle_errors(lambda json_out=False: (_ for _ in ()).throw(RuntimeError("bug")))(json_out=False)


def test_a_usage_error_found_in_a_commands_body_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error a command finds itself (a Ray flag without --executor ray) ends, through the one
    handler, as one Click finds while parsing: the command's usage line, exit 2, and with --json one
    document that names the command."""
    from neuronc._output import out
    from neuronc.cli._app import run_app

    out.reset()
    code = run_app(["plan", str(NXDI_PROFILE), "--ray-address", "auto", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "Usage: neuronc plan [OPTIONS]" in captured.err
    document = json.loads(captured.out)  # exactly one
    assert document["error"] == "usage_error" and document["exit_code"] == 2
    assert document["message"].startswith("neuronc plan: ") and "--executor ray" in document["message"]
