#!/usr/bin/env bash
# What the fleet check needs from Debian: haproxy and prometheus (with promtool) to run at all;
# podman, buildah, mmdebstrap and runc for the image part (without them the check runs the
# image's command line as a process instead). Installs what is missing with apt-get when run as
# root; exit status 1 (and a line saying why) when haproxy or prometheus is still missing.
set -uo pipefail
need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
want=()
if [ "${FLEET_IMAGE:-1}" != 0 ]; then
  for tool in podman buildah mmdebstrap runc; do
    command -v "$tool" >/dev/null || want+=("$tool")
  done
fi
missing=("${need[@]}" "${want[@]}")
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "fleet-check: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || echo "fleet-check: apt-get update failed" >&2
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
      || echo "fleet-check: could not install ${need[*]}" >&2
    for pkg in "${want[@]}"; do  # one by one: a missing optional package costs only itself
      apt-get install -y -qq "$pkg" >/dev/null 2>&1 \
        || echo "fleet-check: could not install $pkg (the image part will say so)" >&2
    done
  else
    echo "fleet-check: missing ${missing[*]} and not root (or no apt-get): cannot install" >&2
  fi
fi
command -v haproxy >/dev/null && command -v prometheus >/dev/null && command -v promtool >/dev/null
