#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, without Docker, for trying
# and testing Weft against the real API server (docs/cluster.md).
#
#   scripts/cluster.sh up [--dual-stack]   start it; exits 0 once healthy, last line KUBECONFIG=<path>
#   scripts/cluster.sh down                stop and remove everything `up` made (also after a crash
#                                          or a kill -9 of `up`)
#   scripts/cluster.sh status              what runs (exit 0 all of it, 1 part of it, 3 nothing)
#   scripts/cluster.sh kubectl ARGS...     the built kubectl, as cluster-admin, inside the run's netns
#   scripts/cluster.sh netns               the control plane's network namespace (for `ip netns exec`)
#   scripts/cluster.sh env                 the run's variables (PREFIX, CP_NS, STATE, BIN, API, ...)
#   scripts/cluster.sh node-ns NAME N      a network namespace <prefix>-NAME on the control plane's
#                                          bridge, address 192.0.2.(10+N)/24 on its eth0, default route
#                                          via the control plane (which has no way out); removed by `down`
#   scripts/cluster.sh run NAME NS CMD...  CMD detached in netns NS, its log in <state>/logs/NAME.log;
#                                          stopped by `down`
#   scripts/cluster.sh restart NAME        stop a component (etcd, kube-apiserver, ...) or a `run`
#                                          process and start it again as it was
#
# Binaries: build-k8s/bin (scripts/k8s-build.sh; `up` builds them when one is
# missing). So far the control plane alone: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, in a network namespace of their own
# named <prefix>-cp, where <prefix> is new for every run (wk + 4 hex digits).
# Nodes come in later steps (issue 21).
#
# The machine's root network namespace is never touched: every link is made
# inside the run's namespaces, and every address is one of theirs
# (192.0.2.0/24, the documentation range, on a bridge in <prefix>-cp).
#
# State (WEFT_CLUSTER_STATE, default build-k8s/cluster): certificates,
# kubeconfigs, data, logs, and the records `down` works from — netns names,
# written BEFORE each namespace is made, and pid files, written by each
# process itself before it execs — so `down` finds everything even when `up`
# died half-way. One cluster per state dir.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BIN=${WEFT_K8S_BIN:-$repo/build-k8s/bin}
STATE=${WEFT_CLUSTER_STATE:-$repo/build-k8s/cluster}
API_IP=192.0.2.1
API_PORT=6443
API=https://$API_IP:$API_PORT

