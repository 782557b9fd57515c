#!/usr/bin/env bash
# Installs the Debian packages libimplicit needs (idempotent: does nothing when
# they are all present). CUDA is optional and not installed here: the build
# uses nvcc from /usr/local/cuda when it exists. The fuzzing toolchain
# (clang-14, libfuzzer-14-dev; scripts/fuzz.sh) is optional too: when apt
# cannot install it, the script says so and fuzzing is skipped.
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config libeigen3-dev libceres-dev
          libboost-test-dev zlib1g-dev gnuplot-nox libcli11-dev nlohmann-json3-dev lld
          libadolc-dev python3-dev pybind11-dev python3-numpy python3-pytest)
optional=(clang-14 libfuzzer-14-dev)

missing_from() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_from "${packages[@]}")
mapfile -t missing_optional < <(missing_from "${optional[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "install-deps: installing optional ${missing_optional[*]} (fuzzing)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing_optional[@]}" >/dev/null ||
    echo "install-deps: optional ${missing_optional[*]} not installed: scripts/fuzz.sh will be skipped"
fi
echo "install-deps: done"
