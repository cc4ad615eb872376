#!/usr/bin/env bash
# GuideLLM 0.8.1, in its own virtual environment, against `neuronc serve` of the demo bundle: a short
# synchronous and a concurrent benchmark with no failed request, and GuideLLM's token counts equal to
# the server's (tests/contract/guidellm_serve.py). neuronc runs from this checkout's .venv (the cpu and
# serve extras); GuideLLM pins what neuronc does not need (httpx, pydantic-settings, ...), hence its own venv.
#
#   tests/contract/run_guidellm_serve_contract.sh               # venv in $GUIDELLM_VENV (default ~/.cache/neuronc/guidellm-venv)
#   tests/contract/run_guidellm_serve_contract.sh --bundle DIR  # serve that CPU bundle instead of compiling the demo
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${GUIDELLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neuronc/guidellm-venv}"
python="${PYTHON:-python3}"
if ! "$venv/bin/guidellm" --version 2>/dev/null | grep -q "0.8.1"; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet "guidellm==0.8.1"
fi
exec "$repo/.venv/bin/python" "$repo/tests/contract/guidellm_serve.py" --guidellm "$venv/bin/guidellm" "$@"
