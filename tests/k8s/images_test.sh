#!/usr/bin/env bash
# The images of scripts/k8s-images.sh, as a node's containerd sees them: a
# containerd 1.6 of its own (Debian's, the one the nodes run; its own root,
# state and socket under a temp dir) in a network and mount namespace of its
# own, every build-k8s/images/*.tar imported with `ctr -n k8s.io images
# import` as cluster.sh does, then:
#   - each tag kubelet and the e2e suite ask for is listed, exactly;
#   - pause runs as upstream's (uid 65535) and stays up;
#   - agnhost serves `netexec` and answers /hostname and /dial (curl), the
#     shell tools the e2e suite execs in it exist (sh, curl, nc, ip, dig);
#   - busybox runs `sh -c` with its applets;
#   - agnhost also has a `wget` (GNU wget: Debian's busybox crashes on `wget -T`);
#   and, when `k8s-images.sh --full` has built them (the test command does not):
#   - nginx serves its page on port 80 under both tags' image;
#   - glibc-dns-testing has sh, dig, getent, seq; distroless-iptables has sh,
#     which, conntrack, iptables, nft; regression-issue-74839 runs (and stops
#     at its missing POD_IP, as upstream's does outside a pod).
# Names carry a prefix of the run (wkimg-<hex>); everything (containers,
# cgroups, namespace, mounts, processes, temp dir) is removed, also on failure.
#
#   sudo tests/k8s/images_test.sh    # after scripts/k8s-images.sh
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
images=${WEFT_K8S_IMAGES:-$repo/build-k8s/images}
[[ $(id -u) == 0 ]] || { echo "images_test: run as root" >&2; exit 1; }
for t in containerd ctr runc; do
    command -v $t >/dev/null || { echo "images_test: $t missing (scripts/setup.sh)" >&2; exit 1; }
done
mapfile -t lines < <("$repo/scripts/k8s-images.sh" --list) || exit 1
for l in "${lines[@]}"; do
    [[ -f ${l%%$'\t'*} ]] || { echo "images_test: ${l%%$'\t'*} missing: run scripts/k8s-images.sh" >&2; exit 1; }
done
# The --full suite's images (k8s-images.sh --full) are checked when built:
# the README's test command builds only the four above.
mapfile -t all < <("$repo/scripts/k8s-images.sh" --list --full) || exit 1
full=1
for l in "${all[@]:${#lines[@]}}"; do [[ -f ${l%%$'\t'*} ]] || full=0; done
if (( full )); then lines=("${all[@]}")
else echo "images_test: the --full suite's images are not built (sudo scripts/k8s-images.sh --full): not checked"; fi

