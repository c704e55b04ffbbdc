#!/usr/bin/env bash
# Weft under chaos on the real cluster (docs/reliability.md, "Chaos on the real cluster"): `scripts/cluster.sh
# up --nodes 2` with Weft from deploy/, three probers between pods on different nodes running all along, and
# faults one at a time, each several times.
#
# The probers (tests/k8s/chaos_prober.py, in the pods' network namespaces, entered from the host; every
# attempt is a line of its log):
#   denied     d1 (node 1) -> s2:8080 (node 2), which a NetworkPolicy refuses: a new TCP connection every
#              200 ms; one accepted is a leak
#   allowed    c1 (node 1) -> s2:8080: a new TCP connection every 200 ms
#   keepalive  c1 -> s2:8080 over one keep-alive HTTP connection, a request every 200 ms; a break is logged
#              and a new connection made
# The faults (ROUNDS times each, default 3; OUTAGE_ROUNDS for the three long ones, default 2):
#   weftd-kill     SIGKILL to weftd (node 1, node 2, node 1, ...); kubelet starts it again
#   weftd-delete   weftd's pod deleted; the DaemonSet makes a new one
#   rollout        weftd rolled to an image built from CHAOS_PREV_REF (default HEAD~1) and back (once a
#                  round; the image is built once, in a git worktree, with scripts/build.sh)
#   containerd     containerd restarted on a node
#   kubelet        kubelet restarted on a node
#   apiserver      a pod made on each node, and once the scheduler has bound them kube-apiserver stopped
#                  for OUTAGE_S (60): their sandboxes are made while it is away; after, both answer
#   etcd           the same with etcd stopped for OUTAGE_S
#   partition      node 2 cut off from the API server for PARTITION_S (90: its netns drops traffic to and
#                  from 192.0.2.1:6443) while a NetworkPolicy refusing c1 -> s3 (node 2) is made; after the
#                  cut, refused within 5 s
#   waves          WAVES (3) waves of WAVE_PODS (100) pods made and deleted (300 in all): after, each node's
#                  IPAM rows, veths and `weftctl doctor` as before
# After each fault, converged: both nodes Ready, both weftd pods Ready and updated, c1 -> s2 connects,
# d1 -> s2 does not; the seconds from the fault's end to that are a figure.
#
# Checks: no denied-pair leak in any round; the long-lived connection survives every round; every round
# converges within CONVERGE_S (180); the outage pods answer; the partition's policy within 5 s; no leaked
# address, veth or doctor finding after the waves. The figures (tests/k8s/chaos_report.py): per round and
# per fault, denied tries and leaks, the allowed pair's longest gap, the long-lived connection, the time to
# converge; written with the probers' logs to $WEFT_CLUSTER_STATE.chaos/ (kept after `down`).
#
#   sudo tests/k8s/cluster_chaos_test.sh                  # every fault, ~25 min on 2 cores
#   sudo FAULTS="weftd-kill partition" tests/k8s/cluster_chaos_test.sh
# KEEP=1 leaves the cluster up. Ends with "N passed, N failed".
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export WEFT_CLUSTER_STATE=${WEFT_CLUSTER_STATE:-$repo/build-k8s/cluster-chaos-test}
export WEFT_K8S_BIN=${WEFT_K8S_BIN:-$repo/build-k8s/bin}
C=$repo/scripts/cluster.sh
ALL_FAULTS="weftd-kill weftd-delete rollout containerd kubelet apiserver etcd partition waves"
FAULTS=${FAULTS:-$ALL_FAULTS}
ROUNDS=${ROUNDS:-3} OUTAGE_ROUNDS=${OUTAGE_ROUNDS:-2}
OUTAGE_S=${OUTAGE_S:-60} PARTITION_S=${PARTITION_S:-90} CONVERGE_S=${CONVERGE_S:-180}
WAVES=${WAVES:-3} WAVE_PODS=${WAVE_PODS:-100}
CHAOS_PREV_REF=${CHAOS_PREV_REF:-HEAD~1}
OUT=$WEFT_CLUSTER_STATE.chaos
passed=0 failed=0 failed_names=()
t0=$SECONDS
say() { echo "cluster_chaos_test: [$(( SECONDS - t0 ))s] $*" >&2; }
source "$repo/tests/k8s/lib.sh"

