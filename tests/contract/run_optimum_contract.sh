#!/usr/bin/env bash
# Run the optimum-neuron contract test in its own virtual environment.
#
# optimum-neuron 0.4.5 (the only real Neuron package on PyPI) pins transformers 4.57.x and optimum 2.0
# and, in its `neuronx` extra, torch 2.8.0, torchvision 0.23, numpy <= 1.26.4 and protobuf, next to
# the Neuron SDK packages (neuronx-cc, torch-neuronx, neuronx_distributed, libneuronxla) that PyPI
# only has placeholders for. This script installs exactly those pins except the SDK ones, torch and
# torchvision as CPU wheels from the PyTorch CPU index, then neuronc, and runs tests/contract/.
#
#   tests/contract/run_optimum_contract.sh            # venv in $OPTIMUM_CONTRACT_VENV, default ~/.cache/neuronc/optimum-contract-venv
#   OPTIMUM_CONTRACT_VENV=/tmp/on-venv tests/contract/run_optimum_contract.sh -x
#
# Where the PyTorch CPU index (OPTIMUM_CONTRACT_TORCH_INDEX, default https://download.pytorch.org/whl/cpu)
# cannot be reached, the script says so and falls back to OPTIMUM_CONTRACT_TORCH_FALLBACK (default
# torch==2.13.0, the CPU build this project installs): optimum-neuron's config and export API do not
# depend on the torch version, but the run is then not on optimum-neuron's pinned torch.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${OPTIMUM_CONTRACT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neuronc/optimum-contract-venv}"
python="${PYTHON:-python3}"
torch_index="${OPTIMUM_CONTRACT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
torch_fallback="${OPTIMUM_CONTRACT_TORCH_FALLBACK:-torch==2.13.0}"
version="0.4.5"
# Distributions of the neuronx extra that are the Neuron SDK itself (not installable from PyPI).
sdk="neuronx-cc torch-neuronx neuronx-distributed libneuronxla wheel"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/pip" install --quiet)
stamp="$venv/.neuronc-optimum-contract"
if [[ "$(cat "$stamp" 2>/dev/null)" != "optimum-neuron==$version" ]]; then
    # torch first, so that nothing pulls a CUDA build from PyPI.
    if ! "${pip[@]}" --retries 1 --timeout 30 --index-url "$torch_index" "torch==2.8.0.*" "torchvision==0.23.*"; then
        echo "run_optimum_contract.sh: cannot install optimum-neuron $version's torch 2.8.0 from $torch_index;" \
            "falling back to $torch_fallback (not the pinned torch)" >&2
        "${pip[@]}" "$torch_fallback"
    fi
    "${pip[@]}" "optimum-neuron==$version" "pytest>=8"
    # The rest of the neuronx extra's pins, read from the installed wheel's metadata.
    mapfile -t pins < <("$venv/bin/python" - "$sdk" <<'EOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement

sdk = set(sys.argv[1].split())
for line in requires("optimum-neuron") or []:
    req = Requirement(line)
    if req.marker is None or not req.marker.evaluate({"extra": "neuronx"}) or req.marker.evaluate({"extra": ""}):
        continue
    name = req.name.lower().replace("_", "-")
    if name not in sdk and name not in {"torch", "torchvision"}:
        print(f"{req.name}{req.specifier}")
EOF
    )
    if ((${#pins[@]})); then
        "${pip[@]}" "${pins[@]}"
    fi
    echo "optimum-neuron==$version" > "$stamp"
fi
"$venv/bin/pip" install --quiet --no-deps -e "$repo"
"${pip[@]}" "click>=8.2,<9" "rich>=13.7" "pyyaml>=6.0" "pydantic>=2.6,<3" "filelock>=3.13" \
    "safetensors>=0.4.3" "packaging>=23"
"$venv/bin/python" -c "import torch, optimum.neuron.version as v; print(f'optimum-neuron {v.__version__}, torch {torch.__version__}')"

cd "$repo"
exec "$venv/bin/python" -m pytest tests/contract -p no:cacheprovider -q "$@"
