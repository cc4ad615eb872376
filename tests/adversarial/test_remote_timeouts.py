"""A dead or unreachable S3 endpoint: every remote operation ends in exit 5 within its time limits, never a hang.

The dead endpoint is a black hole on 127.0.0.1 (accepts TCP, never answers): the case that took
about 7 minutes per command before time limits existed. One CLI run uses the default limits and is
timed; the class (every operation of the store) runs with short limits set by environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _netproxy import BlackHole
from _seaweedfs import point_boto_at
from plugins.fake_backend import build_bundle

from neuronc.errors import RemoteStoreError
from neuronc.store import RemoteSettings, RemoteStore

DEFAULT_LIMIT_SECONDS = 40.0  # "well under a minute"; the defaults give about 20 s


@pytest.fixture
def black_hole(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlackHole]:
    hole = BlackHole()
    point_boto_at(hole.endpoint, monkeypatch)
    try:
        yield hole
    finally:
        hole.stop()


def _cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "neuronc", *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )
    return result, time.monotonic() - start


def test_store_list_against_a_dead_endpoint_fails_in_well_under_a_minute_by_default(
    black_hole: BlackHole, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("CONNECT_TIMEOUT", "READ_TIMEOUT", "RETRIES", "DEADLINE", "MIN_RATE"):
        monkeypatch.delenv(f"NEURONC_REMOTE_{var}", raising=False)
    result, seconds = _cli("store", "list", "--store", "s3://bucket/bundles")
    print(f"dead endpoint, default limits: store list exited {result.returncode} after {seconds:.1f} s")
    assert result.returncode == 5, result.stderr
    assert seconds < DEFAULT_LIMIT_SECONDS
    assert "timed out" in result.stderr and "NEURONC_REMOTE_DEADLINE" in result.stderr
    assert "Traceback" not in result.stderr
    assert black_hole.connections >= 1


SHORT = RemoteSettings(connect_timeout=0.5, read_timeout=0.5, retries=1, deadline=1.5, min_rate=1 << 30)


def _operations(store: RemoteStore, bundle: Path) -> dict[str, Callable[[], Any]]:
    config, tool = "ab" * 32, "cd" * 32
    return {
        "lookup": lambda: store.lookup(config, tool),
        "probe": lambda: store.probe(config, tool),
        "list": store.list,
        "find": lambda: store.find("abab"),
        "remove": lambda: store.remove("abab"),
        "gc": store.gc,
        "verify": lambda: store.verify("abab"),
        "ensure_writable": store.ensure_writable,
        "publish": lambda: store.publish(bundle),
        "locate": lambda: store.locate(config, tool),
    }


@pytest.mark.parametrize(
    "operation",
    ["lookup", "probe", "list", "find", "remove", "gc", "verify", "ensure_writable", "publish", "locate"],
)
def test_every_remote_operation_is_bounded(black_hole: BlackHole, tmp_path: Path, operation: str, built: Path) -> None:
    store = RemoteStore("s3://bucket/bundles", cache_dir=tmp_path / "cache", settings=SHORT)
    start = time.monotonic()
    with pytest.raises(RemoteStoreError, match=r"timed out|failed") as caught:
        _operations(store, built)[operation]()
    seconds = time.monotonic() - start
    assert caught.value.exit_code == 5
    assert seconds < 3 * SHORT.deadline + 2, f"{operation} took {seconds:.1f} s"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("bundle") / "b")


def test_a_refused_connection_is_exit_5_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    point_boto_at(f"http://127.0.0.1:{port}", monkeypatch)
    monkeypatch.setenv("NEURONC_REMOTE_DEADLINE", "5")
    result, seconds = _cli("store", "list", "--store", "s3://bucket/x", "--json")
    assert result.returncode == 5, result.stderr
    assert seconds < 15
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("var", "value"), [("NEURONC_REMOTE_DEADLINE", "soon"), ("NEURONC_REMOTE_RETRIES", "-1")])
def test_bad_time_limit_settings_are_exit_2_naming_the_variable(
    var: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(var, value)
    result, _ = _cli("store", "list", "--store", "s3://bucket/x")
    assert result.returncode == 2
    assert var in result.stderr
