"""`neuronc serve` as a real process for the tests: start it on a free port, talk HTTP to it, stop it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_ADDRESS = re.compile(r"on http://127\.0\.0\.1:(\d+)")


class Server:
    """A running `neuronc serve` (stderr in a file: the address line, then one line per request)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body) of one request; ``body`` is JSON-encoded unless it is bytes."""
        conn = self.connection()
        try:
            data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
            headers = {k.lower(): v for k, v in response.getheaders()}
            is_json = headers.get("content-type", "").startswith("application/json")
            return response.status, headers, json.loads(raw) if raw and is_json else raw.decode()
        finally:
            conn.close()

    def complete(self, **body: Any) -> dict[str, Any]:
        status, _, data = self.request("POST", "/v1/completions", body)
        assert status == 200, data
        assert isinstance(data, dict)
        return data

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any] | str]:
        """The server-sent events of a streamed request: each ``data:`` payload, parsed ("[DONE]" as is)."""
        conn = self.connection()
        try:
            conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode())
            response = conn.getresponse()
            assert response.status == 200, response.read()
            for line in response:
                text = line.decode().strip()
                if text.startswith("data:"):
                    payload = text[5:].strip()
                    yield payload if payload == "[DONE]" else json.loads(payload)
        finally:
            conn.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def access_lines(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if '"' in line and "HTTP" not in line]


def serve_command(bundle: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "neuronc", "serve", str(bundle), "--port", "0", *args]


def start_server(
    bundle: Path, log: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> Server:
    """Start `neuronc serve BUNDLE --port 0 ARGS` and wait for its address line."""
    environ = {**(env or os.environ), "PYTHONPATH": str(REPO)}
    with log.open("wb") as sink:
        proc = subprocess.Popen(serve_command(bundle, *args), stderr=sink, stdout=subprocess.DEVNULL, env=environ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _ADDRESS.search(log.read_text(errors="replace"))
        if found:
            return Server(proc, int(found.group(1)), log)
        if proc.poll() is not None:
            raise AssertionError(f"neuronc serve exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"neuronc serve did not start in {timeout} s:\n{log.read_text()}")
