"""Chat prompts: the bundle tokenizer's own chat template, applied by transformers.

``/v1/chat/completions`` exists only where the bundle's ``model/`` carries a chat template
(``chat_template`` in tokenizer_config.json, or a ``chat_template.jinja`` / ``chat_template.json`` file
beside it, the places transformers reads). The template is applied by
``PreTrainedTokenizerBase.apply_chat_template`` (``add_generation_prompt=True``, tokenized as the
template's text says: no special tokens added again), so the prompt is the one the model was trained
on; transformers is imported only for such bundles, when the server starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuronc.errors import BundleFormatError

_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def has_chat_template(model_dir: Path) -> bool:
    """Whether the bundle's tokenizer files hold a chat template."""
    if any((model_dir / name).is_file() for name in _TEMPLATE_FILES):
        return True
    from neuronc.jsonfile import read_json_object

    try:
        config = read_json_object(model_dir / "tokenizer_config.json", what="tokenizer_config.json")
    except FileNotFoundError:
        return False
    return bool(config.get("chat_template"))


class ChatTemplate:
    """``encode(messages)``: the prompt token ids of a conversation, ready for the assistant's turn."""

    def __init__(self, model_dir: Path) -> None:
        import transformers

        auto: Any = transformers.AutoTokenizer
        try:
            self._tokenizer = auto.from_pretrained(str(model_dir), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise BundleFormatError(f"{model_dir}: cannot load the tokenizer for its chat template: {exc}") from None

    def encode(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = self._tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]
