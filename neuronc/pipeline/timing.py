"""The stage clock: each pipeline stage's wall time and peak resident memory, with a progress line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from neuronc.pipeline.report import StageReport
from neuronc.progress import ProgressSink
from neuronc.resources import peak_rss_bytes, reset_peak_rss, worker_peak_since, worker_peaks_mark


class StageClock:
    """Times stages and measures each one's peak RSS (Linux resets the high-water mark per stage)."""

    def __init__(self, progress: ProgressSink, prefix: str) -> None:
        self.stages: list[StageReport] = []
        self._progress = progress
        self._prefix = prefix

    @contextlib.contextmanager
    def stage(self, name: str, description: str, *, quiet: bool = False, children: bool = False) -> Iterator[None]:
        """Time a stage; ``children`` also measures child processes (a fork inherits our RSS, so
        only stages whose children are fresh interpreters, like parallel graph compiles, ask)."""
        task = None if quiet else self._progress.task(f"{self._prefix}{description}")
        reset_peak_rss()
        mark = worker_peaks_mark()
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            seconds = time.perf_counter() - start
            self.stages.append(
                StageReport(
                    name=name,
                    seconds=seconds,
                    peak_rss_bytes=peak_rss_bytes(),
                    children_peak_rss_bytes=worker_peak_since(mark) if children else None,
                )
            )
            if task is not None:
                task.done(f"{seconds:.1f}s" if ok else "failed")
