"""Crash safety: a process writing a bundle is SIGKILLed at random instants.

After each kill the store holds no incomplete bundle (every directory at bundle depth verifies);
``gc`` then removes the leftovers, and a rerun publishes a bundle that verifies.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

from plugins.fake_backend import build_bundle

from neuronc.bundle import read_manifest, verify_bundle
from neuronc.store import LocalStore

KILLS = 40


def _fork_build(store: LocalStore) -> int:
    pid = os.fork()
    if pid == 0:  # child: build and publish, then leave without running pytest's teardown
        code = 1
        try:
            build_bundle(store=store, shard_bytes=16 * 1024, pause=0.0015)
            code = 0
        finally:
            os._exit(code)
    return pid


def _assert_only_complete_bundles(store: LocalStore) -> int:
    count = 0
    for path in store._bundle_dirs():
        manifest = read_manifest(path)  # raises if a directory at bundle depth is not a bundle
        report = verify_bundle(path, manifest=manifest, jobs=1)
        assert report.ok, (path, report.problems())
        count += 1
    return count


def test_sigkill_at_any_instant_leaves_no_or_a_complete_bundle(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    seed = int(os.environ.get("NEURONC_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    # How long an uninterrupted build takes: the median of three after a warm-up build (a first
    # build in a fresh process pays one-off costs, and a kill after the publish tests nothing).
    durations = []
    for _ in range(4):
        start = time.perf_counter()
        pid = _fork_build(store)
        assert os.waitpid(pid, 0)[1] == 0
        durations.append(time.perf_counter() - start)
        store.remove(read_manifest(store.list()[0].path).config_hash)
    duration = sorted(durations[1:])[1]
    # Kill until KILLS // 2 builds were interrupted mid-write (at most 3 * KILLS kills): on a loaded
    # machine the calibrated duration is only a guess, and a kill after the publish tests nothing.
    interrupted = kills = 0
    while interrupted < KILLS // 2 and kills < 3 * KILLS:
        pid = _fork_build(store)
        time.sleep(rng.uniform(0, duration * 1.05))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        kills += 1
        interrupted += not os.WIFEXITED(status)
        assert _assert_only_complete_bundles(store) <= 1, f"seed {seed}"
    report = store.gc()
    assert not [p for p in store.staging_dir.iterdir()], f"gc left staging entries (seed {seed})"
    assert all(r.reason != "incomplete (no manifest)" for r in report.removed), "an incomplete bundle was visible"
    pid = _fork_build(store)
    assert os.waitpid(pid, 0)[1] == 0
    [entry] = store.list()
    assert verify_bundle(entry.path).ok
    assert store.lookup(entry.manifest.config_hash, entry.manifest.toolchain_key) == entry.path
    # Enough kills must land mid-write for the test to mean anything.
    assert interrupted >= KILLS // 2, f"only {interrupted} of {kills} kills interrupted a build (seed {seed})"
