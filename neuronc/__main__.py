"""The program: `neuronc` (the console script) and `python -m neuronc`."""

from __future__ import annotations

import gc
import signal
import sys


def main() -> None:
    """Import the command line with the cyclic GC paused and Ctrl-C held back, then run it.

    Importing Click, rich and the command modules creates some hundred thousand long-lived objects
    and sets off collection after collection that frees nothing: about 3 % of a store-hit `compile`.
    ``gc.freeze`` then moves those objects out of the collector's sight for the rest of the run.
    Done here, not in ``neuronc.cli``, so that importing the library never changes a host process's GC.

    A Ctrl-C during those imports (the first tenth of a second or so) would surface as a
    KeyboardInterrupt traceback from whatever module was loading, with no ``--json`` document. It
    is held until the imports are done and then ends the run as a Ctrl-C anywhere else does, through
    the one handler (``neuronc.cli.command_failed``): exit 130, ``interrupted``, and the error
    document with ``--json``. Once the run has ended, a Ctrl-C during the interpreter's shutdown is
    ignored: the exit code stays the one the run reported.
    """
    held: list[int] = []
    hold = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # leave an ignored SIGINT ignored
    if hold:
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    gc.disable()
    try:
        from neuronc.cli import command_failed
        from neuronc.cli import main as run
    finally:
        gc.freeze()
        gc.enable()
        if hold:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        sys.exit(command_failed(KeyboardInterrupt(), args=sys.argv[1:]))  # as a Ctrl-C during parsing
    try:
        run()
    finally:
        # The run has said how it ended (its output and exit code); a Ctrl-C while the interpreter
        # shuts down must not turn that into a death by signal with nothing said.
        if hold:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    main()
