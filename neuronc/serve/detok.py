"""A request's text as its tokens arrive: what is safe to send now, and where a stop string ends it.

The whole generated sequence is decoded again at every step (sequences are at most the bundle's
``max_length`` tokens): what ``neuronc run`` prints is ``decode(tokens)``, and so is what this sends,
piece by piece. A trailing U+FFFD (a character whose bytes have not all arrived) is held back, and so
are the last ``len(longest stop) - 1`` characters while stop strings are set: they may be the start of
one. Text after a stop string is never sent; the stop string itself neither (OpenAI's rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class TextTail:
    """Incremental text of one request: ``advance(ids)`` gives the new text to send and whether a stop string hit."""

    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str]) -> None:
        self._decode = decode
        self._stop = tuple(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.sent = ""
        self.text = ""

    def advance(self, ids: Sequence[int], *, final: bool = False) -> tuple[str, bool]:
        """(text to send now, whether a stop string ended the text). ``final``: send everything left."""
        text = self._decode(ids)
        stopped = False
        if self._stop:
            cut = min((i for i in (text.find(s) for s in self._stop) if i >= 0), default=-1)
            if cut >= 0:
                text, stopped, final = text[:cut], True, True
        self.text = text
        end = len(text)
        if not final:
            if text.endswith("\ufffd"):
                end = len(text.rstrip("\ufffd"))
            end = max(len(self.sent), end - self._hold)
        if not text.startswith(self.sent):
            # Decoding more tokens changed text already sent (rare): send nothing until it agrees again.
            return "", stopped
        new = text[len(self.sent) : end]
        self.sent += new
        return new, stopped