log() { echo "cluster.sh: [$(( SECONDS ))s] $*" >&2; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_root() { [[ $(id -u) == 0 ]] || die "needs root (network namespaces)"; }

# Reads the run's prefix from the state dir; empty when none.
prefix() { cat "$STATE/prefix" 2>/dev/null || true; }

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# --- processes -----------------------------------------------------------

# start NAME NS BIN ARGS...: runs BIN in netns NS, detached (own session),
# output to $STATE/logs/NAME.log; the process writes its own pid file before it
# execs, so a kill -9 of `up` right after the fork still leaves a record. The
# lock (fd 9) is not inherited: a daemon holding it would block every `down`.
start() {
    local name=$1 ns=$2; shift 2
    local pidf=$STATE/pids/$name.pid
    rm -f "$pidf"
    printf '%s\0' "$ns" "$@" > "$STATE/pids/$name.cmd"   # for `restart`
    ip netns exec "$ns" setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidf" "$@" \
        </dev/null >>"$STATE/logs/$name.log" 2>&1 9>&- &
    local i
    for (( i = 0; i < 100; i++ )); do [[ -s $pidf ]] && return 0; sleep 0.05; done
    die "$name did not start (see $STATE/logs/$name.log)"
}

# alive NAME: the process of the pid file runs and is still the binary we started.
alive() {
    local pidf=$STATE/pids/$1.pid pid
    pid=$(cat "$pidf" 2>/dev/null) || return 1
    [[ -n $pid && -d /proc/$pid ]] || return 1
    grep -qa -- "$STATE\|$BIN" "/proc/$pid/cmdline" 2>/dev/null
}

# --- certificates (openssl) ----------------------------------------------

# cert NAME SUBJECT EXT: a key (P-256) and a certificate signed by the run's CA.
cert() {
    local name=$1 subj=$2 ext=$3 d=$STATE/pki
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/$name.key" 2>/dev/null
    openssl req -new -key "$d/$name.key" -subj "$subj" -out "$d/$name.csr" 2>/dev/null
    printf '%s\n' "$ext" > "$d/$name.ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -sha256 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
    rm -f "$d/$name.csr" "$d/$name.ext"
}

make_pki() {
    local d=$STATE/pki
    mkdir -p "$d"
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$d/ca.key" -subj "/CN=weft-cluster-ca-$PREFIX" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$d/ca.crt" 2>/dev/null
    local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$API_IP,IP:127.0.0.1,IP:::1,IP:${SVC_CIDR4%.0/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
    cert controller-manager "/CN=system:kube-controller-manager" "$client"
    cert scheduler "/CN=system:kube-scheduler" "$client"
    cert apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" "$client"
    # The front proxy (aggregation layer), as kubeadm sets it up: a CA of its
    # own and the API server's client certificate for it. Without it every
    # controller logs that the requestheader CA bundle is missing.
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/front-proxy-ca.key" 2>/dev/null
    openssl req -x509 -new -key "$d/front-proxy-ca.key" -subj "/CN=weft-front-proxy-ca-$PREFIX" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$d/front-proxy-ca.crt" 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/front-proxy-client.key" 2>/dev/null
    openssl req -new -key "$d/front-proxy-client.key" -subj "/CN=front-proxy-client" 2>/dev/null |
        openssl x509 -req -CA "$d/front-proxy-ca.crt" -CAkey "$d/front-proxy-ca.key" -CAcreateserial -days 30 \
            -sha256 -extfile <(printf '%s\n' "$client") -out "$d/front-proxy-client.crt" 2>/dev/null
    # The service-account signing key pair (RS256, as kubeadm makes it).
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$d/sa.key" 2>/dev/null
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
    chmod 600 "$d"/*.key
}

# kubeconfig NAME CERT: a kubeconfig for the client certificate CERT.
kubeconfig() {
    local name=$1 c=$2 d=$STATE/pki
    cat > "$STATE/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: weft
  cluster:
    server: $API
    certificate-authority: $d/ca.crt
users:
- name: $name
  user:
    client-certificate: $d/$c.crt
    client-key: $d/$c.key
contexts:
- name: weft
  context: {cluster: weft, user: $name}
current-context: weft
EOF
}

# --- health ----------------------------------------------------------------

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds, or dies naming WHAT
# and the tail of the log of the component that must be up.
wait_for() {
    local what=$1 limit=$2 logname=$3; shift 3
    local end=$(( SECONDS + limit ))
    until "$@" >/dev/null 2>&1; do
        if (( SECONDS >= end )) || ! alive "$logname"; then
            tail -n 20 "$STATE/logs/$logname.log" >&2 || true
            die "$what: not healthy after ${limit}s (log: $STATE/logs/$logname.log)"
        fi
        sleep 0.5
    done
}

curl_cp() { in_ns "$CP_NS" curl -sf --max-time 5 "$@"; }
etcd_ok() { curl_cp http://127.0.0.1:2379/health | grep -q '"health":"true"'; }
api_ok() {
    curl_cp --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
        "$API/readyz" | grep -qx ok
}
# /healthz is always allowed on the controller-manager and the scheduler.
cm_ok() { curl_cp -k https://127.0.0.1:10257/healthz | grep -qx ok; }
sched_ok() { curl_cp -k https://127.0.0.1:10259/healthz | grep -qx ok; }

# --- commands --------------------------------------------------------------

load_env() {
    PREFIX=$(prefix)
    [[ -n $PREFIX ]] || return 1
    CP_NS=$PREFIX-cp
    # shellcheck disable=SC1091
    [[ -r $STATE/cluster.env ]] && . "$STATE/cluster.env"
    return 0
}

cmd_up() {
    local dual=0
    while (( $# )); do
        case $1 in
            --dual-stack) dual=1 ;;
            --nodes|--proxy-mode) die "$1: no nodes yet (only the control plane; issue 21 step 2)" ;;
            *) usage ;;
        esac
        shift
    done
    need_root
    mkdir -p "$(dirname "$STATE")"
    exec 9>"$STATE.lock"
    flock -n 9 || die "another cluster.sh up/down runs on $STATE"
    if [[ -e $STATE/prefix ]]; then
        if status_quiet; then die "a cluster is already up ($(prefix)); scripts/cluster.sh down first"; fi
        log "removing what an earlier run left"
        do_down
    fi

    local b
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
        [[ -x $BIN/$b ]] && continue
        log "$BIN/$b is missing: building Kubernetes (scripts/k8s-build.sh; a cold build takes tens of minutes)"
        WEFT_K8S_BIN=$BIN "$repo/scripts/k8s-build.sh"
        break
    done

    rm -rf "$STATE"
    mkdir -p "$STATE"/{pids,logs,etcd}
    PREFIX=wk$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
    CP_NS=$PREFIX-cp
    echo "$PREFIX" > "$STATE/prefix"
    SVC_CIDR4=10.96.0.0/16
    CLUSTER_CIDR=10.244.0.0/16
    SVC_CIDR=$SVC_CIDR4
    if (( dual )); then
        CLUSTER_CIDR+=,fd00:10:244::/56
        SVC_CIDR+=,fd00:10:96::/108
    fi
    cat > "$STATE/cluster.env" <<EOF
PREFIX=$PREFIX
CP_NS=$CP_NS
STATE=$STATE
BIN=$BIN
API=$API
API_IP=$API_IP
CLUSTER_CIDR=$CLUSTER_CIDR
SVC_CIDR=$SVC_CIDR
SVC_CIDR4=$SVC_CIDR4
DUAL_STACK=$dual
KUBECONFIG=$STATE/admin.kubeconfig
EOF
    log "run $PREFIX: control plane in netns $CP_NS, state in $STATE"

    # The control plane's namespace: loopback and a bridge for the nodes'
    # veths to come, with the API server's address.
    echo "$CP_NS" >> "$STATE/netns"
    ip netns add "$CP_NS"
    ip -n "$CP_NS" link set lo up
    ip -n "$CP_NS" link add br0 type bridge
    ip -n "$CP_NS" addr add "$API_IP/24" dev br0
    ip -n "$CP_NS" link set br0 up

    make_pki
    kubeconfig admin admin
    kubeconfig controller-manager controller-manager
    kubeconfig scheduler scheduler

    local lb=http://127.0.0.1
    start etcd "$CP_NS" "$BIN/etcd" --name "$PREFIX" --data-dir "$STATE/etcd" \
        --listen-client-urls "$lb:2379" --advertise-client-urls "$lb:2379" \
        --listen-peer-urls "$lb:2380" --initial-advertise-peer-urls "$lb:2380" \
        --initial-cluster "$PREFIX=$lb:2380" --initial-cluster-state new --log-level warn
    wait_for etcd 60 etcd etcd_ok
    log "etcd healthy"

    # The audit log: every request of a client that is not part of the control
    # plane (weftd, kubectl, tests), with its answer's code.
    cat > "$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: [system:nodes]
- level: None
  users: [system:kube-controller-manager, system:kube-scheduler, system:apiserver]
- level: None
  userGroups: [system:serviceaccounts:kube-system]
  users: [$(printf '"system:serviceaccount:kube-system:%s",' attachdetach-controller bootstrap-signer certificate-controller clusterrole-aggregation-controller cronjob-controller daemon-set-controller deployment-controller disruption-controller endpoint-controller endpointslice-controller endpointslicemirroring-controller ephemeral-volume-controller expand-controller generic-garbage-collector horizontal-pod-autoscaler job-controller namespace-controller node-controller persistent-volume-binder pod-garbage-collector pv-protection-controller pvc-protection-controller replicaset-controller replication-controller resourcequota-controller root-ca-cert-publisher service-account-controller service-controller statefulset-controller token-cleaner ttl-after-finished-controller ttl-controller legacy-service-account-token-cleaner validatingadmissionpolicy-status-controller | sed 's/,$//')]
- level: Metadata
EOF
    local p=$STATE/pki
    start kube-apiserver "$CP_NS" "$BIN/kube-apiserver" \
        --etcd-servers "$lb:2379" \
        --advertise-address "$API_IP" --bind-address 0.0.0.0 --secure-port "$API_PORT" \
        --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
        --client-ca-file "$p/ca.crt" \
        --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$p/apiserver-kubelet-client.key" \
        --authorization-mode Node,RBAC \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
        --service-cluster-ip-range "$SVC_CIDR" \
        --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log" \
        --requestheader-client-ca-file "$p/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "$p/front-proxy-client.crt" --proxy-client-key-file "$p/front-proxy-client.key" \
        --allow-privileged=true --profiling=false --v=1
    wait_for kube-apiserver 120 kube-apiserver api_ok
    log "kube-apiserver ready at $API"

    local cm=(--node-cidr-mask-size-ipv4 24)
    (( dual )) && cm+=(--node-cidr-mask-size-ipv6 64)
    start kube-controller-manager "$CP_NS" "$BIN/kube-controller-manager" \
        --kubeconfig "$STATE/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
        --allocate-node-cidrs=true --cluster-cidr "$CLUSTER_CIDR" "${cm[@]}" \
        --service-cluster-ip-range "$SVC_CIDR" \
        --use-service-account-credentials=true \
        --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
        --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
        --controllers '*' --profiling=false --v=1
    start kube-scheduler "$CP_NS" "$BIN/kube-scheduler" \
        --kubeconfig "$STATE/scheduler.kubeconfig" \
        --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
        --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false --v=1
    wait_for kube-controller-manager 90 kube-controller-manager cm_ok
    wait_for kube-scheduler 90 kube-scheduler sched_ok
    # The controllers have their RBAC and the default namespaces exist.
    wait_for "namespace default" 60 kube-apiserver kctl get namespace default
    log "control plane healthy ($(kctl version -o json 2>/dev/null | jq -r .serverVersion.gitVersion))"
    echo "KUBECONFIG=$STATE/admin.kubeconfig"
}

kctl() { in_ns "$CP_NS" "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

# Stops every process of the run and removes its namespaces and its state dir.
do_down() {
    load_env || true
    local f pid ns
    # Every process that recorded itself, then every process left in one of the
    # run's namespaces (one whose pid file was never written is found there).
    for f in "$STATE"/pids/*.pid; do
        [[ -e $f ]] || continue
        if alive "$(basename "$f" .pid)"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
    done
    local namespaces=()
    [[ -r $STATE/netns ]] && mapfile -t namespaces < "$STATE/netns"
    for ns in "${namespaces[@]}"; do
        [[ -e /run/netns/$ns ]] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
    done
    local end=$(( SECONDS + 15 )) left
    while :; do
        left=""
        for f in "$STATE"/pids/*.pid; do
            [[ -e $f ]] && alive "$(basename "$f" .pid)" && left+=" $(cat "$f")"
        done
        for ns in "${namespaces[@]}"; do
            [[ -e /run/netns/$ns ]] && left+=" $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
        done
        [[ -z ${left// } ]] && break
        if (( SECONDS >= end )); then
            log "still running after 15s, SIGKILL:$left"
            for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    for ns in "${namespaces[@]}"; do
        [[ -e /run/netns/$ns ]] || continue
        ip netns del "$ns" || log "cannot delete netns $ns"
    done
    rm -rf "$STATE"
}

cmd_down() {
    need_root
    mkdir -p "$(dirname "$STATE")"
    exec 9>"$STATE.lock"
    flock 9
    if [[ ! -e $STATE ]]; then log "nothing to remove"; return 0; fi
    log "removing run $(prefix)"
    do_down
    log "down"
}

status_quiet() { cmd_status >/dev/null 2>&1; }

cmd_status() {
    if ! load_env; then echo "no cluster (state dir $STATE)"; return 3; fi
    local n=0 up=0 c pid
    echo "run $PREFIX, state $STATE"
    for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
        n=$(( n + 1 ))
        pid=$(cat "$STATE/pids/$c.pid" 2>/dev/null || echo -)
        if alive "$c"; then up=$(( up + 1 )); echo "  $c: running (pid $pid)"; else echo "  $c: not running"; fi
    done
    local ns
    while read -r ns; do
        if [[ -e /run/netns/$ns ]]; then echo "  netns $ns"; else echo "  netns $ns: missing"; fi
    done < <(cat "$STATE/netns" 2>/dev/null)
    if (( up == n )) && api_ok; then
        echo "  API $API ready; KUBECONFIG=$STATE/admin.kubeconfig (reachable inside $CP_NS)"
        return 0
    fi
    (( up == 0 )) && return 3
    return 1
}

# restart NAME: stops a process started by `start` (SIGTERM, SIGKILL after
# 30 s) and starts it again with the same namespace and arguments.
cmd_restart() {
    local name=$1 pid i
    need_root
    load_env || die "no cluster: scripts/cluster.sh up"
    [[ -r $STATE/pids/$name.cmd ]] || die "restart: no process $name"
    local -a cmd
    mapfile -d '' -t cmd < "$STATE/pids/$name.cmd"
    if alive "$name"; then
        pid=$(cat "$STATE/pids/$name.pid")
        kill -TERM "$pid"
        for (( i = 0; i < 300; i++ )); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
        [[ -d /proc/$pid ]] && kill -KILL "$pid" && sleep 0.5
    fi
    start "$name" "${cmd[@]}"
    case $name in
        etcd) wait_for etcd 60 etcd etcd_ok ;;
        kube-apiserver) wait_for kube-apiserver 120 kube-apiserver api_ok ;;
    esac
    log "$name restarted (pid $(cat "$STATE/pids/$name.pid"))"
}

# node-ns NAME N: see the header. Prints the namespace's name.
cmd_node_ns() {
    local name=$1 n=$2
    [[ $name =~ ^[a-z0-9]{1,6}$ && $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 200 )) ||
        die "node-ns NAME N: NAME is 1-6 of [a-z0-9], N in 1..200"
    need_root
    load_env || die "no cluster: scripts/cluster.sh up"
    local ns=$PREFIX-$name veth=$PREFIX$name
    echo "$ns" >> "$STATE/netns"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$CP_NS" link add "$veth" type veth peer name eth0 netns "$ns"
    ip -n "$CP_NS" link set "$veth" master br0 up
    ip -n "$ns" addr add "192.0.2.$(( 10 + n ))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$API_IP"
    echo "$ns"
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    kubectl)
        shift
        load_env || die "no cluster (state dir $STATE): scripts/cluster.sh up"
        kctl "$@" ;;
    netns) load_env || die "no cluster"; echo "$CP_NS" ;;
    node-ns) (( $# == 3 )) || usage; cmd_node_ns "$2" "$3" ;;
    restart) (( $# == 2 )) || usage; cmd_restart "$2" ;;
    run)
        (( $# >= 4 )) || usage
        need_root
        load_env || die "no cluster: scripts/cluster.sh up"
        [[ $2 =~ ^[A-Za-z0-9._-]+$ ]] || die "run: bad NAME $2"
        grep -qxF -- "$3" "$STATE/netns" || die "run: $3 is not a namespace of this run"
        shift; name=$1 ns=$2; shift 2
        start "$name" "$ns" "$@" ;;
    env) load_env || die "no cluster"; cat "$STATE/cluster.env" ;;
    e2e) shift; exec "$repo/scripts/k8s-e2e.sh" "$@" ;;   # the upstream e2e suite (docs/cluster.md)
    *) usage ;;
esac
