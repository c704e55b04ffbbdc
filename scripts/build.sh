#!/usr/bin/env bash
# Configures and builds Weft into ./build (or $WEFT_BUILD_DIR). Used by the
# demo and test commands; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${WEFT_BUILD_DIR:-build}
# The tools first, each named with its Debian package (CMake's configure
# names every missing library the same way: cmake/dependencies.cmake).
missing=""
for t in cmake:cmake ninja:ninja-build g++:build-essential pkg-config:pkg-config; do
  command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
if [ -n "$missing" ]; then
  echo "build.sh: missing Debian packages:$missing (sudo scripts/setup.sh installs everything)" >&2
  exit 1
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # Release at -O2 (CMake's Release is -O3, where GCC 12 reports false
  # -Wrestrict errors in string concatenations); no debug info, which would
  # cost a quarter of the compile time.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${WEFT_BUILD_TYPE:-Release} \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" >/dev/null
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" "$@"
