"""Check that `neuronc run DEMO-BUNDLE --json` wrote English: the demo model's words, not gibberish.

    python scripts/demo_is_english.py run.json

At least 16 words, and 80% of them words of the book the demo model was trained on
(scripts/demo-corpus/, through scripts/train_demo_model.py's `corpus_words`): the test
tests/test_demo_model.py applies the same rule, and shows the untrained model fails it. Used by
CI's release passes (scripts/release_pass.sh) on a bundle compiled outside the checkout.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

TRAINER = Path(__file__).resolve().parent / "train_demo_model.py"


def main() -> None:
    spec = importlib.util.spec_from_file_location("train_demo_model", TRAINER)
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    vocabulary = trainer.corpus_words()
    text = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["text"]
    words = re.findall(r"[A-Za-z]+", text)
    share = sum(w.lower() in vocabulary for w in words) / max(len(words), 1)
    print(f"run wrote {len(words)} words, {share:.0%} of them the book's: {text[:120]!r}")
    if len(words) < 16 or share < 0.8:
        raise SystemExit("not the demo model's English: the compiled bundle is wrong")


if __name__ == "__main__":
    main()
