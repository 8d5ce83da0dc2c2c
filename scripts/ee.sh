#!/usr/bin/env bash
# Builds the execution environment (EE) from execution-environment.yml with ansible-builder, with no registry and no
# Galaxy server in reach (docs/AWX.md):
#   - the base image is the project's own: Debian bookworm from debootstrap (python3 3.11, pip, ssh), with a small
#     shim that answers ansible-builder's dnf verbs with apt-get;
#   - the collections the roles use come from the controller's `ansible` package (the versions this checkout is tested
#     with), staged into the build and found installed by `ansible-galaxy collection install --offline`.
# Usage: scripts/ee.sh [TAG]   (default rlinfra/verl-ee:<galaxy.yml version>); prints the tag, the build's seconds and
# the image's size. Cached: the base is rebuilt only when this script changes, the EE only when its inputs do.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VERSION=$(sed -n 's/^version: *//p' galaxy.yml)
TAG=${1:-rlinfra/verl-ee:$VERSION}
BASE=localhost/rlinfra/ee-base:bookworm
CACHE=$ROOT/.cache/ee
PY=${PYTHON:-$ROOT/.venv/bin/python}
die() { echo "ee: $*" >&2; exit 1; }
command -v docker >/dev/null && docker info >/dev/null 2>&1 || die "no Docker engine runs here: start one (scripts/bootstrap.sh)"
[ -x "$ROOT/.venv/bin/ansible-builder" ] || die "ansible-builder is missing: pip install -r requirements-dev.txt into .venv"

base() {
  local want have rootfs
  want=$(declare -f base | sha256sum | cut -c1-16)
  have=$(docker image inspect -f '{{ index .Config.Labels "rlinfra.ee-base" }}' "$BASE" 2>/dev/null || true)
  [ "$want" = "$have" ] && return 0
  echo "[ee] building the base image $BASE (debootstrap)"
  rootfs=$(mktemp -d /var/tmp/rlinfra-ee-rootfs.XXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$rootfs'" RETURN
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,openssh-client,ca-certificates,git,tini \
    bookworm "$rootfs" http://deb.debian.org/debian >/var/tmp/rlinfra-ee-debootstrap.log 2>&1 \
    || { tail -20 /var/tmp/rlinfra-ee-debootstrap.log >&2; die "debootstrap failed"; }
  # An image is its own environment: pip installs into the system Python, as on ansible-builder's usual bases.
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  # ansible-builder's scripts call `$PKGMGR install -y [dnf options] PKGS` and `$PKGMGR clean all`.
  cat > "$rootfs/usr/local/sbin/pkgmgr" <<'SHIM'
#!/bin/sh
# dnf's verbs as ansible-builder calls them, done by apt-get (this EE's base is Debian).
set -e
verb=$1; shift
case $verb in
  install)
    pkgs=""
    for a in "$@"; do case $a in -y|--nodocs|--setopt|install_weak_deps=*|--enablerepo|epel) ;; *) pkgs="$pkgs $a" ;; esac; done
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs ;;
  clean) apt-get clean; rm -rf /var/lib/apt/lists/* ;;
  *) echo "pkgmgr: '$verb' is not one of the verbs ansible-builder uses (install, clean)" >&2; exit 2 ;;
esac
SHIM
  chmod 0755 "$rootfs/usr/local/sbin/pkgmgr"
  # Behind a TLS-inspecting proxy (as on this project's machines) the build's pip trusts what the host trusts: the
  # host's own CAs go into the base too (Debian's pip reads the system store).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the base"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/*
  tar -C "$rootfs" -c . | docker import -c "LABEL rlinfra.ee-base=$want" -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
}

# The collections execution-environment.yml names, as the controller's `ansible` package has them (an installed
# collection is its MANIFEST.json and FILES.json plus its files: what ansible-galaxy installs from a tarball).
stage_collections() {
  local site names n
  site=$("$PY" -c 'import ansible_collections, os; print(os.path.dirname(ansible_collections.__path__[0]))' 2>/dev/null) \
    || die "the controller's ansible package is missing (pip install -r requirements-dev.txt)"
  names=$("$PY" -c 'import sys, yaml; print(" ".join(c["name"] for c in yaml.safe_load(open(sys.argv[1]))["dependencies"]["galaxy"]["collections"]))' execution-environment.yml)
  rm -rf "$CACHE/collections"; mkdir -p "$CACHE/collections/ansible_collections"
  for n in $names; do
    [ -f "$site/ansible_collections/${n/.//}/MANIFEST.json" ] || die "collection $n is not in the controller's ansible package ($site)"
    mkdir -p "$CACHE/collections/ansible_collections/${n%%.*}"
    cp -a "$site/ansible_collections/${n/.//}" "$CACHE/collections/ansible_collections/${n/.//}"
  done
}

# One build at a time (the test suite's side lane builds ahead of the test that uses it).
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
want=$( { cat "$0" execution-environment.yml requirements.txt bindep.txt; "$PY" -c 'import ansible; print(ansible.__version__)'; } \
  | sha256sum | cut -c1-16)
if [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$want $TAG" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "[ee] have $TAG (cached), $(( $(docker image inspect -f '{{ .Size }}' "$TAG") / 1000000 )) MB"
  exit 0
fi
base
stage_collections
t=$(date +%s)
# --network host: dockerd runs without iptables here, so only the host's network reaches PyPI and Debian's archive.
"$ROOT/.venv/bin/ansible-builder" build -f execution-environment.yml -c "$CACHE/context" -t "$TAG" \
  --container-runtime docker --build-arg ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=--offline \
  --extra-build-cli-args "--network host" -v 1 > "$CACHE/build.log" 2>&1 \
  || { tail -30 "$CACHE/build.log" >&2; die "ansible-builder failed (whole log: $CACHE/build.log)"; }
size=$(docker image inspect -f '{{ .Size }}' "$TAG")
echo "$want $TAG" > "$CACHE/stamp"
echo "[ee] built $TAG in $(( $(date +%s) - t )) s, $(( size / 1000000 )) MB"
