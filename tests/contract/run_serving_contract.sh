#!/usr/bin/env bash
# Run the serving contract tests (tests/contract/serving/) against the serving stacks' own code, in two
# virtual environments whose pins clash with ours (and with each other):
#   - torch 2.13.0 (CPU, from local disk) first, so nothing pulls a CUDA build;
#   - optimum-neuron 0.4.5 (+ transformers 4.57.x), botocore, torch-model-archiver + torchserve 0.12.0,
#     guidellm 0.8.1, pytest, and neuronc itself (--no-deps) with its own dependencies;
#   - vLLM 0.11.0, 0.13.0, 0.16.0 and 0.21.0 each installed --no-deps into its own --target folder (a
#     400-500 MB wheel; only the modules its argument parser imports are installed beside it), put on
#     PYTHONPATH for its vLLM pass only;
#   - a second venv for vLLM 0.24.0 and 0.29.0, whose parsers import only with transformers 5
#     (vllm/transformers_utils/config.py: "Support for Transformers v4 ... was removed in vLLM v0.24.0")
#     while optimum-neuron 0.4.5 needs transformers 4.57: transformers>=5.10.4 (0.29.0's floor),
#     FastAPI <0.137 (their pin), their parser imports, pytest and neuronc (--no-deps);
#   - nginx from Debian (apt), for `nginx -t` on every emitted nginx.conf.
# Passes: (1) everything but vLLM (no vLLM importable, as optimum-cli's parser is checked without it),
# then vLLM's parser at each version: 0.11.0/0.13.0/0.16.0 check NxD Inference bundles, 0.21.0/0.24.0/
# 0.29.0 vllm-neuron (torch.compile) bundles. The bundles are compiled once (pass 1) and shared.
#
#   tests/contract/run_serving_contract.sh          # venvs in $SERVING_CONTRACT_VENV (default ~/.cache/neuronc/serving-contract-venv) and $SERVING_CONTRACT_VENV-tf5
#   VLLM_NEURON_SRC=/path/to/vllm-neuron tests/contract/run_serving_contract.sh   # also grep env names in the plugin source
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${SERVING_CONTRACT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neuronc/serving-contract-venv}"
venv5="${venv}-tf5"
python="${PYTHON:-python3}"
VLLM_VERSIONS=(0.11.0 0.13.0 0.16.0 0.21.0)
VLLM_TF5_VERSIONS=(0.24.0 0.29.0)
# What vLLM's argument parser imports (found by importing it with nothing else installed); pins as vLLM 0.13.0's.
VLLM_PARSER_DEPS=(regex cachetools cbor2 cloudpickle psutil setproctitle pyzmq blake3 pillow "fastapi>=0.115"
    "openai>=1.99.1" "openai-harmony>=0.0.3" pybase64 msgspec partial-json-parser "gguf>=0.17.0" py-cpuinfo
    "prometheus_client>=0.18.0" "llguidance>=1.3.0,<1.4.0" "diskcache==5.6.3" "xgrammar==0.1.27"
    "lm-format-enforcer==0.11.3" aiohttp requests uvloop)
# vLLM 0.24.0 / 0.29.0's parser imports (the same found the same way), in the second venv.
VLLM_TF5_DEPS=("transformers>=5.10.4" "fastapi[standard]>=0.133,<0.137" "openai>=2.0.0" uvloop regex cachetools
    cbor2 cloudpickle psutil setproctitle pyzmq blake3 pillow "openai-harmony>=0.0.3" pybase64 msgspec
    partial-json-parser "gguf>=0.17.0" py-cpuinfo "prometheus_client>=0.18.0" aiohttp requests "pydantic>=2.12"
    "pytest>=8")
STACKS=("optimum-neuron==0.4.5" "transformers>=4.57,<4.58" botocore "torch-model-archiver==0.12.0"
    "torchserve==0.12.0" "guidellm==0.8.1" "pytest>=8")
NEURONC_DEPS=("click>=8.2,<9" "rich>=13.7" "pyyaml>=6.0" "pydantic>=2.6,<3" "filelock>=3.13"
    "huggingface_hub>=0.30" "safetensors>=0.4.3" "packaging>=23" "numpy>=1.26" "tokenizers>=0.20")

