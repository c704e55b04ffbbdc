#!/usr/bin/env bash
# Builds the libFuzzer targets (in ./build-san, the clang ASan+UBSan tree the
# test command's sanitizer phase uses: scripts/build.sh --san; or, with
# WEFT_FUZZ_FAST=1, in ./build-fuzz: UBSan only, -O2, for long runs) and runs
# each one, as many at a time as there are cores.
#   scripts/fuzz.sh            # 10 s per target (what the test command runs)
#   scripts/fuzz.sh 600        # 10 min per target
#   scripts/fuzz.sh --long     # the documented long run (docs/testing.md,
#                              # "Fuzzing"): each target until 10 million
#                              # executions or 12 min, one at a time, then the
#                              # corpus merged into the repository
# New inputs that grow coverage are written to build-san/corpus/<target>;
# crashes to build-san/crash-*. Exit status is non-zero when any target
# crashed, is missing, could not start, exited non-zero or before its time
# (without WEFT_FUZZ_RUNS), or printed a sanitizer report. An input
# that crashed a target, once fixed, goes to tests/fuzz/regressions/<target>/:
# every run reads it, and the corpus merge never drops it.
# Environment:
#   WEFT_FUZZ_NO_BUILD=1   skip the build (scripts/test.sh has just built them)
#   WEFT_FUZZ_FAST=1       ./build-fuzz instead of ./build-san (no ASan)
#   WEFT_FUZZ_JOBS=N       targets run at once (default: the number of cores)
#   WEFT_FUZZ_RUNS=N       stop a target after N executions (-runs; default: time only)
#   WEFT_FUZZ_TARGETS="a b"  only these targets
#   WEFT_FUZZ_TOTAL_SECONDS=S  with WEFT_FUZZ_JOBS=1: the targets one after another
#                          within S seconds in all, each given the time left divided
#                          by the targets left (replaces the per-target time)
#   WEFT_FUZZ_MERGE=1      afterwards minimise build-san/corpus/<t> together with
#                          tests/fuzz/corpus/<t> (-merge=1, edges only) into
#                          tests/fuzz/corpus/<t>: the corpus kept in the repository,
#                          a small set of inputs with every edge of both
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--long" ]; then
  shift
  : "${WEFT_FUZZ_RUNS:=10000000}" "${WEFT_FUZZ_JOBS:=1}" "${WEFT_FUZZ_MERGE:=1}"
  set -- "${1:-720}"
fi
SECONDS_PER_TARGET=${1:-10}
# A UBSan report is a crash (the trees are built with -fno-sanitize-recover
# as well), with the stack that led to it.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
JOBS=${WEFT_FUZZ_JOBS:-$(nproc)}
RUNS=${WEFT_FUZZ_RUNS:-}
B=build-san
TREE=--san
if [ "${WEFT_FUZZ_FAST:-0}" = 1 ]; then B=build-fuzz; TREE=--fuzz; fi
TARGETS=${WEFT_FUZZ_TARGETS:-$(sed -n 's/^weft_fuzzer(\([a-z_]*\).*/\1/p' tests/fuzz/CMakeLists.txt)}
if [ "${WEFT_FUZZ_NO_BUILD:-0}" != 1 ]; then
  bash scripts/build.sh $TREE $TARGETS
fi

run() {
  local t=$1 secs=$2
  mkdir -p $B/corpus/$t
  # Inputs that once crashed a target live in tests/fuzz/regressions/<t>/:
  # read on every run (so every run replays them first), never merged away.
  local reg=""
  [ -d tests/fuzz/regressions/$t ] && reg=../tests/fuzz/regressions/$t
  echo "$secs" >$B/fuzz-$t.secs
  rm -f $B/fuzz-$t.rc
  if [ ! -x $B/tests/fuzz/$t ]; then
    echo "fuzz.sh: $B/tests/fuzz/$t does not exist (not built?)" >$B/fuzz-$t.log
    echo 127 >$B/fuzz-$t.rc
    return 0
  fi
  local rc=0
  (cd $B && ./tests/fuzz/$t -max_total_time="$secs" ${RUNS:+-runs=$RUNS} -print_final_stats=1 \
     -artifact_prefix=./crash-$t- corpus/$t ../tests/fuzz/corpus/$t $reg) >$B/fuzz-$t.log 2>&1 || rc=$?
  echo "$rc" >$B/fuzz-$t.rc
}
running=0
ntargets=$(echo $TARGETS | wc -w)
if [ -n "${WEFT_FUZZ_TOTAL_SECONDS:-}" ] && [ "$JOBS" = 1 ]; then
  # One at a time within a total budget: a target that reaches its runs early
  # leaves its time to the ones after it.
  end=$((SECONDS + WEFT_FUZZ_TOTAL_SECONDS))
  left=$ntargets
  for t in $TARGETS; do
    run "$t" $(( (end - SECONDS) / left > 1 ? (end - SECONDS) / left : 1 ))
    left=$((left - 1))
  done
  TARGETS_DONE=1
