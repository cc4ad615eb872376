"""Chat prompts: the bundle tokenizer's own chat template, applied by transformers.

``/v1/chat/completions`` exists only where the bundle's ``model/`` carries a chat template
(``chat_template`` in tokenizer_config.json, or a ``chat_template.jinja`` / ``chat_template.json`` file
beside it, the places transformers reads). The template is applied by
``PreTrainedTokenizerBase.apply_chat_template`` (``add_generation_prompt=True``, tokenized as the
template's text says: no special tokens added again), so the prompt is the one the model was trained
on; transformers is imported only for such bundles, in the background once the server starts.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuronc.errors import MISSING_LIBRARY, BundleFormatError, NeuroncError

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
    """``encode(messages)``: the prompt token ids of a conversation, ready for the assistant's turn.

    transformers is imported and the tokenizer loaded in a thread of its own, started here: that
    takes seconds (longer than loading the graphs), and completions need none of it, so the server
    answers /health and completions meanwhile; a chat request that comes first waits for it.
    """

    def __init__(self, model_dir: Path) -> None:
        self._model_dir = model_dir
        self._tokenizer: Any = None
        self._error: NeuroncError | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._load, name="neuronc-serve-chat-template", daemon=True).start()

    def _load(self) -> None:
        try:
            import transformers

            auto: Any = transformers.AutoTokenizer
            self._tokenizer = auto.from_pretrained(str(self._model_dir), local_files_only=True)
        except ImportError as exc:
            self._error = MISSING_LIBRARY.convert(exc, "the bundle's chat template needs transformers")
        except (OSError, ValueError) as exc:
            msg = f"{self._model_dir}: cannot load the tokenizer for its chat template: {exc}"
            self._error = BundleFormatError(msg)
        finally:
            self._ready.set()

    def encode(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Blocks until the tokenizer is loaded (call it off the event loop)."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        ids = self._tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]
