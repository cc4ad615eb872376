"""The local executor: the builds of a matrix side by side, their worker processes in one pool bounded
by the CPUs given (``--jobs``) and by the host memory the pre-flight's estimates add up to."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from plugins import pipeline_backend

from neuronc.pipeline import compile_profiles
from neuronc.pipeline.local import LocalExecutor
from neuronc.resources import PoolCancelled, WorkPool

GIB = 1024**3


@pytest.fixture(autouse=True)
def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.WORKER_LOG_ENV, str(tmp_path / "workers.log"))
    yield
    pipeline_backend.unregister()


def intervals(tmp_path: Path) -> list[tuple[str, str, float, float]]:
    rows = [line.split() for line in (tmp_path / "workers.log").read_text().splitlines()]
    return [(profile, graph, float(start), float(end)) for profile, graph, start, end in rows]


def most_at_once(spans: list[tuple[str, str, float, float]]) -> int:
    events = sorted([(s, 1) for *_, s, _ in spans] + [(e, -1) for *_, e in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def matrix(tmp_path: Path, count: int, sleep: float) -> list[Path]:
    write_tiny_llama(tmp_path / "model")
    return [
        # Options count in the key: each build its own (sleep differs by a hundredth).
        write_profile(
            tmp_path / f"b{i}.yaml", backend="pooled", options={"sleep": sleep + i / 100}, context_buckets=[16]
        )
        for i in range(count)
    ]


def test_graphs_of_all_builds_share_one_pool(tmp_path: Path) -> None:
    # Three builds of two graphs each (one context bucket, one token bucket) and three slots: a build
    # alone would keep at most two workers busy; the matrix keeps three busy at once.
    profiles = matrix(tmp_path, 3, sleep=1.0)
    executor = LocalExecutor(memory_bytes=64 * GIB)
    reports = compile_profiles(profiles, store=tmp_path / "store", jobs=3, executor=executor)
    assert [r.status for r in reports] == ["built"] * 3
    spans = intervals(tmp_path)
    assert len(spans) == 6
    assert executor.pool is not None and executor.pool.peak_running == 3
    assert most_at_once(spans) == 3
    # Graphs of different builds ran at the same time.
    overlapping = {(a[0], b[0]) for a in spans for b in spans if a[0] != b[0] and a[2] < b[3] and b[2] < a[3]}
    assert overlapping


def test_the_pool_keeps_workers_within_the_pre_flights_memory(tmp_path: Path) -> None:
    # Each graph process needs 1 GiB (the backend's host-RAM model); 2.5 GiB allows two at a time,
    # whatever --jobs says. The pool's own peak may count a third slot: a build's weight split holds
    # one too, with the split's (tiny here) estimate reserved, and may overlap the other's workers.
    profiles = matrix(tmp_path, 2, sleep=0.5)
    budget = int(2.5 * GIB)
    executor = LocalExecutor(memory_bytes=budget)
    reports = compile_profiles(profiles, store=tmp_path / "store", jobs=4, executor=executor)
    assert [r.status for r in reports] == ["built"] * 2
    assert executor.pool is not None
    assert executor.pool.peak_reserved <= budget  # (that two fit at once: the pool tests below)
    assert most_at_once(intervals(tmp_path)) <= 2


def test_reports_keep_the_profiles_order_when_builds_end_out_of_order(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    slow = write_profile(tmp_path / "slow.yaml", backend="pooled", options={"sleep": 1.5}, context_buckets=[16])
    fast = write_profile(tmp_path / "fast.yaml", backend="pooled", options={"sleep": 0.1}, context_buckets=[16])
    ended: list[str] = []
    reports = compile_profiles(
        [slow, fast], store=tmp_path / "store", jobs=4, on_report=lambda r: ended.append(Path(r.profile).name)
    )
    assert ended == ["fast.yaml", "slow.yaml"]
    assert [Path(r.profile).name for r in reports] == ["slow.yaml", "fast.yaml"]


def test_an_interrupt_stops_every_build_of_the_matrix_and_leaves_no_staging(tmp_path: Path) -> None:
    # Two builds whose workers would run 20 s, and one that is interrupted (as Ctrl-C would) at once.
    profiles = matrix(tmp_path, 2, sleep=20)
    interrupted = write_profile(tmp_path / "ctrl-c.yaml", options={"interrupt": True, "sleep": 1})
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        compile_profiles([*profiles, interrupted], store=tmp_path / "store", jobs=4)
    assert time.monotonic() - started < 15  # the running workers were stopped, not waited for
    assert len((tmp_path / "workers.log.started").read_text().splitlines()) >= 2  # workers were running ...
    assert not (tmp_path / "workers.log").exists()  # ... and none ran to its end
    staging = tmp_path / "store" / ".staging"
    assert not staging.is_dir() or [p.name for p in staging.iterdir() if not p.name.endswith(".lock")] == []


# -- the pool itself ------------------------------------------------------------------------------


def test_a_pool_admits_at_most_its_slots_and_its_memory() -> None:
    pool = WorkPool(3, memory_bytes=10)
    held = threading.Semaphore(0)
    release = threading.Event()

    def worker(need: int) -> None:
        with pool.slot(need):
            held.release()
            release.wait(5)

    threads = [threading.Thread(target=worker, args=(4,)) for _ in range(3)]
    for t in threads:
        t.start()
    assert held.acquire(timeout=5) and held.acquire(timeout=5)
    assert not held.acquire(timeout=0.3)  # a third 4-byte reservation would exceed 10
    release.set()
    for t in threads:
        t.join(5)
    assert pool.peak_running == 2


def test_one_holder_takes_several_slots_at_once_within_the_memory() -> None:
    # One worker process that runs children holds a slot for each, with memory for each.
    pool = WorkPool(3, memory_bytes=10)
    assert pool.capacity(4, wanted=3) == 2  # three children of 4 would exceed 10
    assert pool.capacity(None, wanted=5) == 3  # no more than the slots
    assert pool.capacity(20, wanted=3) == 1  # at least one, as a single reservation may exceed the budget
    admitted = threading.Event()
    with pool.slot(4, count=2):
        assert pool.peak_running == 2 and pool.peak_reserved == 8

        def another() -> None:
            with pool.slot(4):
                admitted.set()

        waiter = threading.Thread(target=another)
        waiter.start()
        assert not admitted.wait(0.3)  # the third slot is free, its memory is not
    waiter.join(5)
    assert admitted.is_set()


def test_a_reservation_larger_than_the_budget_runs_alone_rather_than_never() -> None:
    pool = WorkPool(2, memory_bytes=1)
    with pool.slot(5):
        pass
    assert pool.peak_running == 1


def test_waiters_are_served_first_come_first_served() -> None:
    pool = WorkPool(1, memory_bytes=10)
    order: list[str] = []
    gate = threading.Event()

    def first() -> None:
        with pool.slot(10):
            gate.wait(5)

    def waiter(name: str, need: int) -> None:
        with pool.slot(need):
            order.append(name)

    holder = threading.Thread(target=first)
    holder.start()
    time.sleep(0.1)
    big = threading.Thread(target=waiter, args=("big", 10))
    big.start()
    time.sleep(0.1)
    small = threading.Thread(target=waiter, args=("small", 1))
    small.start()
    time.sleep(0.1)
    gate.set()
    for t in (holder, big, small):
        t.join(5)
    assert order == ["big", "small"]


def test_cancel_wakes_waiters_with_pool_cancelled() -> None:
    pool = WorkPool(1)
    raised: list[BaseException] = []
    gate = threading.Event()

    def holder() -> None:
        with pool.slot():
            gate.wait(5)

    def waiter() -> None:
        try:
            with pool.slot():
                pass
        except PoolCancelled as exc:
            raised.append(exc)

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    pool.cancel()
    gate.set()
    for t in threads:
        t.join(5)
    assert pool.cancelled and len(raised) == 1 and isinstance(raised[0], KeyboardInterrupt)


def test_ctrl_c_on_a_local_matrix_prints_one_document_and_exits_130(tmp_path: Path) -> None:
    """A real SIGINT to a `neuronc compile --json` process: the interrupted report is the one document."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from _farm import TESTS_DIR, plugin_site, wait_for

    profiles = matrix(tmp_path, 2, sleep=30)
    site = plugin_site(tmp_path / "site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), str(site)]),
        pipeline_backend.WORKER_LOG_ENV: str(tmp_path / "workers.log"),
    }
    store = tmp_path / "store"
    with (tmp_path / "out.json").open("wb") as stdout:
        driver = subprocess.Popen(
            [sys.executable, "-m", "neuronc", "compile", *map(str, profiles), "--store", str(store), "--json"],
            env=env,
            stdout=stdout,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
    try:
        started = tmp_path / "workers.log.started"
        wait_for(lambda: started.exists() and len(started.read_text().splitlines()) >= 2, 60, "workers to start")
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    data = json.loads((tmp_path / "out.json").read_text())  # one document, not two
    assert data["interrupted"] is True and data["exit_code"] == 130
    assert not (tmp_path / "workers.log").exists()  # the workers were stopped
    assert [p.name for p in (store / ".staging").iterdir() if not p.name.endswith(".lock")] == []


@pytest.mark.parametrize(("cores", "jobs"), [(1, 2), (2, 3), (4, 6), (64, 66)])
def test_compile_jobs_default_to_ninjas_choice(monkeypatch: pytest.MonkeyPatch, cores: int, jobs: int) -> None:
    # One or two more graphs than cores (ninja's -j default), so no core idles at the tail of a build.
    from neuronc import resources

    monkeypatch.setattr(resources, "available_cpus", lambda: cores)
    assert resources.default_compile_jobs() == jobs
