"""Where neuronc keeps things: its user cache directory.

A model's own files (local directories, config.json) are found by ``neuronc.model``.

Kept free of heavy imports: the light commands (validate, cache-lookup, inspect) use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """neuronc's cache: ``$NEURONC_CACHE_DIR``, else ``$XDG_CACHE_HOME/neuronc``, else ``~/.cache/neuronc``.

    Holds the bundle store (``bundles/``), the graph cache (``graphs/``), remote-store downloads
    (``remote/``), the Hugging Face Neuron cache registry (``hf-neuron-cache/``) and the logs of
    failed builds (``failed-builds/``). A relative ``XDG_CACHE_HOME`` is ignored, as the XDG spec says.
    """
    env = os.environ if environ is None else environ
    if env.get("NEURONC_CACHE_DIR"):
        return Path(env["NEURONC_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "neuronc"
    return Path.home() / ".cache" / "neuronc"
