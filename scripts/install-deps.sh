#!/usr/bin/env bash
# Installs the Debian packages libimplicit needs (idempotent: does nothing when
# they are all present). CUDA is optional and not installed here: the build
# uses nvcc from /usr/local/cuda when it exists. Three groups are optional:
# Clang (clang-14, libfuzzer-14-dev, libomp-14-dev: the fuzzing harnesses of
# scripts/fuzz.sh, and the compiler of scripts/test.sh's sanitizer pass) and
# PyTorch (python3-torch; implicit.torch): when apt cannot install one, the
# script says so, and fuzzing is skipped / the sanitizer pass uses g++ / the
# torch tests and example are skipped; SUNDIALS and PETSc (libsundials-dev,
# petsc-dev: the kinsol-* and petsc-* solver backends), without which those
# solvers are not built and their tests skip.
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config libeigen3-dev libceres-dev
          libboost-test-dev libboost-context-dev zlib1g-dev gnuplot-nox libcli11-dev nlohmann-json3-dev lld
          python3-dev pybind11-dev python3-numpy python3-pytest
          libopenmpi-dev openmpi-bin doxygen)
fuzzing=(clang-14 libfuzzer-14-dev libomp-14-dev)
torch=(python3-torch)
backends=(libsundials-dev petsc-dev)

missing_from() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_from "${packages[@]}")
mapfile -t missing_fuzzing < <(missing_from "${fuzzing[@]}")
mapfile -t missing_torch < <(missing_from "${torch[@]}")
mapfile -t missing_backends < <(missing_from "${backends[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_fuzzing[@]} -eq 0 ] && [ ${#missing_torch[@]} -eq 0 ] &&
   [ ${#missing_backends[@]} -eq 0 ]; then
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
install_optional() {  # <what it is for> <what is skipped without it> <packages...>
  local purpose=$1 skipped=$2
  shift 2
  [ $# -gt 0 ] || return 0
  echo "install-deps: installing optional $* ($purpose)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    echo "install-deps: optional $* not installed: $skipped"
}
install_optional "fuzzing, the sanitizer pass" \
  "scripts/fuzz.sh will be skipped, the sanitizer pass compiled by g++" "${missing_fuzzing[@]}"
install_optional "implicit.torch" "the torch tests and example will be skipped" "${missing_torch[@]}"
install_optional "the KINSOL and PETSc solver backends" \
  "the kinsol-* and petsc-* solvers will not be built, their tests skip" "${missing_backends[@]}"
echo "install-deps: done"