for f in $FAULTS; do
    [[ " $ALL_FAULTS " == *" $f "* ]] || { echo "cluster_chaos_test: unknown fault $f (of: $ALL_FAULTS)" >&2; exit 2; }
done
for b in etcd kube-apiserver kubectl kubelet pause agnhost; do
    [[ -x $WEFT_K8S_BIN/$b ]] || { echo "cluster_chaos_test: $WEFT_K8S_BIN/$b is missing (scripts/k8s-build.sh)" >&2; exit 1; }
done
for t in containerd ctr runc podman jq python3 git; do
    command -v "$t" >/dev/null || { echo "cluster_chaos_test: $t is missing (scripts/setup.sh)" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { say "needs root"; exit 1; }

prober_pids=() wt=""
cleanup() {
    local rc=$?
    touch "$OUT"/{denied,allowed,keepalive}.jsonl.stop 2>/dev/null
    (( ${#prober_pids[@]} )) && kill "${prober_pids[@]}" 2>/dev/null
    # A fault still under way (a `cluster.sh restart --down-for` asleep) must not start its component later
    # into whatever cluster is there by then.
    pkill -TERM -P $$ 2>/dev/null
    [[ -n $wt ]] && git -C "$repo" worktree remove --force "$wt" 2>/dev/null
    if [[ -n ${KEEP:-} ]]; then say "KEEP set: cluster left up (WEFT_CLUSTER_STATE=$WEFT_CLUSTER_STATE scripts/cluster.sh down)"; return; fi
    "$C" down >/dev/null 2>&1 || say "cluster.sh down failed"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$OUT" && mkdir -p "$OUT"
"$C" down >/dev/null 2>&1 || true
say "scripts/cluster.sh up --nodes 2 (results: $OUT)"
up_out=$("$C" up --nodes 2 2>"$OUT/up.log")
if (( $? != 0 )) || [[ $(tail -n1 <<<"$up_out") != KUBECONFIG=* ]]; then
    tail -n 40 "$OUT/up.log" >&2; bad "cluster up with 2 nodes"; summary; exit 1
fi
ok "cluster up with 2 nodes"
eval "$("$C" env)"
N1=$PREFIX-n1 N2=$PREFIX-n2

# --- the pods, the policy, the probers -------------------------------------------
pod s2 "$N2"; pod s3 "$N2" "" s3; pod c1 "$N1" "" client; pod d1 "$N1" "" denied
netpol srv-from-client srv client
if ! poll 300 k wait --for=condition=Ready pod/s2 pod/s3 pod/c1 pod/d1 --timeout=5s; then
    bad "4 agnhost pods Ready"; summary; exit 1
fi
S2=$(ip4 s2) S3=$(ip4 s3)
cpid=$(pid_of c1 n1) dpid=$(pid_of d1 n1)
[[ -n $cpid && -n $dpid ]] || { bad "c1's and d1's processes found ('$cpid', '$dpid')"; summary; exit 1; }
# tcp_ok PID HOST: a TCP connection from PID's netns to HOST:8080 within 1 s.
tcp_ok() { nsenter -t "$1" -n timeout 1 bash -c "exec 3<>/dev/tcp/$2/8080" 2>/dev/null; }
check "c1 -> s2 connects before the faults" poll 60 tcp_ok "$cpid" "$S2"
refused_tcp() { ! tcp_ok "$@"; }
check "d1 -> s2 refused before the faults" poll 120 refused_tcp "$dpid" "$S2"

start_prober() { # start_prober PID NAME MODE ARGS...
    local pid=$1 name=$2; shift 2
    nsenter -t "$pid" -n python3 "$repo/tests/k8s/chaos_prober.py" "$1" "$S2" 8080 "$OUT/$name.jsonl" "${@:2}" &
    prober_pids+=($!)
}
start_prober "$dpid" denied connect 0.5
start_prober "$cpid" allowed connect 1
start_prober "$cpid" keepalive keepalive
check "the probers run (a line in each log)" poll 30 bash -c \
    "test -s '$OUT/denied.jsonl' && test -s '$OUT/allowed.jsonl' && test -s '$OUT/keepalive.jsonl'"

mark() { printf '{"fault": "%s", "round": %d, "ev": "%s", "t": %s}\n' "$1" "$2" "$3" "$(date +%s.%N)" >> "$OUT/marks.jsonl"; }
weftd_ready() {
    [[ $(k -n kube-system get ds weftd -o jsonpath='{.status.numberReady}/{.status.updatedNumberScheduled}/{.status.desiredNumberScheduled}') == 2/2/2 ]]
}
converged() {
    k wait --for=condition=Ready node --all --timeout=2s >/dev/null 2>&1 && weftd_ready &&
        tcp_ok "$cpid" "$S2" && ! tcp_ok "$dpid" "$S2"
}
# The scheduler and the controller manager exit when they lose their leader lease (an API server or etcd outage
# longer than its renew deadline) or when kube-scheduler finds its cache corrupted; on a real control plane the
# kubelet starts their static pods again. cluster.sh runs them as plain processes, so this does it, says so, and
# counts it (control-plane-restarts.txt): the cluster's harness, not Weft.
supervise_control_plane() {
    local comp
    for comp in kube-scheduler kube-controller-manager; do
        if "$C" status 2>/dev/null | grep -q "^  $comp: not running"; then
            say "$comp had exited (as after a lost lease); started again, as the kubelet restarts a static pod"
            echo "$1 round $2: $comp" >> "$OUT/control-plane-restarts.txt"
            "$C" restart "$comp" >/dev/null 2>&1 || bad "$comp started again after $1 round $2"
        fi
    done
}
# settle FAULT ROUND: the fault ended; marks its convergence (or says it never came).
settle() {
    mark "$1" "$2" end
    supervise_control_plane "$1" "$2"
    if poll "$CONVERGE_S" converged; then
        mark "$1" "$2" converged
    else
        bad "$1 round $2: converged within ${CONVERGE_S}s"
    fi
}
node_of_round() { echo "n$(( ($1 - 1) % 2 + 1 ))"; }
weftd_pid() { # weftd_pid NODE: weftd's host pid in NODE's netns
    local p
    for p in $(ip netns pids "$PREFIX-$1" 2>/dev/null); do
        [[ $(cat "/proc/$p/comm" 2>/dev/null) == weftd ]] && { echo "$p"; return; }
    done
}
weftd_pod() { k -n kube-system get pods -l app=weftd --field-selector "spec.nodeName=$PREFIX-$1" -o jsonpath='{.items[0].metadata.name}'; }
readyz() { in_node "$1" curl -sf --max-time 2 http://127.0.0.1:9641/readyz >/dev/null; }

fault_weftd-kill() {
    local r=$1 n old; n=$(node_of_round "$r"); old=$(weftd_pid "$n")
    [[ -n $old ]] || { bad "weftd-kill round $r: weftd's pid on $n"; return; }
    mark weftd-kill "$r" start
    kill -KILL "$old"
    new_weftd() { local p; p=$(weftd_pid "$n"); [[ -n $p && $p != "$old" ]] && readyz "$n"; }
    poll "$CONVERGE_S" new_weftd || bad "weftd-kill round $r: a new weftd on $n answers /readyz"
    settle weftd-kill "$r"
}
fault_weftd-delete() {
    local r=$1 n old; n=$(node_of_round "$r"); old=$(weftd_pod "$n")
    mark weftd-delete "$r" start
    k -n kube-system delete pod "$old" --wait=false >/dev/null
    new_pod() { local p; p=$(weftd_pod "$n"); [[ -n $p && $p != "$old" ]] && readyz "$n"; }
    poll "$CONVERGE_S" new_pod || bad "weftd-delete round $r: a new weftd pod on $n answers /readyz"
    settle weftd-delete "$r"
}
build_prev_image() {
    local ref build
    ref=$(git -C "$repo" rev-parse --short "$CHAOS_PREV_REF") || return 1
    wt=$OUT/prev-src build=$OUT/prev-build
    say "rollout: building weftd at $CHAOS_PREV_REF ($ref) in a worktree"
    git -C "$repo" worktree add --detach "$wt" "$ref" >/dev/null 2>&1 || return 1
    WEFT_BUILD_DIR=$build "$wt/scripts/build.sh" weftd weftctl weft >"$OUT/prev-build.log" 2>&1 || return 1
    WEFT_IMAGE=localhost/weft/weftd:chaos-$PREFIX "$wt/deploy/build-image.sh" --prebuilt "$build" \
        >>"$OUT/prev-build.log" 2>&1 || return 1
    podman save -q -o "$OUT/prev-image.tar" "localhost/weft/weftd:chaos-$PREFIX" || return 1
    podman untag "localhost/weft/weftd:chaos-$PREFIX" "localhost/weft/weftd:chaos-$PREFIX" >/dev/null 2>&1
    local n
    for n in n1 n2; do
        nsenter --net="/run/netns/$PREFIX-$n" --mount="$STATE/ns/$n.mnt" ctr --address /run/containerd/containerd.sock \
            -n k8s.io images import "$OUT/prev-image.tar" >/dev/null || return 1
        nsenter --net="/run/netns/$PREFIX-$n" --mount="$STATE/ns/$n.mnt" ctr --address /run/containerd/containerd.sock \
            -n k8s.io images tag --force "localhost/weft/weftd:chaos-$PREFIX" docker.io/weft/weftd:chaos-prev >/dev/null ||
            return 1
    done
    git -C "$repo" worktree remove --force "$wt" && wt=""
    PREV_COMMIT=$ref
}
fault_rollout() {
    local r=$1 cur
    if [[ -z ${PREV_COMMIT:-} ]] && ! build_prev_image; then
        bad "rollout: an image of $CHAOS_PREV_REF (log: $OUT/prev-build.log)"; return
    fi
    cur=$(k -n kube-system get ds weftd -o jsonpath='{.spec.template.spec.containers[0].image}')
    mark rollout "$r" start
    k -n kube-system set image ds/weftd weftd=weft/weftd:chaos-prev install-plugin=weft/weftd:chaos-prev >/dev/null
    k -n kube-system rollout status ds/weftd --timeout=600s >/dev/null ||
        bad "rollout round $r: to weftd $PREV_COMMIT"
    got=$(k -n kube-system get pods -l app=weftd -o jsonpath='{.items[*].spec.containers[0].image}')
    check "rollout round $r: both weftd pods ran $PREV_COMMIT's image ($got)" \
        test "$got" = "weft/weftd:chaos-prev weft/weftd:chaos-prev"
    k -n kube-system set image ds/weftd weftd="$cur" install-plugin="$cur" >/dev/null
    k -n kube-system rollout status ds/weftd --timeout=600s >/dev/null || bad "rollout round $r: back to $cur"
    settle rollout "$r"
}
fault_containerd() {
    local r=$1 n; n=$(node_of_round "$r")
    mark containerd "$r" start
    "$C" restart "containerd-$n" >/dev/null 2>&1 || bad "containerd round $r: restart on $n"
    settle containerd "$r"
}
fault_kubelet() {
    local r=$1 n; n=$(node_of_round "$r")
    mark kubelet "$r" start
    "$C" restart "kubelet-$n" >/dev/null 2>&1 || bad "kubelet round $r: restart on $n"
    settle kubelet "$r"
}
# outage FAULT COMPONENT ROUND: pods o1 (node 1) and o2 (node 2), bound, then COMPONENT away for OUTAGE_S.
outage() {
    local fault=$1 comp=$2 r=$3 p a b
    # Names of this fault and round: an earlier outage's pods may still be terminating.
    a=o1-$fault-$r b=o2-$fault-$r
    supervise_control_plane "$fault" "$r"
    pod "$a" "$N1" "" outage; pod "$b" "$N2" "" outage
    bound() { [[ -n $(k get pod "$a" -o jsonpath='{.spec.nodeName}') && -n $(k get pod "$b" -o jsonpath='{.spec.nodeName}') ]]; }
    poll 60 bound || bad "$fault round $r: $a and $b bound before the outage"
    mark "$fault" "$r" start
    "$C" restart "$comp" --down-for "$OUTAGE_S" >/dev/null 2>&1 || bad "$fault round $r: $comp back after ${OUTAGE_S}s"
    local t_back ip secs
    t_back=$(date +%s.%N)
    settle "$fault" "$r"
    # The seconds from the outage's end to each pod answering are a figure (outage-pods.jsonl): weftd learns of
    # the pods once its watches are back, and it reaches the API server through the kubernetes Service, so
    # after a restart of kube-apiserver that waits for kube-proxy to have the endpoint again.
    if poll 180 k wait --for=condition=Ready "pod/$a" "pod/$b" --timeout=5s; then
        for p in "$a" "$b"; do
            ip=$(ip4 "$p")
            if poll 150 tcp_ok "$cpid" "$ip"; then
                secs=$(python3 -c "import time; print(round(time.time() - $t_back, 1))")
                echo "{\"fault\": \"$fault\", \"round\": $r, \"pod\": \"$p\", \"answers_after_s\": $secs}" >> "$OUT/outage-pods.jsonl"
                ok "$fault round $r: $p, made during the outage, answers c1 ($ip) ${secs}s after the outage"
            else
                bad "$fault round $r: $p, made during the outage, answers c1 ($ip) within 150 s of the outage"
            fi
        done
    else
        bad "$fault round $r: $a and $b Ready after the outage"
    fi
    k delete pod "$a" "$b" --wait=false >/dev/null
}
fault_apiserver() { outage apiserver kube-apiserver "$1"; }
fault_etcd() { outage etcd etcd "$1"; }
fault_partition() {
    local r=$1 t_end t_enf
    mark partition "$r" start
    in_node n2 nft -f - <<EOF
table inet wchaos-cut {
  chain out { type filter hook output priority -300; ip daddr 192.0.2.1 tcp dport 6443 drop; }
  chain in { type filter hook input priority -300; ip saddr 192.0.2.1 tcp sport 6443 drop; }
}
EOF
    sleep 10
    netpol s3-deny-all s3
    sleep $(( PARTITION_S - 10 ))
    check "partition round $r: c1 -> s3 still connects at the end of the cut (node 2 has not heard of the policy)" \
        tcp_ok "$cpid" "$S3"
    in_node n2 nft delete table inet wchaos-cut
    t_end=$(date +%s.%N)
    refused_s3() { ! tcp_ok "$cpid" "$S3"; }
    if poll 60 refused_s3; then
        t_enf=$(date +%s.%N)
        secs=$(python3 -c "print(round($t_enf - $t_end, 1))")
        echo "{\"fault\": \"partition\", \"round\": $r, \"enforced_after_s\": $secs}" >> "$OUT/partition.jsonl"
        check "partition round $r: the policy made during the cut enforced ${secs}s after it (<= 5 s)" \
            python3 -c "import sys; sys.exit(0 if $secs <= 5 else 1)"
    else
        bad "partition round $r: the policy made during the cut enforced within 60 s of its end"
    fi
    settle partition "$r"
    k delete networkpolicy s3-deny-all >/dev/null
    check "partition round $r: c1 -> s3 connects again once the policy is deleted" poll 60 tcp_ok "$cpid" "$S3"
}
# node_state N: IPAM rows, host veths, on node N.
node_state() {
    local db rows
    db=$(find "$STATE/nodes/$1/var-lib/weft" -name '*.db' 2>/dev/null | head -n1)
    rows=$(sqlite3 "file:$db?mode=ro" 'SELECT count(*) FROM pods' 2>/dev/null)
    echo "rows=${rows:-?} veths=$(ip -n "$PREFIX-$1" -o link show type veth | wc -l)"
}
# doctor_clean N: `weftctl doctor` on node N finds nothing, every check run: from the node's shell (its network
# and mount namespaces, root: the NetworkPolicy comparison, stale set elements and chains included, needs the
# private netns a pod cannot make), exit 0; and in its weftd pod, as an operator runs it, no discrepancy (exit 5
# would say one; 1 says the policy comparison could not run there, docs/weftctl.md).
doctor_clean() {
    local rc=0
    k -n kube-system exec "$(weftd_pod "$1")" -c weftd -- weftctl doctor >"$OUT/doctor-pod-$1.txt" 2>&1 || rc=$?
    (( rc != 5 )) && grep -q 'no discrepancies' "$OUT/doctor-pod-$1.txt" || return 1
    nsenter --net="/run/netns/$PREFIX-$1" --mount="$STATE/ns/$1.mnt" "${WEFT_BUILD:-$repo/build}/cmd/weftctl/weftctl" \
        doctor --kubeconfig "$STATE/admin.kubeconfig" >"$OUT/doctor-$1.txt" 2>&1
}
fault_waves() {
    local w before1 before2
    # The outages' pods are deleted without waiting: gone first, or their rows would count in "before".
    no_outage_pods() { [[ -z $(k get pods -l app=outage -o name) ]]; }
    poll 120 no_outage_pods || bad "waves: the outages' pods gone before the waves"
    before1=$(node_state n1) before2=$(node_state n2)
    say "waves: before n1 $before1, n2 $before2"
    k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: wave}
spec:
  replicas: 0
  selector: {matchLabels: {app: wave}}
  template:
    metadata: {labels: {app: wave}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: pause, image: registry.k8s.io/e2e-test-images/agnhost:2.63.0, args: [pause]}
EOF
    for (( w = 1; w <= WAVES; w++ )); do
        mark waves "$w" start
        k scale deploy/wave --replicas="$WAVE_PODS" >/dev/null
        k rollout status deploy/wave --timeout=900s >/dev/null || bad "waves $w: $WAVE_PODS pods Ready"
        k scale deploy/wave --replicas=0 >/dev/null
        gone() { [[ -z $(k get pods -l app=wave -o name) ]]; }
        poll 600 gone || bad "waves $w: every pod of the wave gone"
        settle waves "$w"
    done
    k delete deploy/wave >/dev/null
    same() { [[ $(node_state n1) == "$before1" && $(node_state n2) == "$before2" ]]; }
    poll 120 same
    check "waves: n1 as before ($before1 -> $(node_state n1))" test "$(node_state n1)" = "$before1"
    check "waves: n2 as before ($before2 -> $(node_state n2))" test "$(node_state n2)" = "$before2"
    for n in n1 n2; do
        check "waves: weftctl doctor on $n, from the node and in its weftd pod, finds nothing ($OUT/doctor-$n.txt)" \
            doctor_clean "$n"
    done
}

for f in $FAULTS; do
    rounds=$ROUNDS
    [[ $f == apiserver || $f == etcd || $f == partition ]] && rounds=$OUTAGE_ROUNDS
    [[ $f == waves ]] && rounds=1
    for (( r = 1; r <= rounds; r++ )); do
        say "fault $f, round $r of $rounds"
        "fault_$f" "$r"
    done
done

touch "$OUT"/{denied,allowed,keepalive}.jsonl.stop
wait "${prober_pids[@]}" 2>/dev/null; prober_pids=()
python3 "$repo/tests/k8s/chaos_report.py" "$OUT" | tee "$OUT/report.txt"
res=$(grep '^CHAOS_RESULT ' "$OUT/report.txt" | cut -d' ' -f2-)
check "denied pair: 0 of $(jq .denied_attempts <<<"$res") attempts accepted over the run" jq_true '.denied_leaks == 0' - <<<"$res"
check "every round has denied attempts (the prober ran throughout)" jq_true '[.rounds[].denied_tries] | all(. > 0)' - <<<"$res"
check "the long-lived connection survived every round ($(jq -c '[.rounds[] | select(.keepalive_survived | not) | "\(.fault) \(.round)"]' <<<"$res") broke)" \
    jq_true '[.rounds[].keepalive_survived] | all' - <<<"$res"
check "every round converged" jq_true '[.rounds[].converge_s] | all(. != null)' - <<<"$res"

trap - EXIT
if [[ -n ${KEEP:-} ]]; then say "KEEP set: cluster left up"; summary; exit $(( failed > 0 )); fi
"$C" down >/dev/null 2>&1
check "down: no netns of $PREFIX left" bash -c "! ip netns list | grep -q '^$PREFIX'"
say "done in $(( SECONDS - t0 ))s (figures: $OUT/report.txt)"
summary
exit $(( failed > 0 ))
