#!/usr/bin/env bash
# Proves that the build enforces the layers (CTest layers_test, label unit;
# cmake/layers.cmake generates its input):
#   scripts/check-layers.sh <build>/layers <c++ compiler>
# For each layer with a library, from the layer's own directory, a file that
# includes one header of every other layer is preprocessed with the include
# path of the layer's library, as the build compiles the layer's files. A
# header of a layer below (scripts/layers.sh) must resolve, with everything
# it includes (for the product's layers; a test or bench helper library may
# link less); any other must fail with "No such file". Then the include
# graph of the sources is checked against the same DAG.
set -euo pipefail
dir=$1
cxx=$2
cd "$(dirname "$0")/.."
. scripts/layers.sh

declare -A SRC=() FLAGS=()
names=""
while read -r name target src; do
  [ -n "${DEPS[$name]+x}" ] || { echo "layers: $name ($target) is not in scripts/layers.sh" >&2; exit 1; }
  SRC[$name]=$src
  FLAGS[$name]=$(sed -n 's/^\(.\+\)$/-I\1/p' "$dir/$name.inc" | tr '\n' ' ')
  names="$names $name"
done < "$dir/layers.txt"
for l in $LAYERS; do
  case "$l" in cmd|tests) continue ;; esac  # no library: executables only
  [ -n "${SRC[$l]+x}" ] || { echo "layers: no library declares layer $l (weft_layer_headers)" >&2; exit 1; }
done

fail=0 checked=0
for from in $names; do
  allowed=" $(closure "$from") "
  for to in $names; do
    header=$(cd "${SRC[$to]}" && ls -1 -- *.h | head -n1)
    inc="$to/$header"
    # word splitting of FLAGS is wanted: one -I per directory, no spaces in them
    # shellcheck disable=SC2086
    if out=$(cd "${SRC[$from]}" && printf '#include "%s"\n' "$inc" |
             "$cxx" -std=c++20 -E -x c++ - -o /dev/null ${FLAGS[$from]} 2>&1); then
      ok=1
    else
      ok=0
    fi
    checked=$((checked + 1))
    case "$allowed" in
      *" $to "*)
        # A helper library may link less than its layer's programs.
        case " $PRODUCT_LAYERS " in *" $from "*) ;; *) continue ;; esac
        if [ $ok = 0 ]; then
          echo "FAIL: $from cannot include \"$inc\" although $to is below it:" >&2
          echo "$out" | head -n5 >&2
          fail=1
        fi ;;
      *)
        if [ $ok = 1 ]; then
          echo "FAIL: $from can include \"$inc\": $to is not below $from" >&2
          fail=1
        elif ! grep -qE "^<stdin>:1:.*$inc.*(No such file|not found)" <<< "$out"; then
          # (the probe's own include, not one inside a header it reached)
          echo "FAIL: $from sees \"$inc\" ($to is not below $from); it failed further in:" >&2
          echo "$out" | head -n5 >&2
          fail=1
        fi ;;
    esac
  done
done
scripts/include-graph.sh --check >/dev/null || fail=1
[ $fail = 1 ] || echo "layers: $checked includes across$names: each layer sees exactly its own and the layers below it"
exit $fail
