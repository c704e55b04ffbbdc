#!/usr/bin/env bash
# weftd against the real kube-apiserver (issue 21, step 1): no kubelet yet.
#
# Brings up the control plane (scripts/cluster.sh, its own state dir), applies
# deploy/weftd.yaml as shipped with kubectl, registers Node objects, and runs
# weftd as a process in a network namespace per node, authenticating with a
# token of the weftd ServiceAccount (TokenRequest, as kubelet projects it) and
# reading its flags from the ConfigMap deploy/weftd.yaml ships (paths
# overridden: there is no mount namespace per node yet). Checks what weftd
# does with the real API server: the pod CIDR from the controller-manager, the
# conflist, its Node annotations, peer routes from the Node watch, the
# NetworkPolicy informers, a restart, watches run to the server's timeout,
# 410s after etcd's compaction and an API server restart, and no 403 or error
# anywhere in its log.
#
#   sudo tests/k8s/weftd_apiserver_test.sh        (needs build-k8s/bin: scripts/k8s-build.sh,
#                                                  and weftd: scripts/build.sh weftd weft)
# WEFTD=<path> picks the weftd binary; WEFT_CLUSTER_STATE its cluster's state dir;
# DUAL_STACK=1 runs it all on a dual-stack cluster (both pod CIDRs of each
# node, in the conflist and routed).
# Skipped (exit 0, the reason printed) when the Kubernetes binaries are absent.
# Ends with "N passed, N failed".
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export WEFT_CLUSTER_STATE=${WEFT_CLUSTER_STATE:-$repo/build-k8s/cluster-weftd-test}
export WEFT_K8S_BIN=${WEFT_K8S_BIN:-$repo/build-k8s/bin}
C=$repo/scripts/cluster.sh
passed=0 failed=0

say() { echo "weftd_apiserver_test: $*" >&2; }
ok() { passed=$(( passed + 1 )); echo "PASS $1"; }
bad() { failed=$(( failed + 1 )); echo "FAIL $1${2:+: $2}"; }
summary() { echo "$passed passed, $failed failed"; }

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    if [[ ! -x $WEFT_K8S_BIN/$b ]]; then
        echo "SKIP: $WEFT_K8S_BIN/$b is missing (build it: scripts/k8s-build.sh)"
        # CI builds them first (scripts/test.sh runs k8s-build.sh): missing there is a defect.
        [[ ${CI:-} == true ]] && { echo "FAIL: CI=true, and scripts/k8s-build.sh should have built it"; exit 1; }
        echo "0 passed, 0 failed, 1 skipped"
        exit 0
    fi
done
if [[ -z ${WEFTD:-} ]]; then
    for w in "$repo/build-k8sweft/cmd/weftd/weftd" "$repo/build/cmd/weftd/weftd"; do
        [[ -x $w ]] && { WEFTD=$w; break; }
    done
fi
[[ -x ${WEFTD:-} ]] || { say "no weftd binary (scripts/build.sh weftd weft, or WEFTD=)"; exit 1; }
[[ $(id -u) == 0 ]] || { say "needs root"; exit 1; }
# Tools scripts/setup.sh installs: missing, they fail the test by name (not a skip).
for t in jq:jq curl:curl openssl:openssl; do
    command -v "${t%%:*}" >/dev/null || { say "${t%%:*} is missing (Debian package ${t#*:}; scripts/setup.sh installs it)"; echo "0 passed, 1 failed"; exit 1; }
done

