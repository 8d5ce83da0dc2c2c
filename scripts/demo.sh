#!/usr/bin/env bash
# Sets everything up on this machine and runs the `smoke` experiment on the local sandbox cluster,
# through the Hyperbolic dynamic inventory: a local stand-in of the Hyperbolic API (loopback only)
# lists the sandbox's containers as rented instances, exactly as the real API lists GPU machines.
#   DEMO_INVENTORY=static scripts/demo.sh   uses the sandbox's static inventory instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/bootstrap.sh
sandbox/sandbox.sh up "${SANDBOX_NODES:-3}"
inventory=$ROOT/.sandbox/inventory.yml
if [ "${DEMO_INVENTORY:-hyperbolic}" = hyperbolic ]; then
  # A throw-away key for the stand-in API; it travels by environment, never on a command line.
  HYPERBOLIC_API_KEY=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  export HYPERBOLIC_API_KEY
  inventory=$ROOT/.sandbox/sandbox.hyperbolic.yml
  rm -f "$inventory"
  .venv/bin/python -m tests.fake_hyperbolic.server --from-sandbox .sandbox/state.json \
    --write-inventory "$inventory" >.sandbox/fake-hyperbolic.log 2>&1 &
  fake=$!
  trap 'kill $fake 2>/dev/null || true' EXIT
  for _ in $(seq 1 50); do [ -s "$inventory" ] && break; sleep 0.2; done
  [ -s "$inventory" ] || { cat .sandbox/fake-hyperbolic.log >&2; echo "the local Hyperbolic API did not start" >&2; exit 1; }
  echo "[demo] inventory from the Hyperbolic inventory plugin: $inventory"
  .venv/bin/ansible-inventory -i "$inventory" --graph
fi
.venv/bin/ansible-playbook -i "$inventory" site.yml
.venv/bin/ansible-playbook -i "$inventory" submit.yml -e exp=smoke
