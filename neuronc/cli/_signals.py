"""SIGTERM handled like Ctrl-C by every command (``docker stop``, CI cancellation and ``timeout`` send it).

Python turns SIGINT into KeyboardInterrupt; SIGTERM's default is to end the process at once, so a
split's staging directory or a compile's half-built bundle would stay behind. Under
``sigterm_as_interrupt`` SIGTERM raises KeyboardInterrupt too: the same cleanup runs and the exit is
130, with the one JSON document ``--json`` promises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["sigterm_as_interrupt"]
