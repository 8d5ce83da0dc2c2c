#!/usr/bin/env bash
# The Python environment in which tests/integration/test_merge.py shards a model with torchrun and
# runs verl's model merger (python -m verl.model_merger): torch (CPU), transformers, safetensors,
# accelerate, verl 0.9.1 (--no-deps) and the few packages `import verl` pulls in.
#
#   tests/integration/merge_venv.sh [VENV]      # prints the venv's path on its last line
#
# Kept out of the dev venv on purpose: a plain `torch` requirement resolves to several GB of CUDA
# packages, while `pip install torch==2.13.0` takes the CPU build (see shared/TESTBED.md), so this
# venv is made with pip, not uv. It is re-used as long as its requirement list (this file's REQS,
# the Python version) is unchanged: a re-run costs well under a second. Default location:
# .cache/merge-venv (or $RLINFRA_MERGE_VENV).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-${RLINFRA_MERGE_VENV:-$ROOT/.cache/merge-venv}}"
PYTHON="${RLINFRA_MERGE_PYTHON:-python3}"

# torch: the CPU build. transformers, tensordict: verl 0.9.1's own bounds. ray: the cluster's
# version (verl.protocol imports it). The rest: what `import verl.model_merger` needs.
REQS=(
  "torch==2.13.0"
  "transformers>=5.5.3,<5.11,!=5.6.0"
  "safetensors"
  "accelerate"
  "huggingface-hub"
  "numpy>=2.0.0"
  "tensordict>=0.8.0,<=0.10.0,!=0.9.0"
  "ray==2.60.0"
  "omegaconf>=2.3,<2.4"
  "codetiming"
  "packaging>=20.0"
)
NODEPS=("verl==0.9.1")
# What the test imports, checked before the venv is declared ready.
PROBE='import torch, transformers, safetensors.torch, accelerate, verl.model_merger.fsdp_model_merger'

stamp_text() {
  "$PYTHON" -c 'import sys; print("python %d.%d" % sys.version_info[:2])'
  printf '%s\n' "${REQS[@]}" "--no-deps" "${NODEPS[@]}"
}

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9  # one builder at a time (parallel test runs)

want="$(stamp_text)"
if [[ -x "$VENV/bin/python" && -f "$VENV/.rlinfra-requirements" ]] \
    && [[ "$(cat "$VENV/.rlinfra-requirements")" == "$want" ]]; then
  echo "$VENV"
  exit 0
fi

start=$SECONDS
echo "merge_venv: building $VENV" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# The stamp is written last: a build that was interrupted is redone from scratch next time.
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input)
# (this machine's pip.conf names local indexes that lack most packages: drop pip's notes about them)
quiet() { sed '/is ignored: it is neither a file nor a directory/d' >&2; }
"${PIP[@]}" "${REQS[@]}" 2>&1 | quiet
"${PIP[@]}" --no-deps "${NODEPS[@]}" 2>&1 | quiet
"$VENV/bin/python" -c "$PROBE" >&2
printf '%s\n' "$want" >"$VENV/.rlinfra-requirements"
echo "merge_venv: built in $((SECONDS - start)) s" >&2
echo "$VENV"
