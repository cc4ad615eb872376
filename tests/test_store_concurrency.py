"""Concurrency: 8 processes publish the same key at once; exactly one builds, all get the same bundle."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from plugins.fake_backend import TESTS_DIR, FakeBackend, make_spec, spec_key

from neuronc.bundle import verify_bundle
from neuronc.keys import toolchain_key
from neuronc.store import LocalStore

PROCESSES = 8
CHILD = """
import os, sys, time
from pathlib import Path
from plugins.fake_backend import build_bundle, make_spec, spec_key
from neuronc.keys import toolchain_key
from neuronc.store import LocalStore
from plugins.fake_backend import FakeBackend

store, builds, start_at = LocalStore(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
spec = make_spec()
key, tk = spec_key(spec).hash, toolchain_key(FakeBackend().toolchain_versions())

def build():
    with open(builds, "a") as log:
        log.write(f"{os.getpid()}\\n")
    return build_bundle(store=store, spec=spec, shard_bytes=64 * 1024, pause=0.001)

time.sleep(max(0.0, start_at - time.time()))
path, built = store.get_or_build(key, tk, build)
print(path, built)
"""


def test_eight_processes_build_once_and_share(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    builds = tmp_path / "builds.log"
    env = {**os.environ, "PYTHONPATH": TESTS_DIR}
    start_at = time.time() + 1.5  # let every interpreter start before the race
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(store.root), str(builds), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    # Meanwhile, gc runs against the store: it must never touch a live build.
    while any(c.poll() is None for c in children):
        store.gc()
        time.sleep(0.01)
    results = [c.communicate() for c in children]
    failed = [err for c, (_, err) in zip(children, results, strict=True) if c.returncode]
    assert [c.returncode for c in children] == [0] * PROCESSES, failed
    assert all(err == "" for _, err in results), [err for _, err in results]
    paths = {o.split()[0] for o, _ in results}
    flags = sorted(o.split()[1] for o, _ in results)
    assert len(paths) == 1
    assert flags == ["False"] * (PROCESSES - 1) + ["True"]
    assert len(builds.read_text().splitlines()) == 1, "exactly one build must run"
    [path] = paths
    assert verify_bundle(path).ok
    spec = make_spec()
    assert store.lookup(spec_key(spec).hash, toolchain_key(FakeBackend().toolchain_versions())) == Path(path)
