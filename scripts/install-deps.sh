#!/usr/bin/env bash
# Installs the Debian packages libimplicit needs (idempotent: does nothing when
# they are all present). CUDA is optional and not installed here: the build
# uses nvcc from /usr/local/cuda when it exists.
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config libeigen3-dev libceres-dev
          libboost-test-dev zlib1g-dev gnuplot-nox libcli11-dev nlohmann-json3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
