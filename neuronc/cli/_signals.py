"""SIGTERM handled like Ctrl-C by every command (``docker stop``, CI cancellation and ``timeout`` send it).

Python turns SIGINT into KeyboardInterrupt; SIGTERM's default is to end the process at once, so a
split's staging directory or a compile's half-built bundle would stay behind. Under
``interrupts_recorded`` SIGTERM raises KeyboardInterrupt too: the same cleanup runs and the exit is
130, with the one JSON document ``--json`` promises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

# Set when SIGINT or SIGTERM arrives while a command runs. A library may turn the KeyboardInterrupt
# into an exception of its own (pydantic-core, building a schema, re-raises it as a SchemaError); the
# command's error handler then still knows the run was interrupted.
_SIGNALLED: list[int] = []


def _raise_interrupt(signum: int, frame: object) -> None:
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether SIGINT or SIGTERM arrived while a command ran under ``interrupts_recorded``."""
    return bool(_SIGNALLED)


@contextlib.contextmanager
def interrupts_recorded() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs, as SIGINT does, and
    both are recorded (``interrupted``). Elsewhere, or where SIGINT is ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _SIGNALLED.clear()
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    default_int = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if default_int:
        signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if default_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)


__all__ = ["interrupted", "interrupts_recorded"]
