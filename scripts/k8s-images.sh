#!/usr/bin/env bash
# Builds the container images the real cluster needs (docs/cluster.md,
# "Images") as docker-archive tarballs in build-k8s/images/ (or
# $WEFT_K8S_IMAGES), from locally built binaries and Debian packages only (no
# registry), tagged exactly as kubelet and the upstream e2e suite of the pinned
# Kubernetes (tests/k8s/versions.env) name them, so IfNotPresent never pulls:
#
#   pause-<v>.tar    registry.k8s.io/pause:<v>, build-k8s/bin/pause (upstream's
#                    pause.c, static); <v> from the module's build/pause/Makefile,
#                    kubeadm's PauseVersion and test/utils/image/manifest.go
#                    (the sandbox image: containerd's sandbox_image)
#   agnhost-<v>.tar  registry.k8s.io/e2e-test-images/agnhost:<v>, build-k8s/bin/agnhost
#                    on a Debian 12 root filesystem with what upstream's
#                    Alpine-based image installs (bash curl netcat-openbsd
#                    iproute2 iperf dnsutils), its porter certificates and users
#   busybox-<v>.tar  registry.k8s.io/e2e-test-images/busybox:<v>, Debian's
#                    busybox-static (1.35) with its applets linked
#   kubedns-<v>.tar  localhost/weft/kubedns:<k8s version>, the cluster DNS
#                    (tests/k8s/cmd/kubedns; CoreDNS is not on the module proxy)
#   and, with --full, the images the [sig-network] specs of `k8s-e2e.sh
#   --full` use (the README's test command builds none of them: two more
#   mmdebstrap runs on a cold machine, four more imports at every `up`):
#   nginx-<v>.tar    registry.k8s.io/e2e-test-images/nginx:<v> (Nginx and
#                    NginxNew: EndpointSlice, Endpoints), Debian 12's nginx
#   glibc-dns-testing-<v>.tar  .../glibc-dns-testing:<v> (the DNS specs'
#                    "jessie" querier: dig, getent), agnhost's Debian base
#   distroless-iptables-<v>.tar  registry.k8s.io/build-image/distroless-iptables:<v>
#                    (KubeProxy CLOSE_WAIT: sh, conntrack), Debian's conntrack
#                    and iptables
#   regression-issue-74839-<v>.tar  .../regression-issue-74839:<v> (Conntrack's
#                    invalid-state spec), build-k8s/bin/regression-issue-74839
#
# Idempotent: an image is rebuilt only when the hash of its inputs (binaries,
# tag, this script, docker_archive.py, the base root filesystem) differs from
# the one recorded beside it (<name>.tar.inputs). The Debian root filesystem is
# made once by mmdebstrap (about 30 s, Debian's mirror) and kept in
# $WEFT_IMAGE_CACHE (default /var/cache/weft-image, shared with
# deploy/build-image.sh), where a fresh clone finds it.
#
#   sudo scripts/k8s-images.sh            # needs build-k8s/bin (scripts/k8s-build.sh)
#   sudo scripts/k8s-images.sh --full     # also the --full suite's images
#   sudo scripts/k8s-images.sh --list     # the tarballs and their tags, builds nothing (--list --full: all)
#   sudo scripts/k8s-images.sh --force    # rebuild every image
#
# Environment: WEFT_K8S_BIN (binaries, default build-k8s/bin), WEFT_K8S_IMAGES
# (output dir), WEFT_IMAGE_CACHE, WEFT_DEBIAN_MIRROR (as deploy/build-image.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mod=$repo/tests/k8s
bin=${WEFT_K8S_BIN:-$repo/build-k8s/bin}
out=${WEFT_K8S_IMAGES:-$repo/build-k8s/images}
cache=${WEFT_IMAGE_CACHE:-/var/cache/weft-image}
archive=$mod/images/docker_archive.py
nice=(nice -n "${WEFT_K8S_NICE:-10}")

force=0 list=0 full=0
for a in "$@"; do
    case $a in
        --force) force=1 ;;
        --list) list=1 ;;
        --full) full=1 ;;
        -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
        *) echo "k8s-images: unknown argument $a (--force, --full, --list)" >&2; exit 2 ;;
    esac