step() { echo "== $1 ($(( SECONDS - t0 ))s so far)"; }
t0=$SECONDS
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, guidellm, ts, botocore, optimum.neuron, uvloop" 2>/dev/null; then
    step "install torch 2.13.0 (CPU) first"
    "$venv/bin/pip" install --quiet "torch==2.13.0"
    step "install the stacks and the vLLM parser's imports"
    "$venv/bin/pip" install --quiet "${STACKS[@]}" "${VLLM_PARSER_DEPS[@]}" "${NEURONC_DEPS[@]}"
fi
for version in "${VLLM_VERSIONS[@]}"; do
    if [[ ! -f "$venv/vllm-$version/vllm/version.py" ]]; then
        step "install vllm $version (--no-deps) into $venv/vllm-$version"
        "$venv/bin/pip" install --quiet --no-deps --target "$venv/vllm-$version" "vllm==$version"
    fi
done
if [[ ! -x "$venv5/bin/python" ]]; then
    "$python" -m venv "$venv5"
fi
if ! "$venv5/bin/python" -c "import torch, transformers, fastapi, uvloop, pytest; assert transformers.__version__ >= '5'" 2>/dev/null; then
    step "second venv: torch 2.13.0 (CPU), transformers 5 and vLLM 0.24/0.29's parser imports"
    "$venv5/bin/pip" install --quiet "torch==2.13.0"
    "$venv5/bin/pip" install --quiet "${VLLM_TF5_DEPS[@]}" "${NEURONC_DEPS[@]}"
fi
for version in "${VLLM_TF5_VERSIONS[@]}"; do
    if [[ ! -f "$venv5/vllm-$version/vllm/version.py" ]]; then
        step "install vllm $version (--no-deps) into $venv5/vllm-$version"
        "$venv5/bin/pip" install --quiet --no-deps --target "$venv5/vllm-$version" "vllm==$version"
    fi
done
# optimum-neuron 0.4.0 and 0.4.1: their serve parsers are read from the wheels (test_optimum_serve_versions.py).
for version in 0.4.0 0.4.1; do
    if ! ls "$venv/optimum-wheels/optimum_neuron-$version-"*.whl >/dev/null 2>&1; then
        step "download optimum-neuron $version's wheel (--no-deps) into $venv/optimum-wheels"
        "$venv/bin/pip" download --quiet --no-deps --dest "$venv/optimum-wheels" "optimum-neuron==$version"
    fi
done
export NEURONC_OPTIMUM_WHEELS="$venv/optimum-wheels"
"$venv/bin/pip" install --quiet --no-deps -e "$repo"
"$venv5/bin/pip" install --quiet --no-deps -e "$repo"
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    step "install nginx (Debian) for nginx -t"
    sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_="sudo"
    $sudo_ apt-get install -y --no-install-recommends nginx >/dev/null \
        || { $sudo_ apt-get update -qq && $sudo_ apt-get install -y --no-install-recommends nginx >/dev/null; }
fi
step "setup done"

export NEURONC_SERVING_CONTRACT=1
NEURONC_SERVING_BUNDLES="$(mktemp -d)"
export NEURONC_SERVING_BUNDLES
trap 'rm -rf "$NEURONC_SERVING_BUNDLES"' EXIT
cd "$repo"
run_pytest() { "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"; }
run_pytest5() { "$venv5/bin/python" -m pytest -p no:cacheprovider -q "$@"; }
step "pass 1: optimum-neuron, botocore, torch-model-archiver + torchserve, guidellm, nginx"
run_pytest tests/contract/serving --ignore=tests/contract/serving/test_vllm_parser.py
for version in "${VLLM_VERSIONS[@]}"; do
    step "pass: vLLM $version's argument parser"
    PYTHONPATH="$venv/vllm-$version${PYTHONPATH:+:$PYTHONPATH}" run_pytest tests/contract/serving/test_vllm_parser.py
done
for version in "${VLLM_TF5_VERSIONS[@]}"; do
    step "pass: vLLM $version's argument parser (transformers 5 venv)"
    PYTHONPATH="$venv5/vllm-$version${PYTHONPATH:+:$PYTHONPATH}" run_pytest5 tests/contract/serving/test_vllm_parser.py
done
step "all passes done"
