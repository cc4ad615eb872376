"""The text side of a bundle: encode a prompt, decode generated ids (``InductorRunner.encode/decode``).

A bundle whose ``model/`` has a ``tokenizer.json`` that Hugging Face's fast tokenizer would apply
unchanged is loaded with the ``tokenizers`` library itself: importing ``transformers`` to read the
same file costs a `neuronc run` about two seconds. Anything else (no tokenizer.json, a
sentencepiece-only tokenizer, a tokenizer class or setting that rewrites the file's processing on
load) goes through ``transformers.AutoTokenizer`` as before.

What ``PreTrainedTokenizerFast`` does with a tokenizer.json on load and on decode, and so what the
direct path must match (transformers 4.57 ``tokenization_utils_fast.py`` and
``models/llama/tokenization_llama_fast.py``):

- ``__call__(text)`` is ``Tokenizer.encode(text, add_special_tokens=True)``; the post-processor
  stored in tokenizer.json adds BOS/EOS;
- ``decode(ids, skip_special_tokens=True)`` is ``Tokenizer.decode`` with the same flag, then
  ``clean_up_tokenization`` when ``clean_up_tokenization_spaces`` is set in tokenizer_config.json;
- subclasses such as ``LlamaTokenizerFast`` rebuild the post-processor from ``add_bos_token`` /
  ``add_eos_token`` (defaults included), and ``add_prefix_space`` / ``from_slow`` rewrite the
  pre-tokenizer or rebuild the file: those go through transformers.

tests/test_inductor.py checks the direct path against ``AutoTokenizer`` on the demo model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from neuronc.errors import BundleFormatError, InvalidInputError

# tokenizer_config.json classes that apply tokenizer.json as it is (Qwen2's fast class only adds
# default special tokens that its tokenizer.json already holds).
_DIRECT_CLASSES = frozenset({"PreTrainedTokenizerFast", "Qwen2TokenizerFast"})
# tokenizer_config.json settings that make transformers change what tokenizer.json says.
_REWRITING_SETTINGS = ("add_bos_token", "add_eos_token", "add_prefix_space", "from_slow")


class TextTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class _Direct:
    """tokenizer.json through the ``tokenizers`` library."""

    def __init__(self, tokenizer: Any, clean_up_spaces: bool) -> None:
        self._tokenizer = tokenizer
        self._clean_up_spaces = clean_up_spaces

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=True).ids)

    def decode(self, ids: Sequence[int]) -> str:
        text = str(self._tokenizer.decode(list(ids), skip_special_tokens=True))
        return clean_up_tokenization(text) if self._clean_up_spaces else text


class _Transformers:
    """Any tokenizer ``transformers.AutoTokenizer`` can load."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))


def clean_up_tokenization(text: str) -> str:
    """transformers' ``PreTrainedTokenizerBase.clean_up_tokenization`` (the same replacements, in order)."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'")):
        text = text.replace(before, after)
    for before, after in ((" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


def _tokenizer_config(model_dir: Path) -> dict[str, Any]:
    from neuronc.jsonfile import read_json_object

    try:
        return read_json_object(model_dir / "tokenizer_config.json", what="tokenizer_config.json")
    except FileNotFoundError:
        return {}


def direct_reason(model_dir: Path, config: Mapping[str, Any]) -> str | None:
    """Why ``model_dir``'s tokenizer must go through transformers (None: tokenizer.json applies as it is)."""
    if not (model_dir / "tokenizer.json").is_file():
        return "no tokenizer.json"
    cls = config.get("tokenizer_class")
    if cls not in _DIRECT_CLASSES:
        return f"tokenizer_class {cls!r}"
    rewriting = [k for k in _REWRITING_SETTINGS if k in config]
    if rewriting:
        return f"tokenizer_config.json sets {', '.join(rewriting)}"
    return None


def load_tokenizer(model_dir: Path) -> TextTokenizer:
    """The bundle's tokenizer (BundleFormatError when it has none that loads)."""
    try:
        config = _tokenizer_config(model_dir)
        if direct_reason(model_dir, config) is None:
            from tokenizers import Tokenizer

            try:
                tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            except Exception as exc:  # tokenizers raises a bare Exception for a damaged file
                raise ValueError(str(exc)) from None
            return _Direct(tokenizer, bool(config.get("clean_up_tokenization_spaces", False)))
        import transformers

        auto: Any = transformers.AutoTokenizer
        return _Transformers(auto.from_pretrained(str(model_dir), local_files_only=True))
    except (OSError, ValueError, TypeError, KeyError, InvalidInputError) as exc:
        detail = exc.message if isinstance(exc, InvalidInputError) else str(exc)
        msg = f"{model_dir}: cannot load the tokenizer: {detail}"
        raise BundleFormatError(msg, hint="pass token ids instead of text") from None