fi
for t in $TARGETS; do
  [ -n "${TARGETS_DONE:-}" ] && break
  if [ $running -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run "$t" "$SECONDS_PER_TARGET" &
  running=$((running + 1))
done
wait || true

rc=0
for t in $TARGETS; do
  echo "== $t (${WEFT_FUZZ_TOTAL_SECONDS:+share of }${WEFT_FUZZ_TOTAL_SECONDS:-$SECONDS_PER_TARGET}s${RUNS:+, at most $RUNS runs})"
  grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|==.*ERROR|SUMMARY)|Done [0-9]+ runs" \
    $B/fuzz-$t.log || true
  if ls $B/crash-$t-* >/dev/null 2>&1; then
    echo "CRASH in $t: $(ls $B/crash-$t-*) (log: $B/fuzz-$t.log)"
    rc=1
  fi
  # Every other way a target can fail to have fuzzed: missing, not started,
  # a non-zero exit, a report that did not abort, or an end before its time.
  trc=$(cat $B/fuzz-$t.rc 2>/dev/null || echo "none")
  secs=$(cat $B/fuzz-$t.secs 2>/dev/null || echo 0)
  done_line=$(grep -aE '^Done [0-9]+ runs in [0-9]+ second' $B/fuzz-$t.log | tail -n 1 || true)
  took=$(echo "$done_line" | sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p')
  report=$(grep -aE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error: |SUMMARY: [A-Za-z]*Sanitizer' \
    $B/fuzz-$t.log | head -n 1 || true)
  if [ "$trc" != 0 ]; then
    echo "FAIL $t: exited with status $trc (log: $B/fuzz-$t.log): $(tail -n 1 $B/fuzz-$t.log)"
    rc=1
  elif [ -n "$report" ]; then
    echo "FAIL $t: a sanitizer report (log: $B/fuzz-$t.log): $report"
    rc=1
  elif [ -z "$done_line" ]; then
    echo "FAIL $t: never reported \"Done N runs\" (log: $B/fuzz-$t.log)"
    rc=1
  elif [ -z "$RUNS" ] && [ "${took:-0}" -lt $((secs - 1)) ]; then
    echo "FAIL $t: stopped after ${took}s of ${secs}s (log: $B/fuzz-$t.log)"
    rc=1
  fi
done

if [ "${WEFT_FUZZ_MERGE:-0}" = 1 ] && [ $rc = 0 ]; then
  for t in $TARGETS; do
    m=$B/corpus-merged/$t
    rm -rf "$m" && mkdir -p "$m"
    # -use_counters=0: an input is kept for a new edge, not for a new hit
    # count of one, so the corpus stays small (~60 kB for all seven).
    (cd $B && ./tests/fuzz/$t -merge=1 -use_counters=0 "corpus-merged/$t" "../tests/fuzz/corpus/$t" "corpus/$t") \
      >$B/merge-$t.log 2>&1 || { echo "merge of $t failed (log: $B/merge-$t.log)"; rc=1; continue; }
    rm -rf "tests/fuzz/corpus/$t" && mv "$m" "tests/fuzz/corpus/$t"
    echo "== $t corpus: $(ls tests/fuzz/corpus/$t | wc -l) inputs, $(du -sk tests/fuzz/corpus/$t | cut -f1) kB"
  done
fi
exit $rc
