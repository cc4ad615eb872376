"""`neuronc deploy` with a hostile manifest: no value from a bundle becomes a command, a variable or a key.

A bundle is data from a store; its manifest may hold anything. Deploy copies manifest values into
shell scripts (``serve.sh``, ``archive.sh``, ``deploy.sh``, ``benchmark.sh``), env files
(``vllm.env`` sourced by sh, TGI's ``.env`` read by docker), YAML (``model-config.yaml``,
``docker-compose.yml``) and JSON. Each case here is a real ``neuronc deploy`` process on a bundle
written by hand; the generated files are checked by parsing them back, not by eye: ``sh -n`` and a
run of every script with the commands it calls replaced by recorders, the variables an env file
sets when sourced in an empty environment, ``yaml.safe_load``'s top-level keys, ``json.loads``.

A value that cannot be what its field is (a version with a newline, a dtype that is a line of
shell, a model id with a line separator) is refused with exit 2 naming the field; nothing is
written. A value that is legal but awkward (a model directory whose name holds quotes, ``;`` and
``#``; a bundle path with a newline) comes out as exactly one value of each file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _bundles import edit_manifest, neuronc, profile_for, text, write_bundle

TGI_TOOLCHAIN = {"neuronc": "0.1.0", "optimum-neuron": "0.3.0", "neuronx-cc": "2.19.8089.0+8ab9f450"}
# The commands generated scripts call; each is replaced by a recorder of its arguments.
COMMANDS = ("vllm", "optimum-cli", "torch-model-archiver", "torchserve", "aws", "guidellm", "docker")


def _backend_for(stack: str) -> tuple[str, dict[str, str] | None]:
    return {
        "vllm": ("nxdi", None),
        "tgi": ("optimum-neuron", TGI_TOOLCHAIN),
        "torchserve": ("transformers-neuronx", None),
        "sagemaker": ("optimum-neuron", None),
        "vllm-optimum": ("optimum-neuron", None),
    }[stack]


def _hostile_bundle(tmp_path: Path, stack: str, **profile: Any) -> Path:
    backend, toolchain = _backend_for(stack)
    return write_bundle(tmp_path / "bundle", backend, profile=profile_for(backend, **profile), toolchain=toolchain)


def _canary(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


# -- values that cannot be what their field is: refused, nothing written ----------------------------


def _set_toolchain(package: str, value: str) -> Any:
    return lambda m: m["toolchain"].__setitem__(package, value)


def _set_target(value: str) -> Any:
    def edit(m: dict[str, Any]) -> None:
        m["target"] = value
        m["profile"]["target"] = value

    return edit


def _set_profile(key: str, value: Any) -> Any:
    return lambda m: m["profile"].__setitem__(key, value)


def _set_model_id(value: str) -> Any:
    return lambda m: m["profile"]["model"].__setitem__("id", value)


REFUSED = [
    # serve.sh comments: the next line of a comment runs as a command.
    ("vllm", "toolchain.neuronx-cc", _set_toolchain("neuronx-cc", "2.21\ntouch {canary}\n#"), []),
    ("vllm", "target", _set_target("inf2\ntouch {canary}"), []),
    ("vllm", "toolchain.neuronx-distributed-inference", _set_toolchain("neuronx-distributed-inference", "0.6; x"), []),
    # TGI's .env: a new variable for the server's process.
    ("tgi", "profile.amp", _set_profile("amp", "bf16\nLD_PRELOAD={canary}"), []),
    # model-config.yaml's header comment: a new top-level key.
    ("torchserve", "profile.model.id", _set_model_id("org/model\nminWorkers: 64"), []),
    ("torchserve", "profile.model.id", _set_model_id("org/model\u2028minWorkers: 64"), []),
    ("torchserve", "profile.model.id", _set_model_id("org/model\x85minWorkers: 64"), []),
    # docker compose expands ${...} in the files it reads: the host's secrets into the served name.
    ("vllm", "profile.model.id", _set_model_id("org/${AWS_SECRET_ACCESS_KEY}"), ["--image", "img:1"]),
    ("sagemaker", "profile.model.id", _set_model_id("org/`touch {canary}`"), []),
    ("vllm", "profile.weights", _set_profile("weights", "presharded\n#"), []),
    ("vllm", "profile.tp_degree", _set_profile("tp_degree", 0), []),
]


@pytest.mark.parametrize(("stack", "field", "edit", "extra_args"), REFUSED, ids=[f"{c[0]}-{c[1]}" for c in REFUSED])
def test_a_value_that_cannot_be_its_field_is_refused(
    tmp_path: Path, stack: str, field: str, edit: Any, extra_args: list[str]
) -> None:
    bundle = _hostile_bundle(tmp_path, stack)
    canary = _canary(tmp_path)

    def hostile(manifest: dict[str, Any]) -> None:
        edit(manifest)
        # The {canary} placeholder of each value: where an injected command would leave its mark.
        raw = json.dumps(manifest).replace("{canary}", str(canary))
        manifest.clear()
        manifest.update(json.loads(raw))

    edit_manifest(bundle, hostile)
    out_dir = tmp_path / "deploy"
    proc = neuronc("deploy", bundle, "--for", stack, "--out", out_dir, *extra_args, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    stderr = proc.stderr.decode()
    assert field in stderr, stderr
    assert "Traceback" not in stderr
    assert not out_dir.exists(), sorted(p.name for p in out_dir.iterdir())
    assert not canary.exists()
    # The refused value is shown escaped: one line per problem on the terminal.
    assert all("minWorkers" not in line or "org/model" in line for line in stderr.splitlines()), stderr


# -- legal but awkward values: every generated file parses back to exactly the intended values ----

AWKWARD_MODEL = '/models/it\'s "the" model; touch PWNED # (v2)'
AWKWARD_BUNDLE = "/srv/bundles/a b'c\"; touch PWNED #\nd"


def _recorders(tmp_path: Path) -> Path:
    """Stand-ins for the commands scripts call: each appends its argv (JSON) to calls.jsonl (the archiver also
    makes the model directory, as it does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    for name in COMMANDS:
        script = bin_dir / name
        script.write_text(
            f"#!{shutil.which('python3') or '/usr/bin/python3'}\n"
            "import json, os, sys\n"
            f"with open({str(log)!r}, 'a') as f:\n"
            "    f.write(json.dumps(sys.argv) + '\\n')\n"
            "if '--export-path' in sys.argv:  # torch-model-archiver --archive-format no-archive: the model directory\n"
            "    at = sys.argv.index\n"
            "    os.makedirs(os.path.join(sys.argv[at('--export-path') + 1], sys.argv[at('--model-name') + 1]))\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _env_after_sourcing(env_file: Path) -> dict[str, str]:
    """The variables `sh` has after sourcing ``env_file`` (with `set -a`) in an empty environment."""
    script = f"set -a; . {shlex_quote(str(env_file))}; set +a; env -0"
    proc = subprocess.run(["env", "-i", "/bin/sh", "-c", script], capture_output=True, check=True)
    pairs = [item.split(b"=", 1) for item in proc.stdout.split(b"\0") if item]
    return {k.decode(): v.decode() for k, v in pairs}


def shlex_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def _baseline_env() -> set[str]:
    proc = subprocess.run(["env", "-i", "/bin/sh", "-c", "env -0"], capture_output=True, check=True)
    return {item.split(b"=", 1)[0].decode() for item in proc.stdout.split(b"\0") if item}


YAML_KEYS = {
    "model-config.yaml": {
        "minWorkers",
        "maxWorkers",
        "batchSize",
        "maxBatchDelay",
        "responseTimeout",
        "startupTimeout",
        "handler",
    },
    "docker-compose.yml": {"name", "services"},
}
ENV_FILES = {
    "vllm.env": {"NEURON_COMPILED_ARTIFACTS"},
    ".env": {
        "MODEL_ID",
        "HF_NUM_CORES",
        "HF_AUTO_CAST_TYPE",
        "MAX_BATCH_SIZE",
        "MAX_INPUT_TOKENS",
        "MAX_TOTAL_TOKENS",
        "MAX_BATCH_PREFILL_TOKENS",
    },
}


@pytest.mark.parametrize("stack", ["vllm", "tgi", "torchserve", "sagemaker", "vllm-optimum"])
def test_awkward_values_stay_one_value_in_every_generated_file(tmp_path: Path, stack: str) -> None:
    bundle = _hostile_bundle(tmp_path, stack, model={"id": AWKWARD_MODEL, "revision": None, "task": "text-generation"})
    out_dir = tmp_path / "deploy"
    args = ["--for", stack.removesuffix("-optimum"), "--out", out_dir, "--bundle-path", AWKWARD_BUNDLE]
    if stack == "vllm":
        # The compose file too; a made-up image no runtime here can read: the verdict is skipped.
        args += ["--image", "registry.example/vllm:1", "--allow-compile"]
    proc = neuronc("deploy", bundle, *args, cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    assert files
    baseline = _baseline_env()
    bin_dir = _recorders(tmp_path)
    calls = tmp_path / "calls.jsonl"
    for path in files:
        name = path.name
        if name.endswith(".sh"):
            subprocess.run(["/bin/sh", "-n", str(path)], check=True)
            env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
            run = subprocess.run(["/bin/sh", str(path)], capture_output=True, env=env, cwd=tmp_path, timeout=60)
            assert run.returncode == 0, (name, run.stderr.decode())
        elif name in ENV_FILES:
            variables = _env_after_sourcing(path)
            assert set(variables) - baseline == ENV_FILES[name], (name, variables)
            if name == "vllm.env":
                assert variables["NEURON_COMPILED_ARTIFACTS"] == f"{AWKWARD_BUNDLE}/artifacts"
            if name == ".env":  # docker reads it line by line, no quoting: every line a comment or NAME=value
                for line in path.read_text().splitlines():
                    assert line.startswith("#") or line.split("=", 1)[0] in ENV_FILES[name], (name, line)
        elif name.endswith((".yaml", ".yml")):
            data = yaml.safe_load(path.read_text())
            assert set(data) == YAML_KEYS[name], (name, sorted(data))
        elif name.endswith(".json"):
            json.loads(path.read_text())
    assert not (tmp_path / "PWNED").exists()
    assert not (out_dir / "PWNED").exists()
    recorded = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    served = [argv for argv in recorded if Path(argv[0]).name in ("vllm", "optimum-cli")]
    # The served model name is the local model directory's own name (quotes, `;` and `#` included), one argument.
    awkward_name = AWKWARD_MODEL.rsplit("/", 1)[-1]
    for argv in served:
        name_flag = "--served-model-name" if "--served-model-name" in argv else "--served_model_name"
        assert argv[argv.index(name_flag) + 1] == awkward_name, argv
        assert any(a.startswith(AWKWARD_BUNDLE + "/") for a in argv), argv
    if stack == "vllm":
        compose = yaml.safe_load((out_dir / "docker-compose.yml").read_text())
        command = compose["services"]["vllm-0"]["command"]
        assert command[command.index("--served-model-name") + 1] == awkward_name
    if stack == "sagemaker":
        uploads = [argv for argv in recorded if Path(argv[0]).name == "aws" and argv[1:3] == ["s3", "sync"]]
        assert uploads and uploads[0][3] == AWKWARD_BUNDLE, recorded
    if stack == "torchserve":
        assert os.readlink(next((out_dir / "model_store").iterdir()) / "model") == f"{AWKWARD_BUNDLE}/model"


# -- fields of the wrong type: refused by every reader, verify included ------------------------------

WRONG_TYPES = [
    ("tp_degree", "abc"),
    ("batch_size", True),
    ("options", "x"),
    ("sequence", {"max_length": 4096, "max_context_length": 2048, "context_buckets": 5, "token_buckets": [4096]}),
    ("model", {"id": ["a", "b"]}),
]


@pytest.mark.parametrize(("key", "value"), WRONG_TYPES, ids=[k for k, _ in WRONG_TYPES])
@pytest.mark.parametrize("command", ["verify", "inspect", "deploy"])
def test_a_field_of_the_wrong_type_is_refused(tmp_path: Path, key: str, value: Any, command: str) -> None:
    bundle = _hostile_bundle(tmp_path, "vllm")
    edit_manifest(bundle, _set_profile(key, value))
    extra = ["--for", "vllm", "--out", tmp_path / "deploy"] if command == "deploy" else []
    proc = neuronc(command, bundle, *extra, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    stderr = proc.stderr.decode()
    assert "Traceback" not in stderr
    assert f"profile.{key}" in stderr, stderr
    assert not (tmp_path / "deploy").exists()
