#!/usr/bin/env bash
# The one command for Weft's benchmarks (issue 7; docs/performance.md).
#
#   bench/run.sh [--quick] [--out DIR] [--no-build] [--build-dir DIR] [weft-bench args...]
#
# Builds weft and the bench tools (Release, in build-bench/), runs every
# measurement in network namespaces it creates (prefix wb<pid>-, all removed
# at the end, on failure and on Ctrl-C; the root netns is never touched),
# prints the results JSON and a table with ratios against the reference
# plugins and the targets, and draws PNG/SVG plots with gnuplot into
# bench/results/<time>/ (git-ignored; bench/results/latest points at it).
#
# Exit status: 0 when the benchmark ran, whatever the targets say; non-zero
# only when the benchmark itself is broken. Needs root.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$SRC/build-bench"
OUT=""
QUICK=()
DO_BUILD=1
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick) ;;
    --out) OUT="$2"; shift ;;
    --no-build) DO_BUILD=0 ;;
    --build-dir) BUILD="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) EXTRA+=("$1") ;;
  esac
  shift
done

if [ "$(id -u)" -ne 0 ]; then
  echo "bench/run.sh: run as root (it creates network namespaces)" >&2
  exit 2
fi

if [ "$DO_BUILD" = 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    # -O2 as scripts/build.sh: at CMake's Release -O3 GCC 12 reports false -Wrestrict errors.
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" >&2
  fi
  ninja -C "$BUILD" -j"$(nproc)" weft weftd weft-bench weft-bench-noop weft-bench-floor weft-bench-weftd \
    weft-bench-netpol >&2
fi
for b in "$BUILD/cmd/weft/weft" "$BUILD/cmd/weftd/weftd" "$BUILD/bench/weft-bench" "$BUILD/bench/weft-bench-noop" \
         "$BUILD/bench/weft-bench-floor" "$BUILD/bench/weft-bench-weftd" "$BUILD/bench/weft-bench-netpol"; do
  [ -x "$b" ] || { echo "bench/run.sh: $b is missing (build it, or drop --no-build)" >&2; exit 1; }
done

if [ -z "$OUT" ]; then
  OUT="$SRC/bench/results/$(date -u +%Y%m%d-%H%M%S)${QUICK:+-quick}"
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

PREFIX="wb$$"
cleanup() {
  # Only what this run created: netns and dirs named $PREFIX-*, and any
  # process still inside those namespaces (an iperf3 server it started).
  local ns pid
  for ns in /run/netns/"$PREFIX"-*; do
    [ -e "$ns" ] || continue
    for pid in $(ip netns pids "$(basename "$ns")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$(basename "$ns")" 2>/dev/null || true
  done
  rm -rf --one-file-system /tmp/"$PREFIX"-* 2>/dev/null || true
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
rc=0
"$BUILD/bench/weft-bench" "${QUICK[@]}" --out "$OUT" --prefix "$PREFIX" --build-dir "$BUILD" --commit "$COMMIT" \
  ${EXTRA[@]+"${EXTRA[@]}"} || rc=$?

if [ -f "$OUT/plots.gp" ]; then
  if command -v gnuplot >/dev/null; then
    (cd "$OUT" && gnuplot plots.gp 2> gnuplot.log) || echo "bench/run.sh: gnuplot failed (see $OUT/gnuplot.log); numbers are unaffected" >&2
  else
    echo "bench/run.sh: gnuplot not installed (apt-get install gnuplot-nox); skipping plots" >&2
  fi
fi
case "$OUT" in
  "$SRC"/bench/results/*) ln -sfn "$(basename "$OUT")" "$SRC/bench/results/latest" ;;
esac
echo
echo "results: $OUT (results.json, raw.json, table.txt, *.png, *.svg)"
exit "$rc"
