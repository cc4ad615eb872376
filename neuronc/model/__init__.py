"""Where a build's model comes from: local directories, the Hugging Face cache, the Hub at a commit.

``neuronc.model.files`` finds a model's files on this machine (and is the one config.json reader);
``neuronc.model.source`` pins hub revisions and fetches checkpoints.
"""

from neuronc.model.files import MODEL_FILES, find_model_config, local_model_dir, model_files, read_model_config
from neuronc.model.source import checkpoint_dir, resolve_checkpoint, resolve_revision, source_files

__all__ = [
    "MODEL_FILES",
    "checkpoint_dir",
    "find_model_config",
    "local_model_dir",
    "model_files",
    "read_model_config",
    "resolve_checkpoint",
    "resolve_revision",
    "source_files",
]
