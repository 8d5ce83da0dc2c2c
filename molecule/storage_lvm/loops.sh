#!/usr/bin/env bash
# Loop devices for the storage_lvm scenario, on the host (the container gets them with --device).
#   loops.sh up STATE_DIR    attach (or reuse) one loop device per test disk, print their map as JSON
#   loops.sh down STATE_DIR  detach the loop devices backed by STATE_DIR's files, delete the files
# Disks (512 MiB sparse files):
#   a, b   empty: the PVs of the volume group          c  ext4 "precious" with /precious.txt
#   d      empty: the plain (no LVM) scratch volume     e  empty: discovery, check mode
#   f      MBR partition table: refusal, then storage_lvm_force
#   g      empty: a plain xfs volume
# Only loop devices whose backing file is in STATE_DIR are ever detached.
set -euo pipefail
cmd=${1:?up|down}; state=${2:?state dir}
DISKS=(a b c d e f g)
mkdir -p "$state"
state=$(cd "$state" && pwd)

attached() { losetup -j "$1" -O NAME -n 2>/dev/null | head -1; }

attach() {
  local file=$1 dev n try
  dev=$(attached "$file"); [ -n "$dev" ] && { echo "$dev"; return; }
  for try in 1 2 3 4 5; do
    dev=$(losetup -f) || return 1           # first free loop device (allocated through /dev/loop-control)
    n=${dev#/dev/loop}
    [ -e "$dev" ] || mknod -m 0660 "$dev" b 7 "$n"   # hosts without udev have only loop0..7 as nodes
    if losetup "$dev" "$file" 2>/dev/null; then echo "$dev"; return; fi
    sleep 0.$((RANDOM % 9 + 1))             # another user took it first: try the next one
  done
  echo "loops.sh: cannot attach $file" >&2; return 1
}

case $cmd in
  up)
    for d in "${DISKS[@]}"; do
      f=$state/disk-$d.img
      if [ ! -f "$f" ]; then
        truncate -s 512M "$f"
        case $d in
          c) tmp=$(mktemp -d); echo "do not lose me" >"$tmp/precious.txt"
             mkfs.ext4 -q -F -L precious -d "$tmp" "$f"; rm -rf "$tmp" ;;
          f) # An MBR (dos) partition table with one 64 MiB Linux partition, written byte by byte
             # (the host may lack sfdisk/parted).
             python3 - "$f" <<'PY'
import struct, sys
entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 2048, 131072)
with open(sys.argv[1], "r+b") as disk:
    disk.seek(440)
    disk.write(struct.pack("<I", 0x5EED5EED) + b"\0\0" + entry + b"\0" * 48 + b"\x55\xaa")
PY
             ;;
        esac
      fi
    done
    printf '{'
    sep=
    for d in "${DISKS[@]}"; do printf '%s"%s": "%s"' "$sep" "$d" "$(attach "$state/disk-$d.img")"; sep=', '; done
    printf '}\n' ;;
  down)
    for d in "${DISKS[@]}"; do
      f=$state/disk-$d.img
      [ -f "$f" ] || continue
      while dev=$(attached "$f") && [ -n "$dev" ]; do losetup -d "$dev"; done
      rm -f "$f"
    done ;;
  *) echo "usage: $0 up|down STATE_DIR" >&2; exit 2 ;;
esac
