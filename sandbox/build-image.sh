#!/usr/bin/env bash
# Builds the sandbox/molecule base image without any registry: debootstrap + docker import.
# Cached: rebuilt only when this script changes (its hash is an image label).
set -euo pipefail
IMAGE=${RLINFRA_IMAGE:-rlinfra/debian-systemd:bookworm}
# git: experiments check their code out on the head (rlinfra.verl.code_checkout).
# nftables: the ray roles fence Ray's ports with it (rlinfra.verl.ray_firewall); the nodes cannot reach the archive.
PKGS=python3,python3-venv,python3-apt,git,systemd,systemd-sysv,dbus,sudo,iproute2,procps,openssh-server,lvm2,nfs-common,e2fsprogs,xfsprogs,util-linux,fdisk,ca-certificates,curl,less,kmod,nftables
want=$(sha256sum "$0" | cut -c1-16)
have=$(docker image inspect -f '{{ index .Config.Labels "rlinfra.pkgs" }}' "$IMAGE" 2>/dev/null || true)
[ "$want" = "$have" ] && exit 0

echo "[image] building $IMAGE (debootstrap, about a minute)"
rootfs=$(mktemp -d /var/tmp/rlinfra-rootfs.XXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include="$PKGS" bookworm "$rootfs" http://deb.debian.org/debian >/var/tmp/rlinfra-debootstrap.log 2>&1 \
  || { tail -20 /var/tmp/rlinfra-debootstrap.log >&2; exit 1; }
# Trim what a container never needs and what would slow every boot.
chroot "$rootfs" systemctl mask systemd-logind.service getty.target console-getty.service \
  systemd-udevd.service systemd-udev-trigger.service systemd-remount-fs.service \
  run-rpc_pipefs.mount rpc-gssd.service rpc-svcgssd.service >/dev/null 2>&1 || true
chroot "$rootfs" systemctl enable ssh.service >/dev/null 2>&1 || true
# Host keys are made per container at first boot, never baked into the image.
rm -f "$rootfs"/etc/ssh/ssh_host_*
cat > "$rootfs/etc/systemd/system/ssh-hostkeys.service" <<'UNIT'
[Unit]
Description=Generate SSH host keys
Before=ssh.service
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
[Install]
WantedBy=multi-user.target
UNIT
chroot "$rootfs" systemctl enable ssh-hostkeys.service >/dev/null 2>&1
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' > "$rootfs/etc/ssh/sshd_config.d/rlinfra.conf"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import - "$IMAGE-base" >/dev/null
# Slurm (slurmctld, slurmd, the client tools, munge) for tests/integration/test_sandbox_slurm.py, which configures
# and starts them: munge's set-up fails inside debootstrap, so apt installs them in a container of the base
# (host network: the archive is reachable from the host only). Disabled at boot; no key baked in (one per test).
# Podman (Debian's) for container mode (tests/integration/test_sandbox_container.py): the nodes cannot reach the
# archive to install it. containers.conf is the test bed's, not the collection's: podman nested in a Docker container
# without --privileged cannot make a session keyring, pivot_root or its own cgroups here (TESTBED.md).
# Debian's docker-registry and htpasswd (apache2-utils): the private registry the container test pulls from, started
# by the test in a container of this image (no registry is reachable from here).
# Debian's prometheus and prometheus-node-exporter (ray_metrics, on by default): the nodes cannot reach the archive to
# install them; disabled at boot, as on a fresh node the collection finds them installed but not running.
cid=$(docker create --network host "$IMAGE-base" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive;
  apt-get update -qq && apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge \
    podman crun conmon catatonit docker-registry apache2-utils prometheus prometheus-node-exporter >/dev/null &&
  systemctl disable slurmctld.service slurmd.service munge.service docker-registry.service prometheus.service \
    prometheus-node-exporter.service >/dev/null 2>&1;
  mkdir -p /etc/containers && printf "[containers]\nkeyring = false\ncgroups = \"disabled\"\n[engine]\nno_pivot_root = true\ncgroup_manager = \"cgroupfs\"\n" >/etc/containers/containers.conf;
  rm -f /etc/munge/munge.key; apt-get clean; rm -rf /var/lib/apt/lists/*; test -x /usr/sbin/slurmd && test -x /usr/bin/podman && test -x /usr/bin/docker-registry && \
  test -x /usr/bin/prometheus && test -x /usr/bin/prometheus-node-exporter')
docker start -a "$cid" >/dev/null || { docker rm "$cid" >/dev/null; echo "[image] installing Slurm failed" >&2; exit 1; }
docker commit -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' -c "LABEL rlinfra.pkgs=$want" \
  "$cid" "$IMAGE" >/dev/null
docker rm "$cid" >/dev/null
docker rmi "$IMAGE-base" >/dev/null
echo "[image] $IMAGE ready"
