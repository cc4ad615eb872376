"""The Ray task's wait for its build thread (``farm.task.follow_build``), without Ray: a cancel arrives
as a KeyboardInterrupt in the main thread, as ``ray.cancel`` delivers it (``_thread.interrupt_main``)."""

from __future__ import annotations

import _thread
import threading
import time

import pytest

from neuronc.pipeline.farm.task import follow_build
from neuronc.resources import WorkPool


class _Finished(threading.Event):
    """The build's "finished" event, which also says when the task's main thread first waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


def test_a_cancelled_task_returns_only_after_its_build_cleaned_up_even_when_cancelled_twice() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a cancel is a KeyboardInterrupt in the main thread")
    pool = WorkPool(1)
    finished = _Finished()
    steps: list[str] = []

    def build() -> None:
        try:
            finished.waited.wait()
            _thread.interrupt_main()  # the cancel, while the task waits for the build
            while not pool.cancelled:
                time.sleep(0.01)
            steps.append("saw the cancel")
            _thread.interrupt_main()  # a second cancel while the build removes its staging directory
            time.sleep(0.5)
            steps.append("cleaned up")
        finally:
            finished.set()

    threading.Thread(target=build, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        follow_build(finished, pool)
    # Thread.join here (CPython < 3.13) would have returned at the first cancel, before the cleanup.
    assert steps == ["saw the cancel", "cleaned up"]
