#!/usr/bin/env bash
# The seeds' bring-up, as users paste it today (docs/../seeds: Hyperbolic guide, verl multinode guide), run
# against the sandbox for bench/bench_site.py: node by node, a venv, pip install from the shared
# wheelhouse, `ray start --head` on the first node and `ray start --address` on the others, then
# `ray status` on the head until every node has joined. No systemd, no token, no checks.
#   bench/seed_bringup.sh INVENTORY_STATE_JSON
set -euo pipefail
state=${1:?usage: bench/seed_bringup.sh .sandbox/state.json}
venv=/opt/seed/venv
packages=${SEED_PACKAGES:-ray[default]==2.60.0}
mapfile -t nodes < <(python3 -c 'import json,sys; [print(n["ip"]) for n in json.load(open(sys.argv[1]))["nodes"]]' "$state")
key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ssh_key"])' "$state")
ssh_node() { ssh -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "root@$1" "$2"; }
head=${nodes[0]}
for ip in "${nodes[@]}"; do
  ssh_node "$ip" "rm -rf $venv && python3 -m venv $venv && . $venv/bin/activate \
    && pip install --quiet --disable-pip-version-check --no-index --find-links /data/wheelhouse '$packages'"
  if [ "$ip" = "$head" ]; then
    ssh_node "$ip" "$venv/bin/ray start --head --disable-usage-stats --node-ip-address=$ip --port=6379 --dashboard-host=$ip >/dev/null"
  else
    ssh_node "$ip" "$venv/bin/ray start --address=$head:6379 --disable-usage-stats --node-ip-address=$ip >/dev/null"
  fi
done
for _ in $(seq 1 120); do
  alive=$(ssh_node "$head" "$venv/bin/ray status --address=$head:6379 2>/dev/null | grep -c ' node_' || true")
  [ "$alive" -ge "${#nodes[@]}" ] && exit 0
  sleep 1
done
echo "seed bring-up: only $alive of ${#nodes[@]} nodes joined" >&2
exit 1
