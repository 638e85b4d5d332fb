#!/usr/bin/env bash
# Build gpupool's image (Dockerfile) with buildah, from a base made of Debian's packages: no container
# registry needed, only a Debian mirror and PyPI. With BASE set (e.g. python:3.11-slim-bookworm where a
# registry is reachable), that base is used instead and no Debian base is made.
#
#   scripts/image-build.sh                    -> localhost/gpupool:dev on localhost/gpupool-base:bookworm
#   IMAGE=registry.example.com/gpupool:1.0 BASE=docker.io/library/python:3.11-slim-bookworm scripts/image-build.sh
#   PIP_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt scripts/image-build.sh   # PyPI behind a TLS-inspecting proxy
#
# Needs root, buildah and mmdebstrap (scripts/components.sh installs them). buildah reads
# $STORAGE_DRIVER: set it to vfs where overlay mounts are refused (some sandboxes).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/gpupool:dev}
DEBIAN_BASE=localhost/gpupool-base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

if [ -z "${BASE:-}" ]; then
  BASE=$DEBIAN_BASE
  if [ -n "${REBUILD_BASE:-}" ] || ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    SECONDS=0
    work=$(mktemp -d /var/tmp/gpupool-base.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    # minbase: apt and dpkg, no init; python3.11-venv brings ensurepip's pip for the builder's venv
    mmdebstrap --quiet --variant=minbase --include=python3.11,python3.11-venv,ca-certificates \
      bookworm "$work/rootfs.tar" \
      "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
      "deb $SECURITY_MIRROR bookworm-security main"
    container=$(buildah from scratch)
    buildah add --quiet "$container" "$work/rootfs.tar" / >/dev/null
    buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env LANG=C.UTF-8 "$container"
    buildah commit --quiet --rm "$container" "$BASE" >/dev/null
    echo "▸ base $BASE made from Debian bookworm in ${SECONDS} s"
  fi
fi

secret=()
# the CA bundle of a TLS-inspecting proxy between here and PyPI: a build secret, in no layer
[ -n "${PIP_CA_BUNDLE:-}" ] && secret=(--secret "id=pip_ca,src=$PIP_CA_BUNDLE")
SECONDS=0
# chroot isolation: runs RUN steps where no container runtime starts (no user namespaces, no runc)
buildah bud --isolation chroot --layers "${secret[@]}" --build-arg "BASE=$BASE" --tag "$IMAGE" --file Dockerfile .
echo "▸ $IMAGE built on $BASE in ${SECONDS} s"
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$IMAGE"
