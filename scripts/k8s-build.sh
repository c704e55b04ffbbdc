#!/usr/bin/env bash
# Builds the pinned Kubernetes (tests/k8s/versions.env) from the Go module
# proxy into build-k8s/bin (or $WEFT_K8S_BIN): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl,
# agnhost, regression-issue-74839 (an e2e image's binary), the ginkgo CLI
# (parallel e2e runs), etcd and kubedns (the cluster DNS) in ONE `go build`,
# the sig-network e2e test binary
# (e2e-network.test, `go test -c`), then the pause binary from the pause.c
# shipped in the k8s.io/kubernetes module zip; then, as root, the images
# the nodes import (scripts/k8s-images.sh, build-k8s/images).
#
# Go's module and build caches stay at Go's defaults under $HOME, so a fresh
# clone on the same machine (CI) finds them warm; nothing up to date is
# rebuilt (go build compares each binary's build ID and skips its link; the
# version stamp is fixed per pinned version, so it does not change the IDs).
# A cold build takes tens of minutes on 2 cores; WEFT_K8S_NICE (default 10)
# is the niceness it runs at.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mod=$repo/tests/k8s
# shellcheck source=../tests/k8s/versions.env
. "$mod/versions.env"
out=${WEFT_K8S_BIN:-$repo/build-k8s/bin}
nice=(nice -n "${WEFT_K8S_NICE:-10}")
mkdir -p "$out"
command -v go >/dev/null || { echo "k8s-build: go is not installed" >&2; exit 1; }

# The version stamp of hack/lib/version.sh (kube::version::ldflags): both
# client-go's and component-base's version packages. The module zip carries no
# git commit; the build date is the commit date of versions.env (constant for a
# pinned version, so the stamp never forces a relink).
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
date=$(git -C "$repo" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ -- tests/k8s/versions.env 2>/dev/null || true)
date=${date:-1970-01-01T00:00:00Z}
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=$date"
done

# The commands: go.mod's tool directives (gen-gomod.sh writes them from its one
# list), our etcd main and our cluster DNS (tests/k8s/cmd/kubedns).
mapfile -t pkgs < <(awk '/^tool \(/ { t = 1; next } t && /^\)/ { t = 0 } t { print $1 }' "$mod/go.mod")
(( ${#pkgs[@]} > 0 )) || { echo "k8s-build: no tool directives in $mod/go.mod" >&2; exit 1; }
pkgs+=(./cmd/etcd ./cmd/kubedns)
start=$(date +%s)
# -mod=readonly: go.mod and go.sum are checked in and must already be complete.
(cd "$mod" && CGO_ENABLED=0 "${nice[@]}" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}")

# The upstream e2e suite focused on sig-network (tests/k8s/e2e: NetworkPolicy,
# the network conformance tests): a test binary, so `go test -c`, the one
# other Go invocation; it shares the build cache and skips an up-to-date link
# the same way. WEFT_K8S_E2E=0 leaves it out.
if [[ ${WEFT_K8S_E2E:-1} != 0 ]]; then
    (cd "$mod" && CGO_ENABLED=0 "${nice[@]}" go test -c -mod=readonly -trimpath -ldflags "$ldflags" \
        -o "$out/e2e-network.test" ./e2e)
fi

# The ClusterNetworkPolicy conformance suite (sigs.k8s.io/network-policy-api's
# conformance package, pinned in tests/k8s/cnpconformance, a module of its own):
# scripts/k8s-conformance.sh runs it. WEFT_K8S_CNP=0 leaves it out.
if [[ ${WEFT_K8S_CNP:-1} != 0 ]]; then
    (cd "$mod/cnpconformance" && CGO_ENABLED=0 "${nice[@]}" go test -c -mod=readonly -trimpath \
        -o "$out/cnp-conformance.test" sigs.k8s.io/network-policy-api/conformance)
fi

# pause: upstream's build/pause/linux/pause.c, static, as its Makefile does.
src=$(cd "$mod" && go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
if [[ ! -x $out/pause || $src -nt $out/pause ]]; then
    tag=$(awk -F'= *' '/^TAG \?=/ { print $2 }' "$(dirname "$src")/../Makefile")
    "${nice[@]}" cc -Os -Wall -Werror -static -DVERSION="v${tag:-unknown}-weft" -o "$out/pause.new" "$src"
    mv "$out/pause.new" "$out/pause"
fi
echo "k8s-build: Kubernetes $K8S_VERSION, etcd $ETCD_VERSION in $out ($(( $(date +%s) - start )) s)" >&2

# The images the nodes import (pause, agnhost, busybox; scripts/k8s-images.sh:
# skips what is up to date). WEFT_K8S_IMAGES_BUILD=0 leaves them out.
if [[ ${WEFT_K8S_IMAGES_BUILD:-1} == 0 ]]; then
    :
elif [[ $(id -u) != 0 ]]; then
    echo "k8s-build: images not built (scripts/k8s-images.sh runs as root: mmdebstrap)" >&2
else
    WEFT_K8S_BIN=$out "$repo/scripts/k8s-images.sh"
fi
