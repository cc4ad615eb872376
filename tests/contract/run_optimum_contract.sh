#!/usr/bin/env bash
# Run the optimum-neuron contract test in its own virtual environment.
#
# optimum-neuron 0.4.5 (the only real Neuron package on PyPI) pins transformers 4.57.x; its config
# classes import on CPU without the Neuron SDK. This script creates (or reuses) a venv with
# optimum-neuron, torch (CPU) and neuronc, then runs tests/contract/.
#
#   tests/contract/run_optimum_contract.sh            # venv in $OPTIMUM_CONTRACT_VENV, default ~/.cache/neuronc/optimum-contract-venv
#   OPTIMUM_CONTRACT_VENV=/tmp/on-venv tests/contract/run_optimum_contract.sh -x
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${OPTIMUM_CONTRACT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neuronc/optimum-contract-venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import optimum.neuron.version as v; assert v.__version__ == '0.4.5'" 2>/dev/null; then
    # torch first, pinned to the CPU build this project uses, so pip does not pull a CUDA build.
    "$venv/bin/pip" install --quiet "torch==2.13.0"
    "$venv/bin/pip" install --quiet "optimum-neuron==0.4.5" "pytest>=8"
fi
"$venv/bin/pip" install --quiet --no-deps -e "$repo"
"$venv/bin/pip" install --quiet "typer>=0.29,<0.30" "rich>=13.7" "pyyaml>=6.0" "pydantic>=2.6,<3" "filelock>=3.13" \
    "safetensors>=0.4.3" "packaging>=23"

cd "$repo"
exec "$venv/bin/python" -m pytest tests/contract -p no:cacheprovider -q "$@"
