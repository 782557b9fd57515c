#!/usr/bin/env bash
# Packs the CUDA tests, implicit-et's test, implicit-bench, implicit-hopfield, implicit-compare and implicit-et of a
# build tree, stripped, with the
# shared libraries they need apart from glibc, libstdc++ and CUDA's (which the
# GPU machine brings), into DIR for scripts/device-check.sh.
#   scripts/device-pack.sh BUILD_DIR DIR
# The pack (about 89 MB) is also written as DIR.tar.xz (about 21 MB), which
# is what travels to a GPU machine (the device tool carries at most 64 MiB; both
# .devcarry and .devcarry.tar.xz are ignored by git, so name the archive in the
# tool's `carry`), and scripts/device-check.sh unpacks it there.
set -eu
build=${1:?usage: scripts/device-pack.sh BUILD_DIR DIR}
dir=${2:?usage: scripts/device-pack.sh BUILD_DIR DIR}
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
cp "$build"/test/cuda_*test "$build"/test/apps_et_test "$build"/apps/implicit-{bench,hopfield,compare,et} "$dir/bin/"
# Where the app test looks for implicit-et and the data (compiled-in paths).
(cd "$build" && pwd) > "$dir/build_dir"
(cd "$build" && sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' CMakeCache.txt) > "$dir/source_dir"
strip "$dir"/bin/*
for b in "$dir"/bin/*; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libdl|libpthread|librt)[.-]|cuda|cublas' |
  xargs -I{} cp -L {} "$dir/lib/"
du -sh "$dir"
rm -f "$dir.tar.xz"
# (relative to its parent, so that it unpacks as DIR beside the archive wherever DIR was)
tar -I 'xz -T0 -6' -cf "$dir.tar.xz" -C "$(dirname "$dir")" "$(basename "$dir")"
du -sh "$dir.tar.xz"
