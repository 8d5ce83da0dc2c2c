#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine (as root) for the sandbox and the test suite:
# system packages, a running Docker engine, the dev venv, and the sandbox base image.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '[bootstrap] %s\n' "$*"; }

need_pkgs=()
# chromium + chromium-driver: the dashboard test follows site.yml's printed words in a real browser.
# nftables: the firewall unit test checks the rendered ruleset with the real `nft -c` (the service stays disabled).
# iproute2: node_facts is compared with Ansible's own network collector on this machine.
for p in docker.io debootstrap qemu-system-x86 qemu-utils openssh-client chromium chromium-driver nftables iproute2; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  # iptables=false: the host kernel/caps here do not allow docker's NAT rules; test networks are --internal anyway.
  nohup dockerd --iptables=false >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi

if [ ! -x .venv/bin/ansible-playbook ] || [ requirements-dev.txt -nt .venv/.stamp ] || { [ -f requirements-nodeps.txt ] && [ requirements-nodeps.txt -nt .venv/.stamp ]; }; then
  log "building .venv"
  command -v uv >/dev/null 2>&1 || python3 -m pip install -q uv
  [ -x .venv/bin/python ] || uv venv -q .venv --python 3.11
  # --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (this workplace sets it), nothing would ever write the
  # .pyc files, and every ansible-playbook would compile Ansible anew: about 1 s more per start.
  uv pip install -q --compile-bytecode --python .venv/bin/python -r requirements-dev.txt
  if [ -f requirements-nodeps.txt ]; then uv pip install -q --compile-bytecode --python .venv/bin/python --no-deps -r requirements-nodeps.txt; fi
  touch .venv/.stamp
fi
# The collection's own controller-side code (plugins, module_utils), for the same reason; a stale .pyc is ignored.
.venv/bin/python -m compileall -q -j0 plugins >/dev/null

"$ROOT/sandbox/build-image.sh"