prefix=wkimg-$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
dir=$(mktemp -d "/tmp/$prefix.XXXX")
ns=$prefix
sock=$dir/containerd.sock
cg=/$prefix
pass=0 failed=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
cleanup() {
    if [[ -S $sock ]]; then
        for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
            ctr -a "$sock" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1
            sleep 0.2
            ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1
            ctr -a "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1
        done
    fi
    [[ -f $dir/pid ]] && kill "$(cat "$dir/pid")" 2>/dev/null && sleep 1
    # anything still in the namespace (shims), by pid
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    for c in /sys/fs/cgroup/*/"$prefix"; do
        [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    ip netns del "$ns" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
ip netns add "$ns" || exit 1
ip -n "$ns" link set lo up
# A mount namespace of its own (private), so the snapshots' mounts never show
# in the machine's; containerd and its shims live and die in it. nsenter, not
# `ip netns exec`, which mounts a sysfs of the netns over /sys and so hides
# /sys/fs/cgroup from runc ("no cgroup mount found in mountinfo").
nsenter --net="/run/netns/$ns" unshare -m --propagation private \
    sh -c 'echo $$ >"$1/pid"; exec containerd --config "$1/config.toml"' sh "$dir" \
    >"$dir/containerd.log" 2>&1 &
for _ in $(seq 100); do
    ctr -a "$sock" version >/dev/null 2>&1 && break
    sleep 0.1
done
ctr -a "$sock" version >/dev/null 2>&1 || { tail "$dir/containerd.log"; bad "containerd did not start"; exit 1; }
C=(ctr -a "$sock" -n k8s.io)

for l in "${lines[@]}"; do
    tar=${l%%$'\t'*}
    if out=$("${C[@]}" images import "$tar" 2>&1); then ok "import $(basename "$tar")"; else bad "import $tar: $out"; fi
done
listed=$("${C[@]}" images ls -q)
for l in "${lines[@]}"; do
    for tag in ${l#*$'\t'}; do
        if grep -qxF "$tag" <<<"$listed"; then ok "listed $tag"; else bad "not listed: $tag (have: $listed)"; fi
    done
done
pause=$(sed -n 1p <<<"${lines[0]#*$'\t'}" | cut -d' ' -f1)
agnhost=${lines[1]#*$'\t'}
busybox=${lines[2]#*$'\t'}
kubedns=${lines[3]#*$'\t'}
if (( full )); then
nginx=${lines[4]#*$'\t'}; nginx=${nginx%% *}
dnstest=${lines[5]#*$'\t'}
iptables=${lines[6]#*$'\t'}
r74839=${lines[7]#*$'\t'}
fi

# --net-host: the containers share the shim's network namespace, which is
# containerd's, $ns.
run() {  # run ID IMAGE ARGS... (detached)
    local id=$1 img=$2; shift 2
    "${C[@]}" run -d --net-host --cgroup "$cg/$id" "$img" "$id" "$@" >/dev/null
}
if run pause "$pause"; then
    sleep 0.5
    st=$("${C[@]}" tasks ls | awk '$1 == "pause" { print $3 }')
    pid=$("${C[@]}" tasks ls | awk '$1 == "pause" { print $2 }')
    uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    [[ $st == RUNNING && $uid == 65535 ]] && ok "pause runs (uid $uid)" || bad "pause: status '$st' uid '$uid'"
else bad "ctr run $pause"; fi

if run agnhost "$agnhost" /agnhost netexec --http-port=8080 --udp-port=8081; then
    for _ in $(seq 50); do
        h=$(ip netns exec "$ns" curl -s -m 1 http://127.0.0.1:8080/hostname) && break
        sleep 0.2
    done
    [[ -n ${h:-} ]] && ok "agnhost netexec answers /hostname ($h)" || bad "agnhost netexec: no answer on :8080 ($(tail -3 "$dir/containerd.log"))"
    # /dial: netexec makes the request itself (the e2e suite's probe), over UDP
    d=$(ip netns exec "$ns" curl -s -m 5 'http://127.0.0.1:8080/dial?request=hostname&protocol=udp&host=127.0.0.1&port=8081&tries=1')
    [[ $d == *"\"responses\":[\"$h\"]"* ]] && ok "agnhost /dial over udp: $d" || bad "agnhost /dial: '$d'"
    # the tools the e2e suite runs in agnhost with kubectl exec
    x=$("${C[@]}" tasks exec --exec-id t1 agnhost /bin/sh -c \
        'curl -s -m 2 http://127.0.0.1:8080/hostname && echo hostName | nc -v -t -w 2 127.0.0.1 8080 >/dev/null 2>&1 && echo " nc-ok" && ip -br addr show lo | cut -c1-2 && for t in dig iperf bash; do command -v $t; done' 2>&1)
    want=$(printf '%s nc-ok\nlo\n/usr/bin/dig\n/usr/local/bin/iperf\n/usr/bin/bash' "$h")
    [[ $x == "$want" ]] && ok "agnhost has sh, curl, nc, ip, dig, iperf, bash" || bad "agnhost tools: got '$x', want '$want'"
    # the Services specs' `wget -q -T 1 -O - IP:PORT` (verifyServeHostnameServiceUp)
    x=$("${C[@]}" tasks exec --exec-id t2 agnhost /bin/sh -c 'wget -q -T 1 -O - http://127.0.0.1:8080/hostname' 2>&1)
    [[ -n $x && $x == "$h" ]] && ok "agnhost wget -q -T 1 -O - answers ($x)" || bad "agnhost wget: '$x'"
else bad "ctr run $agnhost"; fi

x=$("${C[@]}" run --rm --net-host --cgroup "$cg/bb" "$busybox" bb sh -c 'echo hello | wc -c; id -u; ls -ld /tmp | cut -c1-10' 2>&1)
[[ $x == $'6\n0\ndrwxrwxrwt' ]] && ok "busybox sh -c with applets" || bad "busybox: '$x'"

# kubedns with an API server that is not there: up, /healthz 200, /ready 503
# and SERVFAIL until its informers sync (tests/k8s/cmd/kubedns has the rest).
printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n' >"$dir/kc"
if "${C[@]}" run -d --net-host --cgroup "$cg/dns" --mount "type=bind,src=$dir/kc,dst=/kc,options=rbind:ro" \
        "$kubedns" dns /kubedns --listen=127.0.0.1:5353 --health=127.0.0.1:8053 --kubeconfig=/kc >/dev/null; then
    for _ in $(seq 50); do
        hz=$(ip netns exec "$ns" curl -s -m 1 -o /dev/null -w '%{http_code}' http://127.0.0.1:8053/healthz) && [[ $hz == 200 ]] && break
        sleep 0.2
    done
    rd=$(ip netns exec "$ns" curl -s -m 1 -o /dev/null -w '%{http_code}' http://127.0.0.1:8053/ready)
    sf=$(ip netns exec "$ns" python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
s.sendto(bytes.fromhex("abcd01000001000000000000") + b"\x03web\x03ns1\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01", ("127.0.0.1", 5353))
print(s.recv(512)[3] & 15)')
    [[ $hz == 200 && $rd == 503 && $sf == 2 ]] && ok "kubedns runs: /healthz 200, /ready 503, SERVFAIL before sync" ||
        bad "kubedns: healthz '$hz' ready '$rd' rcode '$sf'"
else bad "ctr run $kubedns"; fi

if (( full )); then
# nginx in the foreground on port 80 (the EndpointSlice specs' pods).
if run nginx "$nginx"; then
    for _ in $(seq 50); do
        x=$(ip netns exec "$ns" curl -s -m 1 http://127.0.0.1:80/) && break
        sleep 0.2
    done
    [[ ${x:-} == *"Welcome to nginx"* ]] && ok "nginx serves on :80" || bad "nginx: '${x:-}' ($(tail -3 "$dir/containerd.log"))"
    "${C[@]}" tasks kill -s KILL nginx >/dev/null 2>&1
else bad "ctr run $nginx"; fi
x=$("${C[@]}" run --rm --net-host --cgroup "$cg/dt" "$dnstest" dt /bin/sh -c \
    'for t in dig getent seq; do command -v $t; done; getent hosts localhost | cut -d" " -f1' 2>&1)
[[ $x == $'/usr/bin/dig\n/usr/bin/getent\n/usr/bin/seq\n::1' || $x == $'/usr/bin/dig\n/usr/bin/getent\n/usr/bin/seq\n127.0.0.1' ]] &&
    ok "glibc-dns-testing has dig, getent, seq" || bad "glibc-dns-testing: '$x'"
x=$("${C[@]}" run --rm --net-host --privileged --cgroup "$cg/ipt" "$iptables" ipt /bin/sh -c \
    'which conntrack iptables nft sleep >/dev/null && conntrack -L >/dev/null 2>&1; echo rc=$?' 2>&1)
[[ $x == rc=0 ]] && ok "distroless-iptables: which, conntrack -L, iptables, nft" || bad "distroless-iptables: '$x'"
x=$("${C[@]}" run --rm --net-host --cgroup "$cg/r74839" "$r74839" r74839 2>&1)
[[ $x == *"No valid IP found"* ]] && ok "regression-issue-74839 runs (no POD_IP: '$(grep -m1 -o 'No valid IP found' <<<"$x")')" ||
    bad "regression-issue-74839: '$x'"

fi

echo "images_test: $pass passed, $failed failed"
((failed == 0))
