#!/usr/bin/env bash
# Make the image's base locally from Debian's packages alone: mmdebstrap writes a minimal bookworm
# with Python 3.11, podman imports it as IMAGE. The machine's CA bundle and pip's cert setting go
# in too, so a build behind a TLS-inspecting egress proxy reaches PyPI as the host does.
#
#   deploy/fleet/make_base.sh IMAGE WORKDIR
set -euo pipefail
IMAGE=${1:?usage: make_base.sh IMAGE WORKDIR}
WORK=${2:?usage: make_base.sh IMAGE WORKDIR}
mkdir -p "$WORK"
if podman image exists "$IMAGE"; then
  echo "base $IMAGE: present"
  exit 0
fi
hooks=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  hooks+=(--customize-hook='copy-in /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs'
          --customize-hook='mkdir -p "$1/etc/xdg/pip"; printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"')
fi
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  "${hooks[@]}" bookworm "$WORK/base.tar"
podman import "$WORK/base.tar" "$IMAGE" >/dev/null
rm -f "$WORK/base.tar"
echo "base $IMAGE: made with mmdebstrap (Debian bookworm minbase + python3)"
