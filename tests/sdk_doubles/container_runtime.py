"""A stand-in for the docker / podman CLI (the subset neuronc uses), for tests on a machine without an engine.

Not a container runtime: ``run`` executes the command on this host, as the image's entrypoint would
inside it. What it models, from recorded facts (tests/fixtures/vllm_neuron/facts.json, ``dlc``):

- images are known by ``repository:tag`` and ``repository@sha256:...``; ``image inspect --format
  '{{json .RepoDigests}}'`` prints the digests, or fails with docker's "No such image" message;
  ``pull`` adds an image the test's registry has; ``rm -f NAME`` succeeds;
- ``run`` accepts ``--rm --name --network --workdir --user --userns --shm-size --entrypoint --volume
  HOST:CTR[:ro] --env K=V`` and refuses any other flag (exit 125, as docker does); it runs only
  digest-pinned images it has; ``--entrypoint X`` runs X with the arguments, as docker does;
  the DLC entrypoint runs its arguments as a command (``vllm_entrypoint.py``), so the command is
  run directly; container paths in arguments and ``--env`` values are mapped to their mounts'
  host paths (longest mount first), and ``python``/``python3`` is this interpreter; the environment is
  only the image's ``env`` (its ENV lines), then the ``--env`` values, plus the image's packages: ``PYTHONPATH`` holds the SDK doubles and
  distribution metadata at the versions the image ships, and ``NEURONC_FAKE_MOUNTS`` lists the
  mounts so that the ``vllm`` double can open the container paths a job file names (the one thing
  a process in a real container would see that this one cannot). A read-only mount is recorded, and
  the command's writes under it are refused afterwards (the tree must be unchanged).

State lives in the JSON file ``NEURONC_FAKE_RUNTIME_STATE``: ``images`` (local), ``registry``
(pullable), each ``{"digest": "sha256:...", "packages": {dist: version}, "env": {name: value}}`` (env
optional), and ``calls``, every
invocation's argv (the tests read it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SITE = Path(__file__).resolve().parent / "site"
STATE_ENV = "NEURONC_FAKE_RUNTIME_STATE"
KIND = os.environ.get("NEURONC_FAKE_RUNTIME_KIND", "docker")


def load() -> dict[str, Any]:
    return json.loads(Path(os.environ[STATE_ENV]).read_text(encoding="utf-8"))


def save(state: dict[str, Any]) -> None:
    Path(os.environ[STATE_ENV]).write_text(json.dumps(state, indent=1), encoding="utf-8")


def find(images: dict[str, Any], reference: str) -> tuple[str, dict[str, Any]] | None:
    for name, image in images.items():
        repository = name.rsplit(":", 1)[0]
        if reference in (name, f"{repository}@{image['digest']}"):
            return repository, image
    return None


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def inspect(state: dict[str, Any], args: list[str]) -> int:
    reference = args[-1]
    if args[:2] != ["--format", "{{json .RepoDigests}}"] or len(args) != 3 + (args[2:3] == ["--"]):
        print(f"unsupported inspect arguments {args}", file=sys.stderr)
        return 125
    found = find(state["images"], reference)
    if found is None:
        print(f"Error response from daemon: No such image: {reference}", file=sys.stderr)
        return 1
    repository, image = found
    print(json.dumps([f"{repository}@{image['digest']}"]))
    return 0


def pull(state: dict[str, Any], reference: str) -> int:
    for name, image in state.get("registry", {}).items():
        if reference in (name, f"{name.rsplit(':', 1)[0]}@{image['digest']}"):
            state["images"][name] = image
            save(state)
            print(f"{image['digest']}: Pulled")
            return 0
    print(f"Error response from daemon: manifest for {reference} not found: manifest unknown", file=sys.stderr)
    return 1


def run(state: dict[str, Any], args: list[str]) -> int:
    mounts: list[tuple[str, str, bool]] = []
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("--"):
        flag = args[i]
        if flag == "--":  # the end of the options, as docker's parser reads it
            i += 1
            break
        if flag == "--rm":
            i += 1
            continue
        known = ("--name", "--network", "--workdir", "--user", "--userns", "--shm-size", "--entrypoint", "--volume")
        if flag not in (*known, "--env"):
            print(f"unknown flag: {flag}", file=sys.stderr)
            return 125
        value = args[i + 1]
        if flag == "--entrypoint":
            entrypoint = [value]
        if flag == "--volume":
            host, container, *mode = value.split(":")
            mounts.append((host, container, mode == ["ro"]))
        elif flag == "--env":
            key, _, val = value.partition("=")
            env[key] = val
        i += 2
    image_ref, command = args[i], [*entrypoint, *args[i + 1 :]]
    if "@sha256:" not in image_ref:
        print(f"neuronc must run images by digest, got {image_ref}", file=sys.stderr)
        return 125
    found = find(state["images"], image_ref)
    if found is None:
        print(f"Unable to find image '{image_ref}' locally", file=sys.stderr)
        return 125
    _, image = found
    ordered = sorted(mounts, key=lambda m: len(m[1]), reverse=True)

    def host_path(text: str) -> str:
        for host, container, _ in ordered:
            if text == container or text.startswith(container + "/"):
                return host + text[len(container) :]
        return text

    with tempfile.TemporaryDirectory() as dists:
        for name, version in image["packages"].items():
            info = Path(dists) / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        inside = {str(k): str(v) for k, v in dict(image.get("env") or {}).items()}
        inside.update({key: host_path(value) for key, value in env.items()})
        inside["PATH"] = os.environ.get("PATH", "")
        inside["PYTHONPATH"] = os.pathsep.join([str(SITE), dists])
        inside["NEURONC_FAKE_MOUNTS"] = json.dumps([[container, host] for host, container, _ in ordered])
        if "NEURONC_SDK_DOUBLE_FAIL" in os.environ:  # the tests' switch for the doubles, not the image's
            inside["NEURONC_SDK_DOUBLE_FAIL"] = os.environ["NEURONC_SDK_DOUBLE_FAIL"]
        argv = [sys.executable if a in ("python", "python3") else host_path(a) for a in command]
        before = {host: tree_digest(Path(host)) for host, _, ro in mounts if ro}
        state.setdefault("calls", []).append({"run": args, "env": env, "mounts": mounts})
        save(state)
        code = subprocess.run(argv, env=inside, check=False).returncode
        for host, digest in before.items():
            if tree_digest(Path(host)) != digest:
                print(f"read-only mount {host} was written to", file=sys.stderr)
                return 126
    return code


def main(argv: list[str]) -> int:
    state = load()
    if argv[:1] != ["run"]:
        state.setdefault("calls", []).append({"command": argv})
        save(state)
    if argv[:2] == ["image", "inspect"]:
        return inspect(state, argv[2:])
    if argv[:1] == ["pull"]:
        return pull(state, argv[2] if argv[1:2] == ["--"] else argv[1])
    if argv[:2] == ["rm", "-f"]:
        return 0
    if argv[:1] == ["run"]:
        return run(state, argv[1:])
    print(f"{KIND}: unsupported command {argv}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
