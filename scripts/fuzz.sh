#!/usr/bin/env bash
# Builds the libFuzzer targets (in ./build-san, the clang ASan+UBSan tree the
# test command's sanitizer phase uses: scripts/build.sh --san) and runs each
# one, as many at a time as there are cores.
#   scripts/fuzz.sh            # 10 s per target (what the test command runs)
#   scripts/fuzz.sh 600        # 10 min per target
# New inputs that grow coverage are written to build-san/corpus/<target>;
# crashes to build-san/crash-*. Exit status is non-zero on any crash.
# WEFT_FUZZ_NO_BUILD=1 skips the build (scripts/test.sh has just built them).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-10}
B=build-san
TARGETS=$(sed -n 's/^weft_fuzzer(\([a-z_]*\).*/\1/p' tests/fuzz/CMakeLists.txt)
if [ "${WEFT_FUZZ_NO_BUILD:-0}" != 1 ]; then
  bash scripts/build.sh --san $TARGETS
fi

run() {
  local t=$1
  mkdir -p $B/corpus/$t
  (cd $B && ./tests/fuzz/$t -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
     -artifact_prefix=./crash-$t- corpus/$t ../tests/fuzz/corpus/$t) >$B/fuzz-$t.log 2>&1 || true
}
running=0
for t in $TARGETS; do
  if [ $running -ge "$(nproc)" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run "$t" &
  running=$((running + 1))
done
wait || true

rc=0
for t in $TARGETS; do
  echo "== $t (${SECONDS_PER_TARGET}s)"
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==.*ERROR|SUMMARY)|Done [0-9]+ runs" \
    $B/fuzz-$t.log || true
  if ls $B/crash-$t-* >/dev/null 2>&1; then
    echo "CRASH in $t: $(ls $B/crash-$t-*) (log: $B/fuzz-$t.log)"
    rc=1
  fi
done
exit $rc
