#!/usr/bin/env bash
# The reliability soak and crash matrix against a fault-injection build
# (crash points compiled in; see docs/reliability.md). Root; it only uses
# network namespaces and temp dirs it creates.
#
#   scripts/soak.sh                      # short: 3000 ops, 8 concurrent (~30 s)
#   scripts/soak.sh --ops 20000          # long soak (any weft_soak flags pass through)
#   scripts/soak.sh --ops 5000 --mode bridge --crash-permille 100 --seed 42
#   WEFT_SOAK_MATRIX=1 scripts/soak.sh   # also run the crash-point matrix and kill -9 suites first
#
# Prints the numbers the closing note needs: operations, crashes injected,
# leaks / duplicates / orphans found (must all be 0); exit status 0 only then.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${WEFT_FAULT_BUILD_DIR:-build-fault}
if [ ! -f $B/build.ninja ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_FAULT_INJECTION=ON >/dev/null
fi
ninja -C $B -j"$(nproc)" weft weft_soak reliability_crash_test reliability_kill_test
if [ "${WEFT_SOAK_MATRIX:-0}" = 1 ]; then
  $B/tests/integration/reliability/reliability_crash_test
  $B/tests/integration/reliability/reliability_kill_test
fi
exec $B/tests/integration/reliability/weft_soak "$@"
