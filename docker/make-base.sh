#!/usr/bin/env bash
# Build a minimal Debian + python3 base image without any image registry:
# debootstrap a root file system from the machine's apt mirror and `docker import` it.
# Usage (as root): docker/make-base.sh [IMAGE_TAG]   (default local/debian-python:bookworm)
# Env: DEBIAN_SUITE (default: the host's VERSION_CODENAME), DEBIAN_MIRROR (default: the
# first URIs/deb line of the host's apt sources), KEEP_ROOTFS=1 keeps the temporary
# folder (rootfs/ and debootstrap.log).
set -euo pipefail
TAG="${1:-local/debian-python:bookworm}"
SUITE="${DEBIAN_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}"

find_mirror() {
  local f line
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    line=$(awk '/^URIs:/ {print $2; exit}' "$f")
    case "$line" in *debian-security*|"") ;; *) echo "$line"; return ;; esac
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    line=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' "$f")
    [ -n "$line" ] && { echo "$line"; return; }
  done
  echo "http://deb.debian.org/debian"
}
MIRROR="${DEBIAN_MIRROR:-$(find_mirror)}"

command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }

# unique work folders (mktemp -d, mode 0700; under $TMPDIR if set): the root file system and,
# beside it, the debootstrap log (shown if debootstrap fails, removed with the folder)
WORK=$(mktemp -d -t fl-make-base.XXXXXX)
ROOTFS="$WORK/rootfs"
LOG="$WORK/debootstrap.log"
mkdir -m 0755 "$ROOTFS"   # the image's / (tar -C "$ROOTFS" .)
cleanup() { [ "${KEEP_ROOTFS:-0}" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

echo "[make-base] debootstrap $SUITE from $MIRROR into $ROOTFS"
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates,libgomp1 \
  "$SUITE" "$ROOTFS" "$MIRROR" >"$LOG" 2>&1 \
  || { tail -20 "$LOG" >&2; exit 1; }

# slim down: package lists, caches, docs, man pages, locales
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
  "$ROOTFS"/usr/share/locale/* "$ROOTFS"/var/log/*.log "$ROOTFS"/tmp/*

echo "[make-base] docker import -> $TAG"
tar -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$TAG" >/dev/null
docker images "$TAG"