cleanup() {
    local rc=$?
    if [[ -n ${KEEP:-} ]]; then say "KEEP set: cluster left up (scripts/cluster.sh down with WEFT_CLUSTER_STATE=$WEFT_CLUSTER_STATE)"; return; fi
    "$C" down >/dev/null 2>&1 || say "cluster.sh down failed"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

k() { "$C" kubectl "$@"; }

# poll SECONDS CMD...: true once CMD succeeds within SECONDS.
poll() {
    local end=$(( SECONDS + $1 )); shift
    until "$@" >/dev/null 2>&1; do (( SECONDS >= end )) && return 1; sleep 0.5; done
}

"$C" down >/dev/null 2>&1 || true
up_args=(--nodes 0) cidr_flag=()
if [[ ${DUAL_STACK:-0} == 1 ]]; then
    up_args+=(--dual-stack)
    cidr_flag=(--cluster-cidr 10.244.0.0/16,fd00:10:244::/56)
fi
up_out=$("$C" up "${up_args[@]}" 2>"$WEFT_CLUSTER_STATE.up.log")
rc=$?
if (( rc != 0 )) || [[ $(tail -n1 <<<"$up_out") != KUBECONFIG=* ]]; then
    cat "$WEFT_CLUSTER_STATE.up.log" >&2
    bad "control plane up" "exit $rc, last line '$(tail -n1 <<<"$up_out")'"
    summary; exit 1
fi
ok "control plane up (last line $(tail -n1 <<<"$up_out"))"
rm -f "$WEFT_CLUSTER_STATE.up.log"
eval "$("$C" env)"   # PREFIX CP_NS STATE BIN API ...

# deploy/weftd.yaml as shipped. With no kubelet the DaemonSet's pods stay
# Pending; the ServiceAccount, RBAC and ConfigMap are what weftd uses here.
if k apply -f "$repo/deploy/weftd.yaml" > "$STATE/apply.out" 2>&1; then
    ok "kubectl apply -f deploy/weftd.yaml: $(tr '\n' ';' < "$STATE/apply.out")"
else
    bad "kubectl apply -f deploy/weftd.yaml" "$(cat "$STATE/apply.out")"
fi

# weftd's config as the DaemonSet mounts it, read back from the API.
mkdir -p "$STATE/weftd"
k -n kube-system get configmap weftd-config -o jsonpath='{.data.weftd\.conf}' > "$STATE/weftd/weftd.conf"
[[ -s $STATE/weftd/weftd.conf ]] && ok "weftd.conf from the ConfigMap" || bad "weftd.conf from the ConfigMap"

# A bound token of the ServiceAccount, as kubelet would project it.
k -n kube-system create token weftd --duration 2h > "$STATE/weftd/token" 2>"$STATE/weftd/token.err"
if [[ -s $STATE/weftd/token ]]; then ok "TokenRequest for kube-system/weftd"; else bad "TokenRequest" "$(cat "$STATE/weftd/token.err")"; fi
cat > "$STATE/weftd/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: weft
  cluster: {server: "$API", certificate-authority: "$STATE/pki/ca.crt"}
users:
- name: weftd
  user: {tokenFile: token}
contexts:
- name: weft
  context: {cluster: weft, user: weftd}
current-context: weft
EOF
# What RBAC lets the token do (the real authorizer's answer).
for v in "list nodes" "watch nodes" "patch nodes" "list pods" "watch namespaces" "list networkpolicies.networking.k8s.io"; do
    # shellcheck disable=SC2086
    a=$(k auth can-i $v --as system:serviceaccount:kube-system:weftd 2>/dev/null)
    [[ $a == yes ]] && ok "RBAC: weftd may $v" || bad "RBAC: weftd may $v" "$a"
done

node_obj() {
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/os: linux, kubernetes.io/hostname: $1}
EOF
}
podcidr() { k get node "$1" -o jsonpath='{.spec.podCIDR}'; }
podcidrs() { k get node "$1" -o jsonpath='{.spec.podCIDRs[*]}'; }
has_podcidr() { [[ -n $(podcidr "$1") ]]; }

