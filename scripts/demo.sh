#!/usr/bin/env bash
# Sets everything up on this machine and runs the `smoke` experiment on the local sandbox cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
sandbox/sandbox.sh up "${SANDBOX_NODES:-3}"
export ANSIBLE_INVENTORY=${ANSIBLE_INVENTORY:-$PWD/.sandbox/inventory.yml}
.venv/bin/ansible-playbook site.yml
.venv/bin/ansible-playbook submit.yml -e exp=smoke
