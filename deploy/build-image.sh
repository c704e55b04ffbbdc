#!/usr/bin/env bash
# Builds the weftd image (deploy/Dockerfile.weftd) from Debian packages only,
# with no container registry (docs/deploy.md):
#   1. a Debian 12 (bookworm) minbase root filesystem made by mmdebstrap,
#      kept as a tarball in the cache dir and reused by later runs;
#   2. that tarball imported into podman as the base image;
#   3. `podman build` of the multi-stage Dockerfile on that base, from the
#      work tree's tracked (and untracked, not ignored) files, or from a
#      commit with --ref.
# The image is labelled with a hash of what goes into the binaries (every
# CMakeLists.txt, src/, cmd/, VERSION, the Dockerfile): when an image with
# that tag and hash exists, nothing is built. Its tag is the release in
# VERSION; its binaries report the commit built (weftd --version), with
# "-dirty" for a work tree that differs from HEAD.
#
#   sudo deploy/build-image.sh                  # -> localhost/weft/weftd:<VERSION> (0.4.0)
#   sudo deploy/build-image.sh --refresh-base   # new base rootfs (security updates)
#   sudo deploy/build-image.sh --force          # rebuild even when up to date
#   sudo deploy/build-image.sh --ref HEAD       # build a commit, not the work tree
#   sudo deploy/build-image.sh --prebuilt build # the runtime stage only, around
#                                               # build/'s weftd, weftctl and plugin (what
#                                               # e2e_image_test runs: the binaries
#                                               # the other suites test, no compile)
#
# Environment: WEFT_IMAGE (tag), WEFT_IMAGE_CACHE (cache dir, default
# /var/cache/weft-image), WEFT_DEBIAN_MIRROR (mmdebstrap MIRROR arguments,
# space-separated, e.g. a local mirror URI or a sources file; default
# mmdebstrap's own, with bookworm-updates and -security).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(cat VERSION)
IMAGE=${WEFT_IMAGE:-localhost/weft/weftd:$VERSION}
CACHE=${WEFT_IMAGE_CACHE:-/var/cache/weft-image}
BASE_IMAGE=localhost/weft-debian:bookworm
BASE_TAR=$CACHE/debian-bookworm-minbase.tar
# Podman's default rlimits ask for more than a process without
# CAP_SYS_RESOURCE may set (sandboxes, some CI runners): RUN steps get
# limits every host allows.
ULIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

refresh_base=0
force=0
ref=""
prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --refresh-base) refresh_base=1 ;;
    --force) force=1 ;;
    --ref) ref=${2:?--ref needs a commit}; shift ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a build dir}; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$(id -u)" -ne 0 ]; then
  echo "build-image.sh: run as root (mmdebstrap and rootful podman)" >&2
  exit 1
fi
for tool in podman mmdebstrap; do
  command -v "$tool" >/dev/null || {
    echo "build-image.sh: $tool is missing (Debian package: $tool; scripts/setup.sh installs it)" >&2
    exit 1
  }
done
# A tree without git (an exported copy) is built from its files as they are.
in_git=0
command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 && in_git=1
if [ -n "$ref" ] && [ "$in_git" -eq 0 ]; then
  echo "build-image.sh: --ref needs git and a git work tree (Debian package: git)" >&2
  exit 2
fi

mkdir -p "$CACHE"
# One build at a time (the test suite and a developer may both ask).
exec 9>"$CACHE/lock"
flock 9

t0=$SECONDS
say() { printf 'build-image.sh: [%3ds] %s\n' $((SECONDS - t0)) "$*"; }
fail() {
  say "$1; the last lines of $2:" >&2
  tail -n 40 "$2" >&2
  exit 1
}

