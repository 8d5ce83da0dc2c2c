#!/usr/bin/env bash
# The storage roles on a real kernel (device-mapper, NFS): build the VM image if its recipe changed
# (cached under .cache/vm/), boot one qemu VM (TCG), run tests/integration/test_storage_vm.py in it,
# stop the VM and delete its run directory, whatever happened. Exit status: pytest's.
#   tests/vm/run.sh [pytest args...]
# Environment: RLINFRA_VM_SMP (2), RLINFRA_VM_MEM (1536 MiB), RLINFRA_VM_BOOT_TIMEOUT (300 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export RLINFRA_VM_RUN=${RLINFRA_VM_RUN:-$ROOT/.cache/vm-run}
mkdir -p "$ROOT/.cache"
exec 8>"$ROOT/.cache/vm-run.lock"
flock 8   # one VM scenario at a time in this checkout
t0=$(date +%s)
tests/vm/vm.sh down                  # leftovers of an interrupted run
trap 'tests/vm/vm.sh down' EXIT
tests/vm/build-image.sh >/dev/null
t_image=$(date +%s)
tests/vm/vm.sh up
t_boot=$(date +%s)
rc=0
"$ROOT/.venv/bin/pytest" -p no:cacheprovider -v -s --durations=0 tests/integration/test_storage_vm.py "$@" || rc=$?
t_end=$(date +%s)
if [ $rc != 0 ]; then  # what the VM looked like when it failed: gone (host OOM killer?) or a guest panic
  if tests/vm/vm.sh status >/dev/null; then echo "[vm] qemu still runs"; else echo "[vm] qemu is gone"; fi
  echo "[vm] console.log ends:"; tail -25 "$RLINFRA_VM_RUN/console.log" 2>/dev/null || true
  dmesg 2>/dev/null | grep -iE "out of memory|oom-kill|killed process" | tail -5 || true
fi
echo "[vm] storage VM scenario: image $((t_image - t0)) s, boot $((t_boot - t_image)) s," \
     "tests $((t_end - t_boot)) s, total $((t_end - t0)) s (rc $rc)"
exit $rc
