"""A model's files on this machine: local checkpoint directories, the files a bundle carries, config.json.

``read_model_config`` is the one config.json reader: every layer that needs a model's config (profile
checks, the memory pre-flight, backends, the splitter) reads it here, with the bounded JSON parser.
Kept free of heavy imports: the light commands (validate, plan, cache-lookup) use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuronc.errors import CheckpointError
from neuronc.jsonfile import InvalidJsonError, read_json_object

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
MODEL_FILE_PATTERNS = ("tokenizer*", "*.tiktoken")
CONFIG_NAME = "config.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024


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


def model_files(model_dir: Path) -> list[Path]:
    """The config, generation config and tokenizer files a bundle carries from its checkpoint."""
    found: dict[str, Path] = {}
    for name in MODEL_FILES:
        if (model_dir / name).is_file():
            found[name] = model_dir / name
    for pattern in MODEL_FILE_PATTERNS:
        for path in model_dir.glob(pattern):
            if path.is_file():
                found.setdefault(path.name, path)
    return [found[name] for name in sorted(found)]


def read_model_config(model_dir: Path, *, required: bool = True) -> dict[str, Any] | None:
    """A checkpoint directory's config.json as a dict.

    Raises CheckpointError (exit 2) naming the file when it is missing (``required``), not a
    regular file, too large, too deep or not a JSON object; with ``required=False`` a missing
    file is None.
    """
    path = Path(model_dir) / CONFIG_NAME
    try:
        return read_json_object(path, max_bytes=MAX_CONFIG_BYTES, what="config.json")
    except FileNotFoundError:
        if not required:
            return None
        msg = f"{model_dir}: no config.json; not a Hugging Face checkpoint directory"
        raise CheckpointError(msg, hint="pass the directory that holds config.json and the weights") from None
    except PermissionError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a file") from None
    except InvalidJsonError as exc:
        raise CheckpointError(exc.message, details=exc.details, hint=exc.hint) from None
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None


def find_model_config(model_id: str, revision: str | None, base_dir: Path | None) -> dict[str, Any] | None:
    """The model's config.json from a local directory or the local Hugging Face cache; no network.

    None when it is not on this machine or cannot be read (validate and plan then skip the checks
    that need it; compile reads it with ``read_model_config`` and reports what is wrong).
    """
    directory = local_model_dir(model_id, base_dir)
    if directory is None:
        directory = _hf_cache_dir(model_id, revision)
    if directory is None:
        return None
    try:
        return read_model_config(directory, required=False)
    except CheckpointError:
        return None


def _hf_cache_dir(model_id: str, revision: str | None) -> Path | None:
    from neuronc.model.hfcache import cached_snapshot

    if "/" not in model_id or model_id.startswith((".", "/")):
        return None
    return cached_snapshot(model_id, revision)


__all__ = [
    "CONFIG_NAME",
    "MODEL_FILES",
    "find_model_config",
    "local_model_dir",
    "model_files",
    "read_model_config",
]
