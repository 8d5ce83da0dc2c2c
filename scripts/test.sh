#!/usr/bin/env bash
# The whole test suite: quality gates, unit tests, integration tests, molecule scenarios, the storage VM.
# Usage: scripts/test.sh [stage ...]   (stages: gates unit integration loopback molecule vm; default: all)
# With more than one stage, the integration stage (which waits on the shared sandbox cluster and on Ray) runs in
# one lane and the others (the CPU-bound gates and unit tests, the loopback integration tests, molecule's own
# containers, qemu) in a second, niced
# so that the timing-sensitive sandbox tests keep the CPU first; TEST_LANES=1 runs the stages one after another.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
stages=("$@"); ((${#stages[@]})) || stages=(gates unit integration loopback molecule vm)
LOGS=$ROOT/.cache/test-logs
t0=$(date +%s)
rm -rf "$LOGS"; mkdir -p "$LOGS"
# The stage times, as a table, however the run ends (a stage that failed or never finished says so).
report() {
  local rc=$? s
  echo "=== stage times (s, wall clock; the two lanes overlap)"
  printf '%-12s %8s\n' stage seconds
  for s in setup "${stages[@]}"; do
    if [ -f "$LOGS/$s.time" ]; then printf '%-12s %8s\n' "$s" "$(cat "$LOGS/$s.time")"
    elif [ -f "$LOGS/$s.failed" ]; then printf '%-12s %8s  FAILED\n' "$s" "$(cat "$LOGS/$s.failed")"
    else printf '%-12s %8s\n' "$s" "-"; fi
  done
  printf '%-12s %8s\n' total "$(( $(date +%s) - t0 ))"
  exit "$rc"
}
trap report EXIT
scripts/bootstrap.sh
sandbox/sandbox.sh wheelhouse
echo $(( $(date +%s) - t0 )) > "$LOGS/setup.time"
# shellcheck disable=SC1091
source .venv/bin/activate
run_stage() {
  local s=$1 start rc=0
  start=$(date +%s)
  echo "=== stage: $s"
  case $s in
    gates) scripts/gates.sh || rc=$? ;;
    unit) pytest -q -p no:cacheprovider -rs --durations=10 tests/unit || rc=$? ;;
    integration)
      # The AWX test brings the sandbox up when it is not; leave the machine as it was.
      local had_sandbox=0; [ -f .sandbox/inventory.yml ] && had_sandbox=1
      # Only the tests on the sandbox cluster: the loopback stage runs the others, in the second lane.
      # test_storage_vm.py needs the VM that the vm stage boots: run there, never skipped here.
      # Its log is kept: when it fails, the lines that say why are shown again at the very end, after the side lane.
      pytest -q -p no:cacheprovider -rfEs --durations=30 -m sandbox --ignore=tests/integration/test_storage_vm.py \
        tests/integration 2>&1 | tee "$LOGS/integration.log" || rc=$?
      [ $had_sandbox = 1 ] || sandbox/sandbox.sh down ;;
    loopback)  # the integration tests that need no sandbox: Ray on loopback, the fake API, FSDP shards
      pytest -q -p no:cacheprovider -rfEs --durations=15 -m "not sandbox" --ignore=tests/integration/test_storage_vm.py \
        tests/integration || rc=$? ;;
    molecule)
      for scenario in ${MOLECULE_SCENARIOS:-python_env ray_head ray_worker storage_lvm nfs_mount cluster}; do
        echo "--- molecule: $scenario"; molecule test -s "$scenario" || { rc=$?; break; }
      done ;;
    vm) tests/vm/run.sh || rc=$? ;;  # storage_lvm + nfs_mount on a real kernel (qemu, TCG)
    *) echo "unknown stage $s" >&2; rc=2 ;;
  esac
  if [ $rc = 0 ]; then echo $(( $(date +%s) - start )) > "$LOGS/$s.time"
  else echo $(( $(date +%s) - start )) > "$LOGS/$s.failed"; echo "=== stage $s FAILED (exit $rc)"; fi
  return $rc
}
# Stages one after another, stopping at the first that fails.
run_lane() { local s; for s in "$@"; do run_stage "$s" || return 1; done; }
side=() main=()
for s in "${stages[@]}"; do if [ "$s" = integration ]; then main+=("$s"); else side+=("$s"); fi; done
if [ "${TEST_LANES:-2}" = 1 ] || [ ${#main[@]} = 0 ] || [ ${#side[@]} = 0 ]; then
  run_lane "${stages[@]}"
else
  # The side lane's output goes to its log, shown whole when it ends, so the two never interleave.
  # The VM gets one virtual CPU here: with two, qemu's TCG threads would take both cores from the cluster.
  # It first builds the container test's images (sandbox/sandbox.sh image, cached, one builder at a time) and the
  # execution environment the AWX test runs in (scripts/ee.sh, cached, locked), which the integration lane would
  # otherwise build in its own time when those tests start (the AWX test runs last for that).
  ( export RLINFRA_VM_SMP=${RLINFRA_VM_SMP:-1}; nice -n 10 bash -c "$(declare -f run_stage run_lane); LOGS='$LOGS'
      t=\$(date +%s); if sandbox/sandbox.sh image > '$LOGS/images.log' 2>&1; then
        echo \"=== images for the container test built ahead in \$(( \$(date +%s) - t ))s\"
      else echo '=== building the images ahead failed (the container test builds them itself):'; tail -5 '$LOGS/images.log'; fi
      t=\$(date +%s); if scripts/ee.sh > '$LOGS/ee.log' 2>&1; then
        echo \"=== the execution environment for the AWX test built ahead in \$(( \$(date +%s) - t ))s: \$(tail -1 '$LOGS/ee.log')\"
      else echo '=== building the execution environment ahead failed (the AWX test builds it itself):'; tail -5 '$LOGS/ee.log'; fi
      run_lane ${side[*]}" ) > "$LOGS/side.log" 2>&1 &
  side_pid=$!
  main_rc=0; run_lane "${main[@]}" || main_rc=$?
  side_rc=0; wait "$side_pid" || side_rc=$?
  echo "=== side lane (${side[*]}), run beside the integration stage: its output"
  cat "$LOGS/side.log"
  if [ $main_rc != 0 ] && [ -f "$LOGS/integration.log" ]; then
    echo "=== integration failed: its failures again (the whole log is .cache/test-logs/integration.log)"
    grep -E '^(E  |FAILED |ERROR |_{3,} .* _{3,}$)' "$LOGS/integration.log" | cut -c1-400 | tail -150
  fi
  [ $main_rc = 0 ] && [ $side_rc = 0 ] || exit 1
fi
echo "=== all stages passed in $(( $(date +%s) - t0 )) s"