start_weftd() {
    local n=$1 ns=$PREFIX-$1 d=$STATE/nodes/$1
    shift
    mkdir -p "$d"/{net.d,state,ipam}
    "$C" run "weftd-$n" "$ns" "$WEFTD" --config "$STATE/weftd/weftd.conf" \
        --kubeconfig "$STATE/weftd/kubeconfig" --node-name "$n" \
        --cni-conf-dir "$d/net.d" --state-dir "$d/state" --plugin-data-dir "$d/ipam" \
        --plugin-log-file "$d/plugin.log" --metrics-addr 127.0.0.1:9641 --log-level debug "${cidr_flag[@]}" "$@"
}
wlog() { cat "$STATE/logs/weftd-$1.log"; }
readyz() { ip netns exec "$PREFIX-$1" curl -sf --max-time 3 http://127.0.0.1:9641/readyz; }
metric() { ip netns exec "$PREFIX-$1" curl -sf --max-time 3 http://127.0.0.1:9641/metrics | awk -v m="$2" '$1 == m { print $2 }'; }
conf_has() { jq -e --arg c "$2" '[.. | strings] | index($c)' "$STATE/nodes/$1/net.d/10-weft.conflist"; }
route_to() {
    local fam=-4; [[ $2 == *:* ]] && fam=-6
    ip -n "$PREFIX-$1" "$fam" route show "$2" proto 201 | grep -q "dev weft.1"
}
no_route_to() { ! route_to "$@"; }

i=0
for n in n1 n2; do
    i=$(( i + 1 ))
    node_obj "$n" | k apply -f - >/dev/null || bad "Node $n created"
    "$C" node-ns "$n" "$i" >/dev/null || bad "netns for $n"
    if poll 60 has_podcidr "$n"; then ok "Node $n: podCIDR $(podcidr "$n") from the controller-manager"; else bad "Node $n: podCIDR allocated"; fi
    # n2 watches 10 s at a time (the default is 300 s): it meets the real
    # server's watch timeouts and BOOKMARKs (sent 2 s before the timeout).
    if [[ $n == n2 ]]; then start_weftd "$n" --watch-timeout 10; else start_weftd "$n"; fi
done

for n in n1 n2; do
    cidr=$(podcidr "$n")
    if poll 60 conf_has "$n" "$cidr"; then ok "$n: conflist written with its podCIDR $cidr"; else bad "$n: conflist with $cidr" "$(ls "$STATE/nodes/$n/net.d"; wlog "$n" | tail -5)"; fi
    if poll 60 readyz "$n"; then ok "$n: /readyz 200"; else bad "$n: /readyz" "$(ip netns exec "$PREFIX-$n" curl -s http://127.0.0.1:9641/readyz)"; fi
done

if [[ ${DUAL_STACK:-0} == 1 ]]; then
    for n in n1 n2; do
        read -r -a cs <<<"$(podcidrs "$n")"
        if (( ${#cs[@]} == 2 )) && conf_has "$n" "${cs[1]}" >/dev/null; then
            ok "$n: dual-stack podCIDRs ${cs[*]}, the IPv6 one in the conflist"
        else
            bad "$n: dual-stack podCIDRs in the conflist" "podCIDRs '${cs[*]}'"
        fi
    done
    c6_2=$(podcidrs n2 | awk '{print $2}')
    poll 30 route_to n1 "$c6_2" && ok "n1 routes n2's IPv6 $c6_2 over weft.1" ||
        bad "n1 routes n2's IPv6 $c6_2" "$(ip -n "$PREFIX-n1" -6 route)"
fi

# The annotations weftd patched onto its Node.
for n in n1 n2; do
    ann=$(k get node "$n" -o json | jq -c '.metadata.annotations | with_entries(select(.key | startswith("weft.io/")))')
    mac=$(ip -n "$PREFIX-$n" -j link show weft.1 2>/dev/null | jq -r '.[0].address')
    ip4="192.0.2.$(( ${n#n} + 10 ))"
    if jq -e --arg mac "$mac" --arg ip "$ip4" \
        '.["weft.io/vtep-mac"] == $mac and .["weft.io/host-ip"] == $ip and .["weft.io/backend"] == "vxlan"' <<<"$ann" >/dev/null; then
        ok "$n: Node annotations $ann"
    else
        bad "$n: Node annotations" "got $ann, weft.1 MAC $mac, host $ip4"
    fi
done

# Peers from the Node list and watch: each node routes the other's podCIDR.
c1=$(podcidr n1) c2=$(podcidr n2)
poll 30 route_to n1 "$c2" && ok "n1 routes n2's $c2 over weft.1" || bad "n1 routes $c2" "$(ip -n "$PREFIX-n1" route)"
poll 30 route_to n2 "$c1" && ok "n2 routes n1's $c1 over weft.1" || bad "n2 routes $c1" "$(ip -n "$PREFIX-n2" route)"

# A peer that joins and leaves while weftd watches: a Node object with the
# annotations a weftd would publish.
node_obj n3 | k apply -f - >/dev/null
if poll 60 has_podcidr n3; then
    c3=$(podcidr n3)
    k annotate node n3 weft.io/vtep-mac=0a:58:00:00:00:03 weft.io/host-ip=192.0.2.13 weft.io/backend=vxlan >/dev/null
    poll 30 route_to n1 "$c3" && ok "watch: n1 routes the new peer n3's $c3" || bad "watch: n1 routes n3's $c3" "$(ip -n "$PREFIX-n1" route)"
    k delete node n3 --wait=true >/dev/null
    poll 30 no_route_to n1 "$c3" && ok "watch: n3 deleted, its route gone" || bad "watch: n3's route withdrawn" "$(ip -n "$PREFIX-n1" route)"
else
    bad "Node n3: podCIDR allocated"
fi

# NetworkPolicy: the informers of Pods, Namespaces and NetworkPolicies see a
# policy created through the real API (defaulted by it: policyTypes).
k create namespace weft-np >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: weft-np}
spec:
  podSelector: {}
EOF
pol_seen() { [[ $(metric n1 weft_netpol_policies) == 1 ]]; }
poll 30 pol_seen && ok "n1: weft_netpol_policies 1 after a NetworkPolicy was created" ||
    bad "n1: the NetworkPolicy seen" "weft_netpol_policies=$(metric n1 weft_netpol_policies)"
k get networkpolicy -n weft-np deny-all -o jsonpath='{.spec.policyTypes}' | grep -q Ingress &&
    ok "the API server defaulted policyTypes to [Ingress]" || bad "policyTypes defaulted"

# A restart: weftd comes back with the same podCIDR, ready again.
kill -TERM "$(cat "$STATE/pids/weftd-n1.pid")"
gone() { ! kill -0 "$(cat "$STATE/pids/weftd-n1.pid")"; }
poll 15 gone || bad "weftd n1 stopped on SIGTERM"
start_weftd n1
sleep 1
if poll 60 readyz n1 && poll 10 route_to n1 "$c2"; then ok "n1 restarted: ready, n2 still routed"; else bad "n1 restarted" "$(wlog n1 | tail -5)"; fi

# n2's 10 s watches: each ended by the server's timeout and resumed, across
# the real BOOKMARKs; its peers are still exactly n1.
n2_watches() {
    jq -r 'select(.user.username == "system:serviceaccount:kube-system:weftd" and .verb == "watch"
                  and .stage == "ResponseComplete" and .sourceIPs[0] == "192.0.2.12"
                  and (.requestURI | startswith("/api/v1/nodes?"))) | .requestURI' "$STATE/logs/audit.log" | wc -l
}
enough_watches() { (( $(n2_watches) >= 2 )); }
if poll 30 enough_watches; then
    ok "n2: $(n2_watches) Node watches ran to the server's timeoutSeconds=10 and were resumed"
else
    bad "n2: Node watches resumed after their timeout" "$(n2_watches) completed"
fi
[[ $(metric n2 weft_peers) == 1 ]] && route_to n2 "$c1" && ok "n2: still exactly one peer (n1) after its watches' timeouts" ||
    bad "n2: one peer after the watch timeouts" "weft_peers=$(metric n2 weft_peers)"

# Real 410s: etcd compacted at its current revision and the API server
# restarted (a new watch cache): the watches weftd resumes from their last
# resourceVersion are too old. A peer that joins afterwards is routed.
etcd_gw() { ip netns exec "$CP_NS" curl -sf --max-time 5 -X POST "http://127.0.0.1:2379/v3/kv/$1" -d "$2"; }
rev=$(etcd_gw range '{"key":"AA=="}' | jq -r .header.revision)
if etcd_gw compaction "{\"revision\": $rev, \"physical\": true}" >/dev/null; then ok "etcd compacted at revision $rev"; else bad "etcd compaction at $rev"; fi
for n in n1 n2; do
    wlog "$n" | wc -l > "$STATE/$n.lines"
    metric "$n" 'weft_controlplane_auth_failures_total{backend="kubernetes"}' > "$STATE/$n.af"
done
if "$C" restart kube-apiserver 2>/dev/null; then ok "kube-apiserver restarted"; else bad "kube-apiserver restarted"; fi
# When the restarted server began to serve (klog: "I1127 03:17:55.977641 ... Serving securely").
serving=$(grep 'Serving securely' "$STATE/logs/kube-apiserver.log" | tail -n1 | awk '{print $2}')
node_obj n4 | k apply -f - >/dev/null
if poll 60 has_podcidr n4; then
    c4=$(podcidr n4)
    k annotate node n4 weft.io/vtep-mac=0a:58:00:00:00:04 weft.io/host-ip=192.0.2.14 weft.io/backend=vxlan >/dev/null
    poll 60 route_to n1 "$c4" && poll 30 route_to n2 "$c4" && ok "after compaction and restart: n1 and n2 route the new peer n4's $c4" ||
        bad "after compaction and restart: n4's $c4 routed" "$(wlog n1 | tail -5)"
else
    bad "Node n4: podCIDR allocated"
fi
for n in n1 n2; do
    after=$(wlog "$n" | tail -n +"$(( $(cat "$STATE/$n.lines") + 1 ))")
    # A restarted kube-apiserver serves before its RBAC authorizer's informers
    # have synced: for a moment it refuses what RBAC allows (403 "cannot watch
    # resource"). Such a 403 within 2 s of its start is the server's; any other
    # is a bug in deploy/.
    n403=0 late=""
    while read -r line; do
        [[ -n $line ]] || continue
        n403=$(( n403 + 1 ))
        t=$(grep -o 'ts=[^ ]*' <<<"$line" | cut -c15-26)   # HH:MM:SS.mmm
        if ! awk -v a="$t" -v b="$serving" 'function s(x, p) { split(x, p, ":"); return p[1]*3600 + p[2]*60 + p[3] }
                                             BEGIN { d = s(a) - s(b); exit !(d >= -1 && d <= 2) }'; then
            late+="$line"$'\n'
        fi
    done < <(grep 'HTTP 403' <<<"$after")
    if [[ -z $late ]]; then
        ok "$n: $n403 watches refused (403) within 2 s of the restarted API server's start ($serving), none later"
    else
        bad "$n: a 403 later than 2 s after the API server's start ($serving)" "$late"
    fi
    g=$(grep -c '410 Gone' <<<"$after")
    if (( g > 0 )); then
        ok "$n: $g watches got 410 Gone from the restarted API server and re-listed ($(grep -m1 '410 Gone' <<<"$after" | grep -o 'msg=.*' | cut -c1-160))"
    else
        bad "$n: a 410 after compaction and restart" "$(tail -5 <<<"$after")"
    fi
done

# The logs: no refusal (a 403 is a bug in deploy/), no error; warnings listed.
for n in n1 n2; do
    # Before the API server's restart (the 403s of its start are checked above).
    af=$(cat "$STATE/$n.af")
    [[ $af == 0 ]] && ok "$n: weft_controlplane_auth_failures_total 0 before the API server's restart" || bad "$n: auth failures" "$af"
    if wlog "$n" | head -n "$(cat "$STATE/$n.lines")" | grep -E '(^| )level=error|HTTP 403|[Ff]orbidden' > "$STATE/$n.errors"; then
        bad "$n: no error or 403 in weftd's log before the restart" "$(head -5 "$STATE/$n.errors")"
    else
        ok "$n: no error or 403 in weftd's log before the restart"
    fi
    if wlog "$n" | grep -E '(^| )level=error' > "$STATE/$n.errors"; then
        bad "$n: no error in weftd's log" "$(head -5 "$STATE/$n.errors")"
    else
        ok "$n: no error in weftd's log"
    fi
    w=$(wlog "$n" | grep -c 'level=warn')
    (( w == 0 )) || say "$n: $w warnings in weftd's log, e.g.: $(wlog "$n" | grep 'level=warn' | head -3)"
done
if [[ -n ${KEEP:-} ]]; then say "logs in $STATE/logs"; fi
summary
(( failed == 0 ))
