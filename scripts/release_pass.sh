#!/usr/bin/env bash
# One of CI's release passes: neuronc installed from its wheel, as a user installs it, with every
# dependency at the newest (or the oldest) release pyproject.toml allows; then the no-checkout
# quickstart of docs/quickstart.md (profiles copy, compile, run, verify --accuracy) outside the
# checkout, and the tests marked `compat` (those that exercise third-party APIs).
#
#   bash scripts/release_pass.sh newest [PYTEST ARGS...]   # a fresh resolve: the newest releases
#   bash scripts/release_pass.sh oldest [PYTEST ARGS...]   # pinned to the lower bounds (scripts/dependency_floor.py)
#
# torch stays the local CPU build (2.13.0) in both. The environment is .venv-newest / .venv-oldest,
# made anew each run. Needs .venv (scripts/setup.sh) for the script that reads pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mode=${1:?usage: release_pass.sh newest|oldest [pytest args]}
shift
case "$mode" in newest | oldest) ;; *) echo "release_pass.sh: newest or oldest, not $mode" >&2; exit 2 ;; esac
PYTHON=${PYTHON:-python3}
venv=$repo/.venv-$mode
extras=cpu,remote,sign,serve,bench
work=$(mktemp -d "${TMPDIR:-/tmp}/neuronc-$mode-XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
step() { echo "== $mode: $1 ($((SECONDS - t0))s so far)"; }

step "a fresh $venv"
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
constraints=()
if [[ $mode == oldest ]]; then
    .venv/bin/python scripts/dependency_floor.py ${extras//,/ } > "$work/constraints.txt"
    cat "$work/constraints.txt"
    constraints=(-c "$work/constraints.txt")
fi
pip install --upgrade pip
pip install "${constraints[@]}" "torch==2.13.0"
pip wheel --no-deps --wheel-dir "$work/dist" . 2>/dev/null
wheel=$(ls "$work"/dist/neuronc-*.whl)
pip install "${constraints[@]}" "$wheel[$extras,test]" "torch==2.13.0"
"$venv/bin/python" "$repo/scripts/dependency_floor.py" --installed "${constraints[@]:1}"

step "the no-checkout quickstart (docs/quickstart.md), outside the checkout"
mkdir "$work/quickstart"
(
    cd "$work/quickstart"
    export PATH="$venv/bin:$PATH" XDG_CACHE_HOME="$work/cache" NEURONC_STORE="$work/store" HF_HOME="$work/hf" \
        HF_HUB_OFFLINE=1 NO_COLOR=1
    neuronc profiles copy tiny-llama-cpu
    neuronc compile tiny-llama-cpu.yaml --out demo-bundle
    neuronc run demo-bundle --prompt "The quick brown fox" --json > run.json
    python "$repo/scripts/demo_is_english.py" run.json
    neuronc verify demo-bundle --accuracy
)

step "tests marked compat (not slow)"
set +e
"$venv/bin/pytest" -p no:cacheprovider -q -n auto -m "compat and not slow" "$@"
code=$?
set -e
step "done (pytest exit $code)"
exit "$code"
