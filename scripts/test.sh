#!/usr/bin/env bash
# Runs every Weft test: unit tests, integration tests in network namespaces,
# and the benchmark's quick mode. Installs dependencies and builds first.
# Must run as root (it creates network namespaces; never touches the root one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${WEFT_BUILD_DIR:-build}

cleanup() {
  # Namespaces a crashed test left behind: tests name them w[tb]<pid>-...,
  # so remove only those whose process is gone (others may still be running).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^w[tb][0-9]+-' || true); do
    pid=${ns%%-*}; pid=${pid:2}
    kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
  done
  # Containers a crashed image test left (e2e_image_test names them wt<pid>-...).
  if command -v podman >/dev/null 2>&1; then
    for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null | grep -E '^wt[0-9]+-' || true); do
      pid=${c%%-*}; pid=${pid:2}
      kill -0 "$pid" 2>/dev/null || podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
    done
  fi
}
trap cleanup EXIT

phase() { printf '\n==== %s ====\n' "$*"; }

phase "unit, integration (network namespaces), real runtimes, benchmark quick mode"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@")

phase "unit, plugin and reliability suites under ASan+UBSan, with the crash points compiled in"
# One more build serves both: sanitizers, and WEFT_FAULT_INJECTION so the
# crash-point matrix and the soak's injected crashes run for real (the
# production build above ran the test that proves it ignores them).
WEFT_BUILD_DIR=build-asan
# Configured every time (cheap): a dir configured earlier without the crash
# points must not silently skip the crash matrix.
# Line tables only (-g1): enough for symbolized sanitizer reports, a
# quarter less compile time than full debug info.
cmake -S . -B $WEFT_BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DWEFT_SANITIZE=ON \
  -DWEFT_FAULT_INJECTION=ON >/dev/null
# The plugin itself is instrumented: the suites exec the sanitized binary.
SAN_TESTS=$( (cd "$BUILD_DIR" && { ctest -N -L unit; ctest -N -R '^(plugin|reliability)_'; }) |
            sed -n 's/^ *Test *#[0-9]*: //p' | sort -u)
# Tests run by a script (fake_apiserver_test) have no target of their own.
SAN_TARGETS=$(echo "$SAN_TESTS" | grep -v '^reliability_soak_short$' |
              grep -Fxf <(ninja -C $WEFT_BUILD_DIR -t targets all | sed -n 's/^\([^:/]*\): .*/\1/p') || true)
ninja -C $WEFT_BUILD_DIR -j"$(nproc)" weft weft_soak $SAN_TARGETS
(cd $WEFT_BUILD_DIR && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   ctest --output-on-failure --timeout 900 -R "^($(echo $SAN_TESTS | tr ' ' '|'))\$")

phase "fuzzers, 10 s each"
bash scripts/fuzz.sh 10
