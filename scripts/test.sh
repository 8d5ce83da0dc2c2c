#!/usr/bin/env bash
# The whole test suite: quality gates, unit and integration tests, molecule scenarios.
# Usage: scripts/test.sh [stage ...]   (stages: gates unit molecule; default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/bootstrap.sh
sandbox/sandbox.sh wheelhouse
# shellcheck disable=SC1091
source .venv/bin/activate
stages=("$@"); ((${#stages[@]})) || stages=(gates unit molecule)
declare -A took
t0=$(date +%s)
run_stage() {
  local s=$1 start=$(date +%s)
  echo "=== stage: $s"
  case $s in
    gates) [ -x scripts/gates.sh ] && scripts/gates.sh || echo "(no gates yet)" ;;
    unit) pytest -q -p no:cacheprovider tests ;;
    molecule)
      for scenario in ${MOLECULE_SCENARIOS:-python_env ray_head ray_worker cluster}; do
        echo "--- molecule: $scenario"; molecule test -s "$scenario"
      done ;;
    *) echo "unknown stage $s" >&2; return 2 ;;
  esac
  took[$s]=$(( $(date +%s) - start ))
}
for s in "${stages[@]}"; do run_stage "$s"; done
echo "=== all stages passed in $(( $(date +%s) - t0 )) s: $(for s in "${stages[@]}"; do printf '%s=%ss ' "$s" "${took[$s]}"; done)"
