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
  # Namespaces and temp dirs a crashed test may have left (prefix wt<pid>).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^w[tb][0-9]+-' || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT

cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 "$@"
