"""The machine-output contract (docs/exit-codes.md): with --json, stdout is exactly one JSON document
of the shape docs/schemas/ documents for the command, on success and on every failure (usage errors
included), and the exit code is the documented one whatever the environment sets.

Every case runs the real command against the demo bundle compiled once per session (tests/_demo.py);
the Neuron bundle for `deploy` is written by tests/test_deploy.py's helper. A case runs in this
process (the console script's ``main``, with the case's environment and directory) unless it says
why it needs a fresh one; each case runs in a directory of its own and makes whatever state it
needs itself, so that any case passes alone, in any order, on any worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _schemas import assert_conforms
from conftest import HF_FIXTURE, Workspace

from neuronc.cli import app


@dataclass(frozen=True)
class Case:
    id: str
    schema: str
    args: tuple[str, ...]
    code: int = 0
    error: str | None = None  # the error kind expected on failure
    before: tuple[str, ...] = ()  # a command run first (it must exit 0): the state this case needs
    process: str | None = None  # why the case must run as a fresh process (None: in this process)


# The demo profile's build, as model flags (tests/test_compile_flags.py checks they mean the same key).
FLAGS = ("--model", "models/tiny-llama", "--backend", "inductor", "--target", "cpu", "--amp", "fp32")
FLAGS += ("--max-length", "128", "--context-buckets", "32,64", "--token-buckets", "128")

CASES = [
    Case("validate", "validate", ("validate", "tiny-llama-cpu.yaml"), process="the console script, start to exit"),
    Case("validate-invalid", "validate", ("validate", "bad.yaml", "tiny-llama-cpu.yaml"), 2),
    Case("hash", "hash", ("hash", "tiny-llama-cpu.yaml")),
    Case("hash-diff", "hash", ("hash", "--diff", "tiny-llama-cpu.yaml", "other.yaml")),
    Case("hash-invalid", "hash", ("hash", "bad.yaml"), 2, "profile_invalid"),
    Case("backends", "backends", ("backends",)),
    Case("compile-hit", "compile-report", ("compile", "tiny-llama-cpu.yaml", "--out", "out-hit", "--report", "r.json")),
    Case("compile-invalid", "compile-report", ("compile", "bad.yaml", "--report", "r-bad.json"), 2),
    Case("compile-require-hit", "compile-report", ("compile", "other.yaml", "--require-hit"), 6),
    Case("inspect", "inspect", ("inspect", "bundle", "--verify", "--against-env")),
    Case("inspect-not-a-bundle", "inspect", ("inspect", "models"), 2, "bundle_invalid"),
    Case("verify", "verify", ("verify", "bundle", "--against-env")),
    Case("verify-damaged", "verify", ("verify", "broken"), 4),
    Case("verify-signature", "verify", ("verify", "signed", "--key", "{public_key}")),
    Case("verify-unsigned", "verify", ("verify", "bundle", "--signature", "--key", "{public_key}"), 4),
    Case("verify-no-trust-root", "verify", ("verify", "bundle", "--signature"), 2, "invalid_input"),
    Case("sign", "sign", ("sign", "to-sign", "--key", "{signing_key}")),
    Case("sign-missing-key", "sign", ("sign", "to-sign", "--key", "nope.pem"), 2, "invalid_input"),
    Case("store-list", "store-list", ("store", "list")),
    Case("store-verify", "store-verify", ("store", "verify", "cd346ebf")),
    Case("store-verify-unknown", "store-verify", ("store", "verify", "ffffffff"), 2, "invalid_input"),
    Case("store-gc", "store-gc", ("store", "gc")),
    Case("store-publish", "store-publish", ("store", "publish", "bundle", "--store", "store2")),
    Case("store-fetch", "store-fetch", ("store", "fetch", "cd346ebf", "--out", "fetched")),
    Case(
        "store-fetch-unsigned",
        "store-fetch",
        ("store", "fetch", "cd346ebf", "--require-signature", "--key", "{public_key}"),
        4,
        "signature_missing",
    ),
    Case(
        "store-rm",
        "store-rm",
        ("store", "rm", "cd346ebf", "--store", "store2"),
        before=("store", "publish", "bundle", "--store", "store2"),
    ),
    Case("store-rm-unknown", "store-rm", ("store", "rm", "ffffffff"), 2, "invalid_input"),
    Case("split", "split", ("split", "models/tiny-llama", "--tp", "1", "--out", "weights")),
    Case("split-check", "split-check", ("split", "--check", "bundle/weights", "models/tiny-llama")),
    Case("split-missing", "split", ("split", "nowhere", "--tp", "2", "--out", "w2"), 2),
    Case(
        "run",
        "run",
        ("run", "bundle", "--prompt", "Alice", "--max-new-tokens", "4"),
        process="loads the compiled model into torch, which keeps process-wide state",
    ),
    Case("run-not-a-bundle", "run", ("run", "models", "--prompt", "Alice"), 2, "bundle_invalid"),
    Case("cache-lookup-model", "cache-lookup", ("cache-lookup", "example-org/tiny-llama", "--snapshot", "{snapshot}")),
    Case("cache-lookup-profile", "cache-lookup", ("cache-lookup", "tiny-llama-cpu.yaml", "--snapshot", "{snapshot}")),
    Case("cache-lookup-offline", "cache-lookup", ("cache-lookup", "example-org/tiny-llama"), 6, "cache_miss"),
    Case("cache-mirror-offline", "cache-mirror", ("cache", "mirror", "mirror"), 6, "cache_miss"),
    Case("cache-status", "cache-status", ("cache", "status", "--cache-dir", "models")),
    Case("cache-cleanup", "cache-cleanup", ("cache", "cleanup", "--cache-dir", "models", "--dry-run")),
    Case(
        "cache-synchronize-nothing", "cache-synchronize", ("cache", "synchronize", "{neuron_bundle}", "--to", "hub"), 2
    ),
    Case("compile-dry-run", "compile-dry-run", ("compile", *FLAGS, "--dry-run", "--save-profile", "flags.yaml")),
    Case("compile-flags-invalid", "compile-report", ("compile", *FLAGS, "--tp", "3", "--dry-run"), 2),
    Case("compile-flags-and-profile", "compile-report", ("compile", "tiny-llama-cpu.yaml", *FLAGS), 2),
    Case("plan", "plan", ("plan", "tiny-llama-cpu.yaml")),
    Case("plan-invalid", "plan", ("plan", "bad.yaml"), 2, "profile_invalid"),
    Case("plan-traffic", "plan", ("plan", "tiny-llama-cpu.yaml", "--traffic", "traffic.jsonl")),
    Case("buckets", "buckets", ("buckets", "tiny-llama-cpu.yaml", "--traffic", "traffic.jsonl", "--max-graphs", "3")),
    Case(
        "buckets-bad-line", "buckets", ("buckets", "tiny-llama-cpu.yaml", "--traffic", "bad.yaml"), 2, "invalid_input"
    ),
    Case(
        "buckets-empty", "buckets", ("buckets", "tiny-llama-cpu.yaml", "--traffic", "empty.jsonl"), 2, "invalid_input"
    ),
    Case("matrix", "matrix", ("matrix", "tiny-llama-cpu.yaml")),
    Case("matrix-invalid", "matrix", ("matrix", "bad.yaml"), 2, "profile_invalid"),
    Case("matrix-two-formats", "matrix", ("matrix", "tiny-llama-cpu.yaml", "--format", "github"), 2, "invalid_input"),
    Case("schema", "schema", ("schema",)),
    Case("schema-out", "schema", ("schema", "--out", "profile.schema.json")),
    Case("deploy", "deploy", ("deploy", "{neuron_bundle}", "--for", "vllm", "--out", "deploy-vllm")),
    Case("deploy-cpu-bundle", "deploy", ("deploy", "bundle", "--for", "vllm"), 2, "invalid_input"),
    Case("deploy-unknown-stack", "deploy", ("deploy", "bundle", "--for", "k8s"), 2),
    # bench: a run needs GuideLLM (tests/test_bench_neuron.py validates its documents against the schema too)
    Case("bench-bad-slo", "bench", ("bench", "tiny-llama-cpu.yaml", "--slo", "ttfb_p99<=2s"), 2, "invalid_input"),
    Case("profiles-list", "profiles-list", ("profiles", "list")),
    Case("profiles-copy", "profiles-copy", ("profiles", "copy", "tiny-llama-cpu", "copied")),
    Case("profiles-new", "profiles-new", ("profiles", "new", "new.yaml", *FLAGS)),
    Case("profiles-new-invalid", "profiles-new", ("profiles", "new", "new.yaml", "--model", "x"), 2, "invalid_input"),
    Case("profiles-copy-unknown", "profiles-copy", ("profiles", "copy", "no-such-profile"), 2, "invalid_input"),
]


@pytest.fixture(scope="module")
def ws(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = workspace.root
    (root / "bad.yaml").write_text(
        "model: {id: models/tiny-llama}\nbackend: inductor\ntarget: !!python/name:os.system cpu\n"
        "sequence: {max_length: 64}\n"
    )
    lengths = [(3 + i % 11, 4 + i % 17) for i in range(60)] + [(40, 20), (90, 10)]
    (root / "traffic.jsonl").write_text(
        "".join(f'{{"prompt_tokens": {p}, "output_tokens": {m}}}\n' for p, m in lengths)
    )
    (root / "empty.jsonl").write_text("")
    other = (root / "tiny-llama-cpu.yaml").read_text().replace("max_length: 128", "max_length: 96")
    (root / "other.yaml").write_text(other.replace("token_buckets: [128]", "token_buckets: [96]"))
    shutil.copytree(root / "bundle", root / "broken")
    with (root / "broken" / "model" / "config.json").open("a") as f:
        f.write(" ")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_deploy import _bundle  # a Neuron bundle through the real writer (no SDK needed)

    if importlib.util.find_spec("model_signing") is not None:  # the sign extra: CI installs it
        from _signing import ec_key

        from neuronc.bundle.signing import sign_bundle
        from neuronc.bundle.signing_material import Signer

        keys = ec_key(root / "keys")
        workspace.signing_key, workspace.public_key = keys.private, keys.public  # type: ignore[attr-defined]
        shutil.copytree(root / "bundle", root / "to-sign")
        sign_bundle(shutil.copytree(root / "bundle", root / "signed"), Signer.choose(key=keys.private))

    workspace.neuron_bundle = _bundle(tmp_path_factory.mktemp("neuron-bundle"), "optimum-neuron")  # type: ignore[attr-defined]
    return workspace


def _args(ws: Workspace, args: tuple[str, ...]) -> list[str]:
    subs = {"{snapshot}": str(HF_FIXTURE / "snapshot"), "{neuron_bundle}": str(ws.neuron_bundle)}  # type: ignore[attr-defined]
    for name in ("signing_key", "public_key"):
        if any(f"{{{name}}}" in a for a in args):
            if not hasattr(ws, name):
                pytest.skip("the sign extra (model-signing) is not installed")
            subs[f"{{{name}}}"] = str(getattr(ws, name))
    return [subs.get(a, a) for a in args] + ["--json"]


def _own_directory(ws: Workspace, where: Path) -> Workspace:
    """The workspace's inputs (links to them) in a directory of this case's own: outputs and stores
    a case writes are its own."""
    for entry in ws.root.iterdir():
        if entry.name != "store":
            (where / entry.name).symlink_to(entry)
    own = Workspace(where, ws.demo, ws.env)
    own.neuron_bundle = ws.neuron_bundle  # type: ignore[attr-defined]
    for name in ("signing_key", "public_key"):
        if hasattr(ws, name):
            setattr(own, name, getattr(ws, name))
    return own


def _check(ws: Workspace, case: Case, where: Path, env: dict[str, str] | None = None) -> Workspace:
    ws = _own_directory(ws, where)
    if case.before:
        before = ws.invoke(*_args(ws, case.before))
        assert before.returncode == 0, (
            f"{case.id}: `{' '.join(case.before)}` exited {before.returncode}\n{before.stderr}"
        )
    proc = (ws.run if case.process else ws.invoke)(*_args(ws, case.args), env=env)
    assert proc.returncode == case.code, f"{case.id}: exit {proc.returncode}, expected {case.code}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr or (env or {}).get("NEURONC_DEBUG"), proc.stderr
    document = json.loads(proc.stdout)  # exactly one document: json.loads refuses trailing data
    assert_conforms(case.schema, document, f"`neuronc {' '.join(case.args)} --json`")
    if case.error is not None:
        assert document["error"] == case.error and document["exit_code"] == case.code, document
    elif case.code:
        # A report-shaped failure (validate, compile, verify, plan) still carries the exit code.
        if "exit_code" in document:
            assert document["exit_code"] == case.code, document
        else:  # validate's report says so in `valid`, verify's in `ok`
            assert document.get("valid") is False or document.get("ok") is False, document
    return ws


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_json_output_matches_its_documented_schema(ws: Workspace, case: Case, tmp_path: Path) -> None:
    ws = _check(ws, case, tmp_path)
    if case.id == "compile-hit":
        assert_conforms("compile-report", json.loads((ws.root / "r.json").read_text()), "the --report file")
    if case.id == "compile-invalid":
        report = json.loads((ws.root / "r-bad.json").read_text())
        assert_conforms("compile-report", report, "the --report file of a failed run")
        assert report["builds"] == [] and report["error"]["error"] == "profile_invalid"


# The environment a CI job may set must not change the exit code or the document.
ENVIRONMENTS = {
    "debug": {"NEURONC_DEBUG": "1"},
    "wide": {"NEURONC_WIDE": "1"},
    "narrow": {"COLUMNS": "20"},
    "colour": {"FORCE_COLOR": "1", "NO_COLOR": "", "TERM": "xterm-256color"},
    "ci": {"CI": "true", "TERM": "dumb"},
}
QUICK = [
    c
    for c in CASES
    if c.id
    in {
        "validate-invalid",
        "hash-invalid",
        "compile-invalid",
        "verify-damaged",
        "inspect",
        "store-rm-unknown",
        "plan",
        "deploy-cpu-bundle",
        "matrix",
    }
]


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=list(ENVIRONMENTS))
@pytest.mark.parametrize("case", QUICK, ids=[c.id for c in QUICK])
def test_the_environment_changes_neither_exit_code_nor_document(
    ws: Workspace, case: Case, env: str, tmp_path: Path
) -> None:
    _check(ws, case, tmp_path, ENVIRONMENTS[env])


def _json_commands() -> list[tuple[str, ...]]:
    """Every command of the CLI that takes --json, found from the application itself."""
    import click

    found: list[tuple[str, ...]] = []

    def walk(command: click.Command | None, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), (*path, name))
        elif command is not None and any("--json" in getattr(p, "opts", ()) for p in command.params):
            found.append(path)

    walk(app, ())
    return found


def test_every_json_command_has_a_schema_and_a_case() -> None:
    commands = _json_commands()
    assert len(commands) >= 20, commands
    covered = {c.args[: 2 if c.args[0] in {"store", "cache", "profiles"} else 1] for c in CASES}
    assert set(commands) <= covered, f"--json commands without a schema case here: {set(commands) - covered}"


@pytest.mark.parametrize("command", _json_commands(), ids=lambda c: " ".join(c))
def test_a_usage_error_with_json_is_one_error_document(tmp_path: Path, command: tuple[str, ...]) -> None:
    ws = Workspace(tmp_path, None, dict(os.environ))  # type: ignore[arg-type]  # no demo needed
    # One command in a fresh process too: Click's usage error path as the console script takes it.
    run = ws.run if command == ("compile",) else ws.invoke
    proc = run(*command, "--no-such-option", "--json")
    assert proc.returncode == 2, proc.stderr
    document = json.loads(proc.stdout)
    assert_conforms("error", document, f"`neuronc {' '.join(command)} --no-such-option --json`")
    assert document["error"] == "usage_error" and "--no-such-option" in document["message"]
    assert "No such option" in proc.stderr  # people still get Click's usage message
