"""A stand-in for ``docker compose`` (the subset ``neuronc bench`` uses), for tests on a machine without an engine.

``<runtime> compose -f FILE -p PROJECT up -d`` reads the compose file ``neuronc deploy`` wrote, finds the
port nginx publishes (``ports: ["P:80"]``) and, in place of the replicas' DLC containers behind nginx,
starts GuideLLM's own mock server on 127.0.0.1:P (``guidellm mock-server``), detached in its own
process group, with the time to first token, inter-token latency, output length and slot count
(``--max-concurrent-requests``) the test gave for that bundle. ``down`` stops that process group.
Any other command goes to the docker stand-in (``container_runtime.py``).

State is the JSON file ``NEURONC_FAKE_COMPOSE_STATE``: ``guidellm`` (the GuideLLM program),
``servers`` (a bundle's key, the 12 hex digits its compose project name ends with -> ``ttft_ms``,
``itl_ms``, ``output_tokens``, ``slots``; or ``never_healthy``: a process that never answers), and ``running`` (project -> pid), ``started`` (every pid) and ``calls`` (every
compose command), which this script writes.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

STATE_ENV = "NEURONC_FAKE_COMPOSE_STATE"


def _state() -> dict[str, Any]:
    state: dict[str, Any] = json.loads(Path(os.environ[STATE_ENV]).read_text(encoding="utf-8"))
    return state


def _save(state: dict[str, Any]) -> None:
    Path(os.environ[STATE_ENV]).write_text(json.dumps(state, indent=1), encoding="utf-8")


def _published_port(compose: dict[str, Any]) -> int:
    for service in compose.get("services", {}).values():
        for mapping in service.get("ports", []) or []:
            host, _, container = str(mapping).rpartition(":")
            if container == "80":
                return int(host.rsplit(":", 1)[-1])
    raise SystemExit("compose file publishes no port")


def up(state: dict[str, Any], compose_file: Path, project: str) -> int:
    compose = yaml.safe_load(compose_file.read_text(encoding="utf-8"))
    replicas = [name for name, body in compose["services"].items() if body.get("devices")]
    if not replicas:
        print("no replica service with Neuron devices", file=sys.stderr)
        return 1
    server = next((v for k, v in state["servers"].items() if project.endswith(k)), None)
    if server is None:
        print(f"no mock server configured for project {project}", file=sys.stderr)
        return 1
    if server.get("never_healthy"):  # a container that starts and never answers
        argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
    else:
        argv = [
        state["guidellm"], "mock-server", "--host", "127.0.0.1", "--port", str(_published_port(compose)),
        "--model", project, "--ttft-ms", str(server["ttft_ms"]), "--itl-ms", str(server["itl_ms"]),
        "--output-tokens", str(server["output_tokens"]), "--max-concurrent-requests", str(server["slots"]),
        ]  # fmt: skip
    log = compose_file.parent / f"mock-{project}.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    state.setdefault("running", {})[project] = process.pid
    state.setdefault("started", []).append(process.pid)
    _save(state)
    return 0


def down(state: dict[str, Any], project: str) -> int:
    pid = state.get("running", {}).pop(project, None)
    _save(state)
    if pid is None:
        return 0
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return 0
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.1)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] != ["compose"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        code: int = importlib.import_module("container_runtime").main(argv)
        return code
    args = argv[1:]
    compose_file, project = None, None
    while args and args[0] in ("-f", "-p"):
        if args[0] == "-f":
            compose_file = Path(args[1])
        else:
            project = args[1]
        args = args[2:]
    state = _state()
    state.setdefault("calls", []).append(argv)
    _save(state)
    if compose_file is None or project is None:
        print(f"compose: -f and -p are required, got {argv}", file=sys.stderr)
        return 125
    if args == ["up", "-d"]:
        return up(state, compose_file, project)
    if args == ["down"]:
        return down(state, project)
    print(f"compose: unsupported {args}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
