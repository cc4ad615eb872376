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
pip install -e ".[cpu,test,dev,remote]"
# Optionally choose another transformers release (e.g. TRANSFORMERS_SPEC="transformers==4.57.1").
if [ -n "${TRANSFORMERS_SPEC:-}" ]; then
  pip install "$TRANSFORMERS_SPEC"
fi
echo "neuronc is installed in $VENV: $("$VENV/bin/neuronc" --version)"
