#!/usr/bin/env bash
# Every Debian package cmake/dependencies.cmake needs to configure the build
# (its _weft_need lines) is installed by deploy/Dockerfile.weftd's build stage,
# so `deploy/build-image.sh` (the image built from source) cannot fall behind a
# new library again: it did when the nftables layer added libnftnl and libmnl.
# The CTest image_deps_test (label unit). Exit 1 names what is missing.
#   scripts/check-image-deps.sh [SOURCE_DIR]
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
deps=$src/cmake/dependencies.cmake docker=$src/deploy/Dockerfile.weftd
# The build stage: from the first FROM to the second.
stage=$(awk '/^FROM /{n++} n==1' "$docker")
[[ -n $stage ]] || { echo "check-image-deps: no build stage in $docker" >&2; exit 1; }
# _weft_need(VAR "pkg pkg" "what") or _weft_need(VAR pkg "what"): the packages.
pkgs=$(sed -n 's/^ *_weft_need([A-Za-z_]* \("[^"]*"\|[^ ]*\) .*/\1/p' "$deps" | tr -d '"' | tr ' ' '\n' | sort -u)
[[ -n $pkgs ]] || { echo "check-image-deps: no _weft_need line read from $deps" >&2; exit 1; }
# GoogleTest's mock library: dependencies.cmake names it in the message for
# a developer's machine; the image configures without it (no test is built).
missing=()
for p in $pkgs; do
  [[ $p == libgmock-dev ]] && continue
  grep -qw -- "$p" <<<"$stage" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "check-image-deps: deploy/Dockerfile.weftd's build stage does not install: ${missing[*]}" >&2
  echo "  (cmake/dependencies.cmake needs them; add them to the build stage's apt-get install)" >&2
  exit 1
fi
echo "check-image-deps: the build stage installs all $(wc -w <<<"$pkgs") package(s) of cmake/dependencies.cmake"
