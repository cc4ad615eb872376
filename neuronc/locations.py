"""Where things live: neuronc's user cache directory, local model directories, model config files.

Kept free of heavy imports: the light commands (validate, cache-lookup, inspect) use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# Files a bundle carries from its checkpoint into model/: configs and tokenizers; never weights,
# never code. Serving stacks tokenize from them without the original checkpoint.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
)


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


def local_model_dir(model_id: str, base_dir: Path | None = None) -> Path | None:
    """``model.id`` as a local directory if it is one: relative to ``base_dir`` (the profile's
    directory) first, then to the working directory."""
    candidates = [Path(model_id).expanduser()]
    if base_dir is not None and not Path(model_id).is_absolute():
        candidates.insert(0, base_dir / model_id)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return None
