"""SIGTERM handled like Ctrl-C by every command (``docker stop``, CI cancellation and ``timeout`` send it).

Python turns SIGINT into KeyboardInterrupt; SIGTERM's default is to end the process at once, so a
split's staging directory or a compile's half-built bundle would stay behind. Under
``interrupts_recorded`` SIGTERM raises KeyboardInterrupt too: the same cleanup runs and the exit is
130, with the one JSON document ``--json`` promises.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

# Set when SIGINT or SIGTERM arrives while a command runs. A library may turn the KeyboardInterrupt
# into an exception of its own (pydantic-core, building a schema, re-raises it as a SchemaError); the
# command's error handler then still knows the run was interrupted.
_SIGNALLED: list[int] = []


# Whether a block under ``interrupts_recorded`` is running (a re-delivered signal is dropped after it).
_ACTIVE: list[bool] = []
# How long after a lost interrupt it is delivered again: the unraisable hook has returned by then.
_REDELIVERY_SECONDS = 0.01


def _raise_interrupt(signum: int, frame: object) -> None:
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt


def _redeliver(signum: int) -> None:
    if _ACTIVE:
        os.kill(os.getpid(), signum)


def _lost_interrupt_hook(
    previous: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], object]:
    """An unraisable hook that delivers again the interrupts C or Rust code swallowed.

    The KeyboardInterrupt our handler raises can land where Python cannot propagate it: a ``__del__``,
    or pydantic-core calling back into Python while it builds a schema. Python then prints it as
    "Exception ignored in: ..." with a traceback and the run goes on as if no signal had come.
    Instead the signal is sent again a moment later, from a timer thread (sending it from the hook
    itself would run the handler inside the hook, where it would be lost the same way), so it lands
    at the next point of the main thread that can raise. Any other unraisable exception goes to the
    hook that was there before.
    """

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _SIGNALLED:
            timer = threading.Timer(_REDELIVERY_SECONDS, _redeliver, (_SIGNALLED[-1],))
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)

    return hook


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
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _lost_interrupt_hook(previous_hook)
    _ACTIVE.append(True)
    try:
        yield
    finally:
        _ACTIVE.clear()
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous_term)
        if default_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)


__all__ = ["interrupted", "interrupts_recorded"]
