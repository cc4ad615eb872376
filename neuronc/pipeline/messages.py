"""Messages for people from inside the pipeline (why a lookup missed, waiting for another build's
lock, a pre-flight warning) without a callback threaded through every function.

The sink is context-scoped, as pypa/build's ``_ctx`` logger is: ``compile_profiles(log=...)`` sets
it for the run and anything below calls ``say``. A ``ContextVar`` keeps concurrent runs (threads,
tasks) apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Log = Callable[[str], None]

_SINK: ContextVar[Log | None] = ContextVar("neuronc_pipeline_log", default=None)


def say(message: str) -> None:
    """Pass a message to the run's sink (nothing happens when no sink is set)."""
    sink = _SINK.get()
    if sink is not None:
        sink(message)


@contextlib.contextmanager
def logging_to(sink: Log | None) -> Iterator[None]:
    """Send ``say`` messages to ``sink`` inside the block."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


__all__ = ["Log", "logging_to", "say"]