# What goes into the binaries, hashed: the Dockerfile, every CMakeLists.txt,
# src/ and cmd/ (tests and docs change nothing in the image).
in_image() {
  case "$1" in
    deploy/Dockerfile.weftd|CMakeLists.txt|*/CMakeLists.txt|cmake/*|src/*|cmd/*|VERSION) return 0 ;;
  esac
  return 1
}
if [ -n "$prebuilt" ]; then
  if [ -n "$ref" ]; then echo "build-image.sh: --prebuilt and --ref exclude each other" >&2; exit 2; fi
  for b in cmd/weftd/weftd cmd/weftctl/weftctl cmd/weft/weft; do
    [ -x "$prebuilt/$b" ] || { echo "build-image.sh: --prebuilt $prebuilt has no $b (scripts/build.sh weftd weftctl weft)" >&2; exit 2; }
  done
  # What goes into this image: the three binaries and the Dockerfile's runtime stage.
  SOURCE_HASH=prebuilt-$(cat "$prebuilt/cmd/weftd/weftd" "$prebuilt/cmd/weftctl/weftctl" "$prebuilt/cmd/weft/weft" \
                           deploy/Dockerfile.weftd |
                         sha256sum | cut -c1-16)
elif [ -n "$ref" ]; then
  git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || { echo "build-image.sh: no commit $ref" >&2; exit 2; }
  SOURCE_HASH=$(git ls-tree -r "$ref" | while read -r _ _ blob path; do
                  if in_image "$path"; then printf '%s  %s\n' "$blob" "$path"; fi; done |
                sha256sum | cut -c1-16)
elif [ "$in_git" -eq 1 ]; then
  mapfile -d '' FILES < <(git ls-files -z -co --exclude-standard)
  # The same "blob  path" lines as git ls-tree prints for a commit.
  mapfile -t IMG < <(for f in "${FILES[@]}"; do if in_image "$f" && [ -f "$f" ]; then printf '%s\n' "$f"; fi; done |
                     LC_ALL=C sort)
  SOURCE_HASH=$(paste -d' ' <(printf '%s\n' "${IMG[@]}" | git hash-object --stdin-paths) \
                  <(printf ' %s\n' "${IMG[@]}") | sha256sum | cut -c1-16)
else
  # Every file but build dirs, .git and what .gitignore names.
  mapfile -d '' FILES < <(find . \( -path ./.git -o -path './build*' -o -path ./bench/results \) -prune -o \
                            -type f -printf '%P\0')
  mapfile -t IMG < <(for f in "${FILES[@]}"; do if in_image "$f"; then printf '%s\n' "$f"; fi; done | LC_ALL=C sort)
  SOURCE_HASH=$( (cd . && printf '%s\0' "${IMG[@]}" | xargs -0 sha256sum) | sha256sum | cut -c1-16)
fi

if [ "$force" -eq 0 ] && [ "$refresh_base" -eq 0 ] &&
   [ "$(podman image inspect --format '{{index .Labels "io.weft.source"}}' "$IMAGE" 2>/dev/null)" = "$SOURCE_HASH" ]; then
  say "$IMAGE is up to date (source $SOURCE_HASH)"
  exit 0
fi

# 1+2. The base image.
if [ "$refresh_base" -eq 1 ] || ! podman image exists "$BASE_IMAGE"; then
  if [ "$refresh_base" -eq 1 ] || [ ! -s "$BASE_TAR" ]; then
    say "making a Debian 12 minbase root filesystem with mmdebstrap (about a minute)"
    # The merged-usr hook merges /usr itself: no usrmerge package, which
    # would pull perl into the image.
    # shellcheck disable=SC2086
    mmdebstrap --variant=minbase --format=tar \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --aptopt='Acquire::Languages "none"' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      bookworm "$BASE_TAR.tmp" ${WEFT_DEBIAN_MIRROR:-} >"$CACHE/mmdebstrap.log" 2>&1 ||
      fail "mmdebstrap failed" "$CACHE/mmdebstrap.log"
    mv "$BASE_TAR.tmp" "$BASE_TAR"
  fi
  say "importing $BASE_TAR as $BASE_IMAGE"
  podman import --quiet --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
fi

# The commit the binaries report: the context has no .git.
COMMIT_ARG=()
if [ -n "$prebuilt" ]; then
  :  # its binaries carry theirs
elif [ -n "$ref" ]; then
  COMMIT_ARG=(--build-arg WEFT_COMMIT="$(git rev-parse --short=12 "$ref^{commit}")")
elif [ "$in_git" -eq 1 ]; then
  commit=$(git rev-parse --short=12 HEAD)
  git diff --quiet HEAD -- || commit=$commit-dirty
  COMMIT_ARG=(--build-arg WEFT_COMMIT="$commit")
fi

# 3. The image, from a context of the tree's files (never build/ or .git).
CTX=$(mktemp -d /var/tmp/weft-image-ctx.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
if [ -n "$prebuilt" ]; then
  # The Dockerfile's runtime stage, its binaries taken from the context.
  mkdir -p "$CTX/prebuilt" "$CTX/deploy"
  strip -o "$CTX/prebuilt/weftd" "$prebuilt/cmd/weftd/weftd"
  strip -o "$CTX/prebuilt/weftctl" "$prebuilt/cmd/weftctl/weftctl"
  strip -o "$CTX/prebuilt/weft" "$prebuilt/cmd/weft/weft"
  awk '/^ARG BASE=/ { print } /^FROM \$\{BASE\}$/ { runtime = 1 } runtime' deploy/Dockerfile.weftd |
    sed -e 's|^COPY --from=build /build/cmd/weftd/weftd |COPY prebuilt/weftd |' \
        -e 's|^COPY --from=build /build/cmd/weftctl/weftctl |COPY prebuilt/weftctl |' \
        -e 's|^COPY --from=build /build/cmd/weft/weft |COPY prebuilt/weft |' >"$CTX/deploy/Dockerfile.weftd"
  if grep -q -- '--from=build' "$CTX/deploy/Dockerfile.weftd" || ! grep -q '^COPY prebuilt/weftd ' "$CTX/deploy/Dockerfile.weftd"; then
    echo "build-image.sh: --prebuilt cannot find the runtime stage's COPY lines in deploy/Dockerfile.weftd" >&2
    exit 1
  fi
elif [ -n "$ref" ]; then
  git archive "$ref" | tar -C "$CTX" -xf -
else
  printf '%s\0' "${FILES[@]}" | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$CTX" -xf -
fi
if [ -n "$prebuilt" ]; then
  say "podman build $IMAGE around $prebuilt's binaries ($SOURCE_HASH)"
else
  say "podman build $IMAGE (source $SOURCE_HASH; the first build compiles for several minutes)"
fi
podman build --network host "${ULIMITS[@]}" --layers --force-rm \
  -f "$CTX/deploy/Dockerfile.weftd" --build-arg BASE="$BASE_IMAGE" "${COMMIT_ARG[@]}" \
  --label io.weft.source="$SOURCE_HASH" -t "$IMAGE" "$CTX" >"$CACHE/build.log" 2>&1 ||
  fail "podman build failed" "$CACHE/build.log"
# The images earlier builds left untagged.
podman image prune -f --filter label=io.weft.source >/dev/null 2>&1 || true
say "built $IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
