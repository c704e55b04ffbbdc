#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each one.
#   scripts/fuzz.sh            # 10 s per target (what the test command runs)
#   scripts/fuzz.sh 600        # 10 min per target
# New inputs that grow coverage are written to build-fuzz/corpus/<target>;
# crashes to build-fuzz/crash-*. Exit status is non-zero on any crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-10}
B=build-fuzz
if [ ! -f $B/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
    -DWEFT_FUZZ=ON >/dev/null
fi
TARGETS=$(sed -n 's/^weft_fuzzer(\([a-z_]*\).*/\1/p' tests/fuzz/CMakeLists.txt)
ninja -C $B -j"$(nproc)" $TARGETS
rc=0
for t in $TARGETS; do
  mkdir -p $B/corpus/$t
  echo "== $t (${SECONDS_PER_TARGET}s)"
  if ! (cd $B && ./tests/fuzz/$t -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
        -artifact_prefix=./crash-$t- corpus/$t ../tests/fuzz/corpus/$t 2>&1 | \
        grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==.*ERROR|SUMMARY)|Done [0-9]+ runs"); then
    :
  fi
  if ls $B/crash-$t-* >/dev/null 2>&1; then echo "CRASH in $t: $(ls $B/crash-$t-*)"; rc=1; fi
done
exit $rc
