#!/usr/bin/env bash
# Set up a virtual environment for neuronc on a fresh CPU-only machine.
#
# torch is installed first and pinned (2.13.0, CPU build): a plain `torch` requirement with no torch
# installed would pull a multi-GB CUDA build. Then neuronc itself with the CPU backend, the test
# tools and the linters. Re-running it is cheap: pip finds everything already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --upgrade pip
pip install "torch==2.13.0"
# transformers 4.57.x (the series the Neuron SDK pins) unless TRANSFORMERS_SPEC picks another release
# (e.g. "transformers>=5,<6"; the cpu extra allows both). One resolve, so that huggingface_hub and
# tokenizers fit the transformers chosen.
pip install -e ".[cpu,test,dev,remote,sign,ray,serve,bench]" "${TRANSFORMERS_SPEC:-transformers>=4.57,<4.58}"
echo "neuronc is installed in $VENV: $("$VENV/bin/neuronc" --version)"
