#!/usr/bin/env bash
# Builds the storage test VM image (Debian bookworm + cloud kernel) with debootstrap, no registry.
# Cached under .cache/vm/<recipe hash>/ (the hash of this file): a rerun with an unchanged recipe
# returns at once. Prints the cache directory on stdout. Needs root, debootstrap, mkfs.ext4.
#   out: vmlinuz initrd.img root.img (raw ext4, the VM's /dev/vda) id_ed25519[.pub] (root's SSH key)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PKGS=linux-image-cloud-amd64,initramfs-tools,systemd,systemd-sysv,openssh-server,python3,lvm2,nfs-kernel-server,nfs-common,e2fsprogs,xfsprogs,iproute2,ifupdown,isc-dhcp-client,procps,sudo,util-linux,fdisk,kmod
MIRROR=${RLINFRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
IMG_SIZE=3G
key=$(sha256sum "$0" | cut -c1-16)
CACHE=${RLINFRA_VM_CACHE:-$ROOT/.cache/vm}
OUT=$CACHE/$key
log() { printf '[vm-image] %s\n' "$*" >&2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9   # two concurrent runs build once
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

log "building the VM image $key (debootstrap + cloud kernel, a few minutes)"
t0=$(date +%s)
work=$(mktemp -d /var/tmp/rlinfra-vm-build.XXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
debootstrap --variant=minbase --include="$PKGS" bookworm "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
  || { tail -30 "$work/debootstrap.log" >&2; exit 1; }

ssh-keygen -q -t ed25519 -N '' -C rlinfra-storage-vm -f "$work/id_ed25519"
install -d -m 0700 "$rootfs/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$rootfs/root/.ssh/authorized_keys"
echo rlinfra-vm >"$rootfs/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 rlinfra-vm\n' >"$rootfs/etc/hosts"
printf '/dev/vda / ext4 defaults,noatime 0 1\n' >"$rootfs/etc/fstab"
# Static address on qemu's user-mode network (the VM runs with restrict=on: no route out at all),
# set by systemd-networkd: unlike ifupdown it does not wait for "udevadm settle", which takes a
# minute under TCG.
mkdir -p "$rootfs/etc/systemd/network"
printf '[Match]\nName=eth0\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\n' >"$rootfs/etc/systemd/network/eth0.network"
printf 'auto lo\niface lo inet loopback\n' >"$rootfs/etc/network/interfaces"
chroot "$rootfs" systemctl enable systemd-networkd.service >/dev/null 2>&1
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' >"$rootfs/etc/ssh/sshd_config.d/rlinfra.conf"
# Nothing in the VM may reach a package archive: the roles must work with what is installed.
rm -f "$rootfs"/etc/apt/sources.list "$rootfs"/etc/apt/sources.list.d/*
# Faster boots: no timers, no waiting for a network that is static anyway.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         dpkg-db-backup.timer systemd-networkd-wait-online.service networking.service ifupdown-pre.service \
         serial-getty@ttyS0.service getty-static.service modprobe@fuse.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$u"
done
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

mkdir -p "$work/out"
cp "$rootfs"/boot/vmlinuz-* "$work/out/vmlinuz"
cp "$rootfs"/boot/initrd.img-* "$work/out/initrd.img"
truncate -s "$IMG_SIZE" "$work/out/root.img"
mkfs.ext4 -q -F -L vmroot -d "$rootfs" "$work/out/root.img"
mv "$work/id_ed25519" "$work/id_ed25519.pub" "$work/out/"
rm -rf "$OUT"; mv "$work/out" "$OUT"
touch "$OUT/.complete"
# Older recipes are useless once the recipe changed.
find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
log "image ready in $(( $(date +%s) - t0 )) s: $OUT"
echo "$OUT"
