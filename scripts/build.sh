#!/usr/bin/env bash
# Configures and builds Weft. Used by the demo and test commands; safe to run
# repeatedly.
#   scripts/build.sh [TARGET...]        Release into ./build (or $WEFT_BUILD_DIR)
#   scripts/build.sh --san [TARGET...]  the checking tree, ./build-san: clang,
#                                       ASan+UBSan, the crash points and the
#                                       libFuzzer targets (scripts/test.sh, fuzz.sh)
#   scripts/build.sh --fuzz [TARGET...] ./build-fuzz: clang -O2, libFuzzer and
#                                       UBSan without ASan, for long fuzz runs
#                                       (WEFT_FUZZ_FAST=1 scripts/fuzz.sh)
# Without TARGETs, everything. Compiles through ccache when it is installed
# (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

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

LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  # Paths relative to the source dir, and the build dir left out of the hash,
  # so a fresh clone (CI) reuses what another checkout compiled. The
  # sloppiness lets ccache cache files compiled against the precompiled
  # headers (cmake/pch.cmake).
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache")
fi

if [ "${1:-}" = "--san" ]; then
  shift
  BUILD_DIR=build-san
  # Configured every time (cheap): a dir configured earlier without the crash
  # points must not silently skip the crash matrix. One tree serves the
  # sanitizer suites and the fuzzers: every file carries ASan+UBSan and
  # libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link, inert
  # outside a fuzzer); only the fuzz targets link libFuzzer itself. -O1: the
  # fuzzers need it to be worth running and the suites run faster than at
  # -O0; line tables only (-g1): enough for symbolized reports.
  CC=clang CXX=clang++ cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DWEFT_SANITIZE=ON -DWEFT_FUZZ=ON -DWEFT_FAULT_INJECTION=ON \
    "${LAUNCHER[@]}" >/dev/null
elif [ "${1:-}" = "--fuzz" ]; then
  shift
  BUILD_DIR=build-fuzz
  CC=clang CXX=clang++ cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -g1" -DWEFT_FUZZ=ON -DWEFT_FUZZ_ASAN=OFF "${LAUNCHER[@]}" >/dev/null
else
  BUILD_DIR=${WEFT_BUILD_DIR:-build}
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    # Release at -O2 (CMake's Release is -O3, where GCC 12 reports false
    # -Wrestrict errors in string concatenations); no debug info, which would
    # cost a quarter of the compile time.
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${WEFT_BUILD_TYPE:-Release} \
      -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" "${LAUNCHER[@]}" >/dev/null
  fi
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" "$@"