done
fail() { echo "k8s-images: $*" >&2; exit 1; }

# The tags: read from the pinned k8s.io/kubernetes module, never typed here.
command -v go >/dev/null || fail "go is not installed (the tags are read from the k8s.io/kubernetes module)"
kdir=$(cd "$mod" && go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes) ||
    fail "k8s.io/kubernetes is not in the module cache (run scripts/k8s-build.sh)"
manifest=$kdir/test/utils/image/manifest.go
# e2e_ref NAME: the image reference manifest.go gives configs[NAME].
e2e_ref() {
    local line reg name ver host
    line=$(grep -E "^\s*configs\[$1\] = Config\{" "$manifest") || fail "$manifest has no configs[$1]"
    read -r reg name ver < <(sed -E 's/.*Config\{list\.([A-Za-z0-9]+), "([^"]+)", "([^"]+)"\}.*/\1 \2 \3/' <<<"$line")
    host=$(grep -E "^\s*$reg:\s+\"" "$manifest" | head -1 | sed -E 's/.*"([^"]+)".*/\1/')
    [[ -n $host && -n $name && -n $ver ]] || fail "cannot parse configs[$1] in $manifest: $line"
    echo "$host/$name:$ver"
}
pause_tags=()
for t in "registry.k8s.io/pause:$(awk -F'= *' '/^TAG \?=/ { print $2 }' "$kdir/build/pause/Makefile")" \
         "registry.k8s.io/pause:$(sed -nE 's/^\s*PauseVersion\s*=\s*"([^"]+)".*/\1/p' "$kdir/cmd/kubeadm/app/constants/constants.go")" \
         "$(e2e_ref Pause)"; do
    [[ $t == *: ]] && fail "cannot read a pause version from $kdir ($t)"
    [[ " ${pause_tags[*]} " == *" $t "* ]] || pause_tags+=("$t")
done
agnhost_tag=$(e2e_ref Agnhost)
busybox_tag=$(e2e_ref BusyBox)
nginx_tags=("$(e2e_ref Nginx)")
[[ $(e2e_ref NginxNew) == "${nginx_tags[0]}" ]] || nginx_tags+=("$(e2e_ref NginxNew)")
dnstest_tag=$(e2e_ref GlibcDnsTesting)
iptables_tag=$(e2e_ref DistrolessIptables)
r74839_tag=$(e2e_ref RegressionIssue74839)
# shellcheck source=../tests/k8s/versions.env
. "$mod/versions.env"
kubedns_tag=localhost/weft/kubedns:$K8S_VERSION
tar_of() { local r=${1##*/}; echo "$out/${r/:/-}.tar"; }   # registry.k8s.io/pause:3.10.2 -> pause-3.10.2.tar

if (( list )); then
    printf '%s\t%s\n' "$(tar_of "${pause_tags[0]}")" "${pause_tags[*]}" \
        "$(tar_of "$agnhost_tag")" "$agnhost_tag" "$(tar_of "$busybox_tag")" "$busybox_tag" \
        "$(tar_of "$kubedns_tag")" "$kubedns_tag"
    (( full )) && printf '%s\t%s\n' "$(tar_of "${nginx_tags[0]}")" "${nginx_tags[*]}" \
        "$(tar_of "$dnstest_tag")" "$dnstest_tag" "$(tar_of "$iptables_tag")" "$iptables_tag" \
        "$(tar_of "$r74839_tag")" "$r74839_tag"
    exit 0
fi
[[ $(id -u) == 0 ]] || fail "run as root (mmdebstrap makes the Debian root filesystem)"
for b in pause agnhost kubedns $( (( full )) && echo regression-issue-74839); do
    [[ -x $bin/$b ]] || fail "$bin/$b is missing (run scripts/k8s-build.sh)"
done
[[ -x /bin/busybox ]] && /bin/busybox --list-full >/dev/null 2>&1 ||
    fail "/bin/busybox is missing (Debian package busybox-static; scripts/setup.sh installs it)"
mkdir -p "$out" "$cache"
exec 9>"$out/.lock"
flock 9

# build TAR DESCRIPTION INPUT... -- ARGS: docker_archive.py TAR ARGS unless the
# inputs' hash (files hashed, other words as they are) is the one recorded.
build() {
    local tar=$1 what=$2; shift 2
    local inputs=()
    while [[ $1 != -- ]]; do inputs+=("$1"); shift; done
    shift
    local h
    h=$( { for i in "${inputs[@]}" "$0" "$archive"; do
               if [[ -f $i ]]; then sha256sum "$i" | cut -d' ' -f1; else echo "$i"; fi
           done; printf '%s\n' "$@"; } | sha256sum | cut -d' ' -f1)
    if (( !force )) && [[ -f $tar && $(cat "$tar.inputs" 2>/dev/null) == "$h" ]]; then
        echo "k8s-images: $(basename "$tar") up to date ($what)" >&2
        return
    fi
    rm -f "$tar.inputs"
    "${nice[@]}" python3 "$archive" "$tar" "$@" >&2
    echo "$h" >"$tar.inputs"
}

# pause: the binary alone, as upstream's image (FROM scratch, USER 65535).
build "$(tar_of "${pause_tags[0]}")" "${pause_tags[*]}" "$bin/pause" -- \
    "${pause_tags[@]/#/--tag=}" --file "$bin/pause:/pause:0755" \
    --entrypoint '["/pause"]' --user 65535:65535

# debian_base NAME PACKAGES [--customize-hook=...]...: prints the path of a
# Debian 12 root filesystem (tar) with PACKAGES, made once by mmdebstrap and
# kept in $cache, keyed by the packages and the hooks.
debian_base() {
    local name=$1 pkgs=$2; shift 2
    local base
    base=$cache/e2e-$name-base-$(printf '%s\n' "$pkgs" "$@" | sha256sum | cut -c1-12).tar
    if [[ ! -f $base ]]; then
        echo "k8s-images: making $name's Debian 12 root filesystem with mmdebstrap ($pkgs)" >&2
        # shellcheck disable=SC2086
        if ! "${nice[@]}" mmdebstrap --variant=essential --format=tar --include="$pkgs" \
            --skip=output/dev --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --aptopt='Acquire::Languages "none"' \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' "$@" \
            bookworm "$base.tmp" ${WEFT_DEBIAN_MIRROR:-} >"$cache/e2e-$name-base.log" 2>&1; then
            tail -20 "$cache/e2e-$name-base.log" >&2
            rm -f "$base.tmp"
            fail "mmdebstrap failed (log: $cache/e2e-$name-base.log)"
        fi
        mv "$base.tmp" "$base"
    fi
    echo "$base"
}

# agnhost's base: Debian 12 with the packages upstream's Dockerfile adds to
# Alpine (bind-tools -> dnsutils), upstream's users; and a wget, which
# upstream's has from Alpine's busybox (the Services specs run `wget -q -T 1
# -O - IP:PORT` in it). Debian's busybox 1.35 (static or not) segfaults on
# `wget -T`, so GNU wget, told to try once as busybox's does (/etc/wgetrc;
# its default is 20 tries on a timeout).
base=$(debian_base agnhost bash,curl,netcat-openbsd,iproute2,iperf,dnsutils,util-linux,wget \
    --customize-hook='echo "tries = 1" >>"$1/etc/wgetrc"' \
    --customize-hook='echo "user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh" >>"$1/etc/passwd"' \
    --customize-hook='echo "user-defined-in-image:!::0:99999:7:::" >>"$1/etc/shadow"' \
    --customize-hook='echo "user-defined-in-image:x:1000:" >>"$1/etc/group"' \
    --customize-hook='echo "group-defined-in-image:x:50000:user-defined-in-image" >>"$1/etc/group"' \
    --customize-hook='mkdir -p "$1/home/user-defined-in-image" && chown 1000:1000 "$1/home/user-defined-in-image"' \
    --customize-hook='ln -s /usr/bin/iperf "$1/usr/local/bin/iperf"')
porter=$kdir/test/images/agnhost/porter
build "$(tar_of "$agnhost_tag")" "$agnhost_tag" "$bin/agnhost" "$base" "$porter/localhost.crt" "$porter/localhost.key" -- \
    --tag "$agnhost_tag" --layer-tar "$base" \
    --file "$bin/agnhost:/agnhost:0755" --symlink agnhost:/agnhost-2 --dir /uploads \
    --file "$porter/localhost.crt:/localhost.crt:0644" --file "$porter/localhost.key:/localhost.key:0644" \
    --entrypoint '["/agnhost"]' --cmd '["pause"]'

# busybox: Debian's static busybox and a link per applet, upstream's CMD.
links=()
while read -r applet; do
    [[ $applet == bin/busybox ]] || links+=(--symlink "/bin/busybox:/$applet")
done < <(/bin/busybox --list-full)
tmpetc=$out/.busybox-etc   # a fixed path: the arguments are part of the inputs' hash
mkdir -p "$tmpetc"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$tmpetc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$tmpetc/group"
build "$(tar_of "$busybox_tag")" "$busybox_tag" /bin/busybox "$tmpetc/passwd" "$tmpetc/group" -- \
    --tag "$busybox_tag" --file /bin/busybox:/bin/busybox:0755 "${links[@]}" \
    --file "$tmpetc/passwd:/etc/passwd:0644" --file "$tmpetc/group:/etc/group:0644" \
    --dir /tmp:1777 --dir /root:0700 --cmd '["sh"]'

# kubedns: the static binary alone, as upstream's CoreDNS image is.
build "$(tar_of "$kubedns_tag")" "$kubedns_tag" "$bin/kubedns" -- \
    --tag "$kubedns_tag" --file "$bin/kubedns:/kubedns:0755" --entrypoint '["/kubedns"]'
if (( !full )); then
    echo "k8s-images: $(cd "$out" && echo *.tar) in $out" >&2
    exit 0
fi
# glibc-dns-testing: upstream's is Debian with dnsutils (its coredns binary,
# downloaded from GitHub there, is used by no sig-network spec); agnhost's
# base is exactly that (the same layer: imported once).
build "$(tar_of "$dnstest_tag")" "$dnstest_tag" "$base" -- \
    --tag "$dnstest_tag" --layer-tar "$base" --cmd '["/bin/sh"]'

# nginx (Nginx and NginxNew, one image): Debian 12's nginx serving its default
# page on port 80 as upstream's nginx:alpine does, logs to the container's
# stdout and stderr, in the foreground.
nbase=$(debian_base nginx nginx \
    --customize-hook='ln -sf /dev/stdout "$1/var/log/nginx/access.log" && ln -sf /dev/stderr "$1/var/log/nginx/error.log"')
build "$(tar_of "${nginx_tags[0]}")" "${nginx_tags[*]}" "$nbase" -- \
    "${nginx_tags[@]/#/--tag=}" --layer-tar "$nbase" \
    --cmd '["nginx", "-g", "daemon off;"]'

# distroless-iptables: upstream's carries iptables, nftables, conntrack and a
# shell for kube-proxy's tests; the spec execs `sh -c 'which conntrack'`,
# `conntrack -L` in it (hostNetwork, privileged).
ibase=$(debian_base iptables conntrack,iptables,nftables)
build "$(tar_of "$iptables_tag")" "$iptables_tag" "$ibase" -- \
    --tag "$iptables_tag" --layer-tar "$ibase" --cmd '["/bin/sh"]'

# regression-issue-74839: the static binary alone (test/images/regression-issue-74839
# of the pinned module, built by k8s-build.sh), as upstream's image.
build "$(tar_of "$r74839_tag")" "$r74839_tag" "$bin/regression-issue-74839" -- \
    --tag "$r74839_tag" --file "$bin/regression-issue-74839:/regression-issue-74839:0755" \
    --entrypoint '["/regression-issue-74839"]'
echo "k8s-images: $(cd "$out" && echo *.tar) in $out" >&2
