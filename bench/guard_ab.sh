#!/usr/bin/env bash
# The source guard's cost (issue 22 §1) as a paired A/B on the same pods:
#
#   flock /work/coord/heavy.lock bench/guard_ab.sh [--no-build] [--build-dir DIR] [--out DIR] [weft-bench-guard args...]
#
# e.g. --topologies weft-routed,weft-vxlan --pairs 60 --window-ms 400 --cpus 0,1
#
# Builds weft and weft-bench-guard (Release, build-bench/) unless --no-build,
# then runs weft-bench-guard (bench/guard_main.cc says every flag): the guard
# as ADD installed it ("on") against no guard table ("off"), switched before
# every short window, pairs in alternating order; prints the median on/off
# ratio with its bootstrap 95 % interval next to the 2 % target, and the load
# average. --baseline FILE keeps another ruleset on every node in both states
# (bench/guard_variants/kube-proxy.nft: what a Kubernetes node also runs);
# --interleave-ms MS measures TCP_RR on two identical nodes at once, one on
# and one off, alternating between them every MS (the steadier method,
# docs/performance.md, "Method"), and with --concurrent-stream the bulk stream of both
# at once (their senders sharing one CPU). Namespaces and dirs are named wb<pid>-*, removed at the end, on
# failure and on Ctrl-C; the root netns is never touched. Needs root.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$SRC/build-bench"
OUT=""
DO_BUILD=1
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift ;;
    --no-build) DO_BUILD=0 ;;
    --build-dir) BUILD="$2"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) EXTRA+=("$1") ;;
  esac
  shift
done
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/guard_ab.sh: run as root (it creates network namespaces)" >&2
  exit 2
fi
if [ "$DO_BUILD" = 1 ]; then
  # -O2 as bench/run.sh: at CMake's Release -O3 GCC 12 reports false -Wrestrict errors.
  [ -f "$BUILD/build.ninja" ] || cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" >&2
  ninja -C "$BUILD" -j"$(nproc)" weft weftd weft-bench-guard >&2
fi
for b in "$BUILD/cmd/weft/weft" "$BUILD/bench/weft-bench-guard"; do
  [ -x "$b" ] || { echo "bench/guard_ab.sh: $b is missing (build it, or drop --no-build)" >&2; exit 1; }
done
[ -n "$OUT" ] || OUT="$SRC/bench/results/guard-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"

PREFIX="wb$$"
cleanup() {
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

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
rc=0
"$BUILD/bench/weft-bench-guard" --out "$OUT" --prefix "$PREFIX" --build-dir "$BUILD" ${EXTRA[@]+"${EXTRA[@]}"} || rc=$?
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); results: $OUT/guard_ab.json"
exit "$rc"
