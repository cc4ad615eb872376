"""Serving stacks for a bench: start one for a bundle, wait for it to answer, stop it leaving nothing behind.

- A CPU bundle: ``neuronc serve BUNDLE --host 127.0.0.1 --port P`` (the serving contract: serves until
  SIGTERM, ``GET /health`` answers 200 once loaded, ``GET /v1/models`` lists the served model).
- A Neuron bundle: the ``docker-compose.yml`` that ``neuronc deploy`` writes for it (replicas behind
  nginx on port P), through the container runtime (``<runtime> compose -f FILE -p NAME up -d``, then
  ``down``); docker or podman, or ``NEURONC_CONTAINER_RUNTIME``.

Each runs in its own process group, so a stop (or Ctrl-C) takes every process it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.benchmark.guidellm import stop_group

HEALTH_POLL_S = 0.5


class StackFailed(Exception):
    """The stack did not start or did not become healthy: the row's error."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


@dataclass
class Stack:
    """A started serving stack. ``url`` is where GuideLLM sends its requests."""

    url: str
    log: Path
    what: str
    process: subprocess.Popen[bytes] | None = None
    down: list[str] = field(default_factory=list)  # the command that stops a compose stack
    down_env: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def wait_healthy(self, timeout: float) -> float:
        """Seconds from start until ``GET /health`` answered 200; StackFailed past ``timeout`` or on an early exit."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.down == [] and self.process.poll() is not None:
                raise StackFailed(f"{self.what} exited {self.process.returncode} before it was healthy{self._tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2.0) as response:
                    if response.status == 200:
                        return time.monotonic() - self.started
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(HEALTH_POLL_S)
        raise StackFailed(f"{self.what} not healthy within {timeout:.0f} s{self._tail()}")

    def served_model(self) -> str:
        """The model id ``GET /v1/models`` lists first."""
        try:
            data = _get_json(self.url + "/v1/models")
            return str(data["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise StackFailed(f"{self.url}/v1/models listed no model ({exc})") from exc

    def stop(self) -> None:
        """Stop the stack and everything it started (idempotent)."""
        if self.down:
            with self.log.open("ab") as sink:
                subprocess.run(
                    self.down, stdout=sink, stderr=subprocess.STDOUT, env=self.down_env, timeout=120, check=False
                )
            self.down = []
        if self.process is not None:
            # SIGTERM is the serve contract's stop (exit 0); the group takes anything it forked.
            stop_group(self.process, grace=30.0, first=signal.SIGTERM)
            self.process = None

    def _tail(self) -> str:
        try:
            lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return f": {lines[-1].strip()[:200]}" if lines else ""


def start_cpu(bundle: Path, port: int, log: Path) -> Stack:
    """``neuronc serve`` of a CPU bundle on 127.0.0.1:``port`` (this interpreter, this neuronc)."""
    if port_in_use(port):
        raise StackFailed(f"port {port} is in use")
    argv = [sys.executable, "-m", "neuronc", "serve", str(bundle), "--host", "127.0.0.1", "--port", str(port)]
    sink = log.open("ab")
    try:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        sink.close()
    return Stack(f"http://127.0.0.1:{port}", log, "neuronc serve", process)


def start_compose(compose_file: Path, project: str, port: int, log: Path, runtime: str) -> Stack:
    """``<runtime> compose -f FILE -p PROJECT up -d``: the deploy files' replicas and nginx on ``port``."""
    if port_in_use(port):
        raise StackFailed(f"port {port} is in use")
    base = [runtime, "compose", "-f", str(compose_file), "-p", project]
    env = dict(os.environ)
    with log.open("ab") as sink:
        done = subprocess.run(
            [*base, "up", "-d"], stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=600, check=False
        )
    what = f"{Path(runtime).name} compose"
    stack = Stack(f"http://127.0.0.1:{port}", log, what, down=[*base, "down"], down_env=env)
    if done.returncode != 0:
        with contextlib.suppress(Exception):
            stack.stop()
        raise StackFailed(f"{Path(runtime).name} compose up exited {done.returncode}{stack._tail()}")
    return stack


__all__ = ["Stack", "StackFailed", "free_port", "port_in_use", "start_compose", "start_cpu"]
