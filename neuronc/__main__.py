"""The program: `neuronc` (the console script) and `python -m neuronc`."""

from __future__ import annotations

import gc


def main() -> None:
    """Import the command line with the cyclic GC paused, then run it with the GC back on.

    Importing Typer, rich and the command modules creates some hundred thousand long-lived objects
    and sets off collection after collection that frees nothing: about 3 % of a store-hit `compile`.
    ``gc.freeze`` then moves those objects out of the collector's sight for the rest of the run.
    Done here, not in ``neuronc.cli``, so that importing the library never changes a host process's GC.
    """
    gc.disable()
    try:
        from neuronc.cli import main as run
    finally:
        gc.freeze()
        gc.enable()
    run()


if __name__ == "__main__":
    main()
