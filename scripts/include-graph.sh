#!/usr/bin/env bash
# The include graph between Weft's layers, from the #include lines of the
# sources (docs/architecture.md, "Layers").
#   scripts/include-graph.sh           print "from -> to  count" per edge, lowest layer first
#   scripts/include-graph.sh --check   the same, then exit 1 if an edge is not in the DAG
#                                      or a file includes through "../"
# A file's layer is its directory: src/<layer>, tests/testutil, tests/e2e,
# the other tests (tests), bench, cmd. An include's layer is the first part
# of its path ("sys/netns.h" -> sys); a name without a directory is a header
# beside the file; <...> includes are the system's (<sys/socket.h>).
# --check also finds include cycles inside each src/<layer>: a file's unit is
# its name without .h/.cc (teardown.h and teardown.cc are one unit), tests
# and test helpers left out; units that include each other's headers, even
# through others, are one room in two files (tsort names the loop).
# The DAG is scripts/layers.sh. The build enforces it (each layer's library
# exposes only its own headers: cmake/layers.cmake), scripts/check-layers.sh
# (CTest layers_test) proves that with the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/layers.sh

check=0
[ "${1:-}" = "--check" ] && check=1

files=$(git ls-files -co --exclude-standard -- src cmd tests bench 2>/dev/null | grep -E '\.(h|cc)$' ||
        find src cmd tests bench -name '*.h' -o -name '*.cc')
bad=0
declare -A COUNT=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  from=$(layer_of_file "$f")
  while IFS= read -r inc; do
    case "$inc" in
      ../*|*/../*)
        echo "include-graph: $f includes \"$inc\" through ..: include by layer (\"<layer>/x.h\")" >&2
        bad=1; continue ;;
      */*) to=${inc%%/*} ;;
      *) continue ;;
    esac
    [ -n "${DEPS[$to]+x}" ] || continue
    [ "$to" = "$from" ] && continue
    COUNT["$from $to"]=$(( ${COUNT["$from $to"]:-0} + 1 ))
    if [ $check = 1 ]; then
      case " $(closure "$from") " in
        *" $to "*) ;;
        *) echo "include-graph: $f: $from includes \"$inc\" ($to is not below $from)" >&2; bad=1 ;;
      esac
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$f")
done <<< "$files"

for from in $LAYERS; do
  for to in $LAYERS; do
    n=${COUNT["$from $to"]:-}
    [ -n "$n" ] || continue
    mark=""
    case " $(closure "$from") " in *" $to "*) ;; *) mark="  UP (not in the DAG)" ;; esac
    printf '%-9s -> %-9s %4d%s\n' "$from" "$to" "$n" "$mark"
  done
done
[ $check = 1 ] || exit 0
for dir in src/*/; do
  layer=$(basename "$dir")
  edges=$(for f in "$dir"*.h "$dir"*.cc; do
            case "$f" in *_test.cc|*_testing.h|*_fake.*) continue ;; esac
            [ -f "$f" ] || continue
            unit=$(basename "$f"); unit=${unit%.*}
            sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$f" |
              while IFS= read -r inc; do
                case "$inc" in "$layer"/*) to=${inc#"$layer"/} ;; */*) continue ;; *) to=$inc ;; esac
                to=${to%.h}
                [ "$to" = "$unit" ] || echo "$unit $to"
              done
          done)
  [ -n "$edges" ] || continue
  if ! loop=$(tsort <<< "$edges" 2>&1 >/dev/null) || [ -n "$loop" ]; then
    echo "include-graph: an include cycle inside src/$layer:" $(sed -n 's/^tsort: //p' <<< "$loop" | grep -v 'input contains a loop') >&2
    bad=1
  fi
done
exit $bad
