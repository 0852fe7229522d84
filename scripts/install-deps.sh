#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when something is missing,
# so repeated `make` runs cost nothing. Needs root (or sudo) the first time.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v python3 >/dev/null || need+=(python3)
command -v unzip >/dev/null || need+=(unzip)
pkg-config --exists libpcre2-8 2>/dev/null || need+=(libpcre2-dev)
pkg-config --exists liburing 2>/dev/null || need+=(liburing-dev)
[ -n "${MZ_WITH_FUZZ:-}" ] && ! command -v clang >/dev/null && need+=(clang libclang-rt-14-dev)

[ ${#need[@]} -eq 0 ] && exit 0

echo "mzcache: installing Debian packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "mzcache: need root or sudo to install ${need[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
