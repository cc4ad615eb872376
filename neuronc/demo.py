"""The shipped demo model: a tiny Llama trained in this project on a public-domain book.

``python -m neuronc.demo [--out DIR] [--check]`` regenerates (or, with ``--check``, verifies) the
model that ships as package data in ``neuronc/data/profiles/models/tiny-llama`` (in a checkout,
also reachable as ``profiles/models/tiny-llama``); ``--out`` defaults to that directory wherever the
command runs from. Regenerating trains the model again with ``scripts/train_demo_model.py``
(a couple of minutes of one CPU core; it needs the cpu extra and a source checkout, which has the
script and its corpus): same seed, same bytes. ``--check`` trains into a temporary directory and
compares every file byte for byte.

The model (2 layers, hidden 80, 4 heads over 2 KV heads, vocabulary 1024, about 1.2 MB) learnt
Alice's Adventures in Wonderland (Lewis Carroll, 1865): it writes English that a reader recognises,
looping and nonsensical as a model this small does, so that a working compile shows at a glance.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from neuronc.data import profiles_root

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def model_dir() -> Path:
    """The shipped demo model's directory inside the installed package."""
    return Path(str(profiles_root() / "models" / "tiny-llama"))


def trainer_script() -> Path | None:
    """scripts/train_demo_model.py of the checkout this package runs from, if it runs from one."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "train_demo_model.py"
    return script if script.is_file() else None


def run_trainer(out_dir: Path, *extra: str) -> int:
    """Run the trainer (in its own process: it pins its threads and kernels before torch loads)."""
    script = trainer_script()
    if script is None:
        sys.stderr.write(
            "error: regenerating the demo model needs a source checkout of neuronc "
            "(scripts/train_demo_model.py and its corpus); this neuronc is installed without one\n"
        )
        return 2
    return subprocess.call([sys.executable, str(script), "--out", str(out_dir), *extra])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuronc.demo", description=__doc__.splitlines()[0])
    default = model_dir()
    parser.add_argument("--out", type=Path, default=default, help=f"output directory (default {default})")
    parser.add_argument(
        "--check", action="store_true", help="train into a temporary directory and compare with --out, byte for byte"
    )
    args = parser.parse_args(argv)
    return run_trainer(args.out.absolute(), *(["--check"] if args.check else []))


if __name__ == "__main__":
    raise SystemExit(main())
