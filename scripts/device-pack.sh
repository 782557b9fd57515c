#!/usr/bin/env bash
# Packs the CUDA tests, implicit-bench, implicit-hopfield and implicit-compare of a build tree, stripped, with the
# shared libraries they need apart from glibc, libstdc++ and CUDA's (which the
# GPU machine brings), into DIR for scripts/device-check.sh.
#   scripts/device-pack.sh BUILD_DIR DIR
set -eu
build=${1:?usage: scripts/device-pack.sh BUILD_DIR DIR}
dir=${2:?usage: scripts/device-pack.sh BUILD_DIR DIR}
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
cp "$build"/test/cuda_*test "$build"/apps/implicit-{bench,hopfield,compare} "$dir/bin/"
strip "$dir"/bin/*
for b in "$dir"/bin/*; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libdl|libpthread|librt)[.-]|cuda|cublas' |
  xargs -I{} cp -L {} "$dir/lib/"
du -sh "$dir"
