# Helpers of the real-cluster suites (cluster_nodes_test.sh, cluster_chaos_test.sh), sourced after the
# suite set C (scripts/cluster.sh); PREFIX and STATE come from `"$C" env` once the cluster is up.
# Counters: passed, failed, failed_names (the suite initialises them).

ok() { passed=$(( passed + 1 )); echo "PASS $1"; }
bad() { failed=$(( failed + 1 )); failed_names+=("$1"); echo "FAIL $1${2:+: $2}"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
# jq_true FILTER FILE|-: jq's verdict on FILE (- reads stdin), its output
# dropped (a redirect after `check ...` would swallow check's PASS/FAIL line).
jq_true() { jq -e "$1" "$2" >/dev/null; }
# The last lines name every failed check again (a log cut to its tail still says which).
summary() {
    local f
    for f in "${failed_names[@]}"; do echo "failed: $f"; done
    echo "$passed passed, $failed failed"
}

k() { "$C" kubectl "$@"; }
# poll SECONDS CMD...: true once CMD succeeds within SECONDS.
poll() {
    local end=$(( SECONDS + $1 )); shift
    until "$@" >/dev/null 2>&1; do (( SECONDS >= end )) && return 1; sleep 0.5; done
}

in_node() { local n=$1; shift; ip netns exec "$PREFIX-$n" "$@"; }

pod() { # pod NAME NODE [HOSTPORT]: an agnhost netexec pod on NODE via nodeSelector (the scheduler binds it)
    local hp=""
    [[ -n ${3:-} ]] && hp="ports: [{containerPort: 8080, hostPort: $3, protocol: TCP}]"
    k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: ${4:-srv}}}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  terminationGracePeriodSeconds: 1
  containers:
  - name: agnhost
    image: registry.k8s.io/e2e-test-images/agnhost:2.63.0
    args: [netexec, --http-port=8080, --udp-port=8081]
    $hp
EOF
}

# netpol NAME APP [FROM_APP]: a NetworkPolicy on the pods app=APP: ingress only from the pods app=FROM_APP,
# or (without it) from nobody.
netpol() {
    local ingress=""
    [[ -n ${3:-} ]] && ingress="ingress: [{from: [{podSelector: {matchLabels: {app: $3}}}]}]"
    k apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: $1}
spec:
  podSelector: {matchLabels: {app: $2}}
  policyTypes: [Ingress]
  $ingress
EOF
}

ip4() { k get pod "$1" -o jsonpath='{.status.podIPs[0].ip}'; }
ip6() { k get pod "$1" -o jsonpath='{.status.podIPs[1].ip}'; }

# dial FROM HOST PORT PROTO NODE: netexec on pod FROM dials HOST:PORT once and
# returns its JSON (the e2e framework's way; netexec gives each try 5 s);
# asked from FROM's node.
dial() {
    local from_ip=$1 host=$2 port=$3 proto=$4 node=$5
    in_node "$node" curl -sg --max-time 20 \
        "http://$from_ip:8080/dial?request=hostname&protocol=$proto&host=$host&port=$port&tries=1"
}
answers() { jq -r '.responses // [] | join(",")' 2>/dev/null; }
# answer FROM HOST PORT PROTO NODE: the answer of the first of up to 3 dials
# that got one (a lost first UDP datagram or a stalled machine is not a
# refusal; a refused pod never answers, however often it is asked).
answer() {
    local i got=""
    for i in 1 2 3; do
        got=$(dial "$@" | answers)
        [[ -n $got ]] && break
    done
    echo "$got"
}
# refused FROM HOST PORT PROTO NODE: netexec answered and its dial failed
# (errors, no response): a refusal, not a dial that never came back.
refused() { dial "$@" | jq -e '((.responses // []) | length) == 0 and ((.errors // []) | length) > 0' >/dev/null 2>&1; }

# pid_of POD NODE: the host pid of POD's container (to enter its netns).
pid_of() {
    local cid
    cid=$(k get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
    cid=${cid#containerd://}
    nsenter --net="/run/netns/$PREFIX-$2" --mount="$STATE/ns/$2.mnt" ctr --address /run/containerd/containerd.sock \
        -n k8s.io tasks ls 2>/dev/null | awk -v id="$cid" '$1 == id {print $2}'
}
