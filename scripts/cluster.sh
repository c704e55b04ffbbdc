#!/usr/bin/env bash
# A real Kubernetes on this machine, without Docker, for trying and testing
# Weft against the real API server, kubelet and kube-proxy (docs/cluster.md).
#
#   scripts/cluster.sh up [--nodes N] [--dual-stack] [--proxy-mode nftables|iptables|weft]
#                                          start it (default 2 nodes, nftables); exits 0 once every
#                                          node is Ready, last line KUBECONFIG=<path>. weft: no
#                                          kube-proxy on any node, weftd's Service proxy serves them
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
#   scripts/cluster.sh restart NAME [--down-for S]
#                                          stop a component (etcd, kube-apiserver, kubelet-n1, ...)
#                                          or a `run` process and start it again as it was (S seconds
#                                          after it stopped; default at once)
#   scripts/cluster.sh e2e [ARGS...]       the upstream sig-network e2e (scripts/k8s-e2e.sh)
#
# Binaries: build-k8s/bin (scripts/k8s-build.sh; `up` builds them when one is
# missing). The control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, in a network namespace of their own named <prefix>-cp, where
# <prefix> is new for every run (wk + 4 hex digits). Node N: network namespace
# <prefix>-nN, a mount namespace of its own (<state>/ns/nN.mnt) and a UTS
# namespace whose hostname is <prefix>-nN (<state>/ns/nN.uts), with
# containerd, kubelet and kube-proxy (none with --proxy-mode weft); its cgroup
# root /<prefix>-nN. Weft is installed from deploy/ (its image imported into
# each node's containerd); with --proxy-mode weft the manifest as
# docs/services.md ("Migrating from kube-proxy") says: service-proxy = true and
# the API server's address in KUBERNETES_SERVICE_HOST/PORT.
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
# The nodes' IPv6 network on the bridge (with --dual-stack), documentation range.
NODE_NET6=2001:db8:2::
# Images, tagged as upstream names them (kubelet's IfNotPresent never pulls).
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.63.0
# weftd's image: built as localhost/weft/weftd:cluster-<prefix> (a tag of the
# run's own: other worktrees' clusters build theirs at the same time), saved,
# untagged, and loaded into each node's containerd under the name
# deploy/weftd.yaml uses: the release in VERSION.
WEFT_IMAGE_NAME=docker.io/weft/weftd:$(cat "$repo/VERSION")

log() { echo "cluster.sh: [$(( SECONDS ))s] $*" >&2; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_root() { [[ $(id -u) == 0 ]] || die "needs root (network namespaces)"; }

# The tools `up` runs, each with its Debian package (scripts/setup.sh installs
# them all): a missing one is named before anything starts, not met later as
# "command not found" half-way through a node.
need_tools() {
    local t missing=()
    for t in jq:jq curl:curl openssl:openssl ip:iproute2 nft:nftables iptables:iptables \
             conntrack:conntrack nsenter:util-linux unshare:util-linux flock:util-linux \
             containerd:containerd ctr:containerd runc:runc podman:podman; do
        command -v "${t%%:*}" >/dev/null || missing+=("${t%%:*} (Debian package ${t#*:})")
    done
    (( ${#missing[@]} == 0 )) || die "missing tools: ${missing[*]}; scripts/setup.sh installs them"
}

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
    local -a enter=(ip netns exec "$ns")
    # "@nodeN": node N's network and mount namespaces.
    [[ $ns == @node* ]] && enter=(nsenter --net="/run/netns/$PREFIX-n${ns#@node}" --mount="$STATE/ns/n${ns#@node}.mnt"
                                  --uts="$STATE/ns/n${ns#@node}.uts")
    "${enter[@]}" setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidf" "$@" \
        </dev/null >>"$STATE/logs/$name.log" 2>&1 9>&- &
    # Up to 30 s: a fork and two execs, but a machine at load 60 has taken seconds.
    local i
    for (( i = 0; i < 600; i++ )); do [[ -s $pidf ]] && return 0; sleep 0.05; done
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
    local dual=0 nodes=2 proxy_mode=nftables
    while (( $# )); do
        case $1 in
            --dual-stack) dual=1 ;;
            --nodes)
                [[ ${2:-} =~ ^[0-9]+$ ]] && (( $2 <= 9 )) || die "--nodes N: N in 0..9 (got '${2:-}')"
                nodes=$2; shift ;;
            --proxy-mode)
                [[ ${2:-} == nftables || ${2:-} == iptables || ${2:-} == weft ]] ||
                    die "--proxy-mode: nftables, iptables (kube-proxy's modes) or weft (weftd's Service proxy, no kube-proxy) (got '${2:-}')"
                proxy_mode=$2; shift ;;
            *) usage ;;
        esac
        shift
    done
    need_root
    need_tools
    mkdir -p "$(dirname "$STATE")"
    exec 9>"$STATE.lock"
    flock -n 9 || die "another cluster.sh up/down runs on $STATE"
    if [[ -e $STATE/prefix ]]; then
        if status_quiet; then die "a cluster is already up ($(prefix)); scripts/cluster.sh down first"; fi
        log "removing what an earlier run left"
        do_down
    fi

    local b
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy pause agnhost; do
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
NODES=$nodes
PROXY_MODE=$proxy_mode
NODE_NET6=$NODE_NET6
KUBECONFIG=$STATE/admin.kubeconfig
EOF
    DUAL_STACK=$dual PROXY_MODE=$proxy_mode
    log "run $PREFIX: control plane in netns $CP_NS, state in $STATE"

    # The control plane's namespace: loopback and a bridge for the nodes'
    # veths to come, with the API server's address.
    echo "$CP_NS" >> "$STATE/netns"
    ip netns add "$CP_NS"
    ip -n "$CP_NS" link set lo up
    ip -n "$CP_NS" link add br0 type bridge
    ip -n "$CP_NS" addr add "$API_IP/24" dev br0
    (( dual )) && ip -n "$CP_NS" addr add "${NODE_NET6}1/64" dev br0 nodad
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
    wait_for etcd 120 etcd etcd_ok
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
        --kubelet-preferred-address-types InternalIP,Hostname \
        --allow-privileged=true --profiling=false --v=1
    wait_for kube-apiserver 240 kube-apiserver api_ok
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
    wait_for kube-controller-manager 180 kube-controller-manager cm_ok
    wait_for kube-scheduler 180 kube-scheduler sched_ok
    # The controllers have their RBAC and the default namespaces exist.
    wait_for "namespace default" 120 kube-apiserver kctl get namespace default
    log "control plane healthy ($(kctl version -o json 2>/dev/null | jq -r .serverVersion.gitVersion))"
    (( nodes > 0 )) && up_nodes "$nodes"
    echo "KUBECONFIG=$STATE/admin.kubeconfig"
}

# up_nodes N: N nodes, Weft installed from deploy/ by its DaemonSet, every node Ready.
up_nodes() {
    local nodes=$1 n
    # kube-apiserver's own client identity for kubelets (logs, exec): kubeadm
    # binds its group to cluster-admin; so do we.
    kctl create clusterrolebinding kubeadm:cluster-admins --clusterrole cluster-admin \
        --group kubeadm:cluster-admins >/dev/null
    cert kube-proxy "/CN=system:kube-proxy" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    kubeconfig kube-proxy kube-proxy
    log "images: build-k8s/images, pause and agnhost, weftd (deploy/build-image.sh --prebuilt)"
    prepare_images
    for (( n = 1; n <= nodes; n++ )); do make_node "$n"; done
    # The nodes start side by side (importing the images is most of it).
    local pids=()
    for (( n = 1; n <= nodes; n++ )); do start_node_daemons "$n" & pids+=($!); done
    for (( n = 1; n <= nodes; n++ )); do wait "${pids[n-1]}" || die "node $n did not start (above)"; done
    if [[ $PROXY_MODE == weft ]]; then
        log "$nodes node(s): containerd, kubelet started (no kube-proxy: weftd serves Services); waiting for them to register"
    else
        log "$nodes node(s): containerd, kubelet, kube-proxy started; waiting for them to register"
    fi
    # The deadlines below are generous: on a busy machine (load 30-80 on 2
    # cores) each step has taken several times what it takes idle.
    local end=$(( SECONDS + 300 ))
    until (( $(kctl get nodes -o name 2>/dev/null | wc -l) >= nodes )); do
        (( SECONDS < end )) || { tail -n 20 "$STATE/logs/kubelet-n1.log" >&2; die "nodes did not register in 300s"; }
        for (( n = 1; n <= nodes; n++ )); do
            alive "kubelet-n$n" || { tail -n 30 "$STATE/logs/kubelet-n$n.log" >&2; die "kubelet of node $n exited"; }
        done
        sleep 1
    done
    # Not Ready yet: no CNI configuration (recorded for the tests). Weft, as an
    # operator installs it.
    local cond
    for (( n = 1; n <= nodes; n++ )); do
        end=$(( SECONDS + 180 ))
        until cond=$(kctl get node "$PREFIX-n$n" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.reason}: {.message}{end}' 2>/dev/null) &&
              [[ $cond == *cni* ]]; do
            (( SECONDS < end )) || die "node $PREFIX-n$n: no Ready condition naming the CNI config after 180s ($cond)"
            sleep 0.5
        done
        echo "$cond" > "$STATE/nodes/n$n/ready-before-weft"
    done
    # weftd-own-node.yaml with it: weftd's first writes of its Node already go
    # through the policy that lets it write that Node only (docs/security.md).
    log "nodes registered, NotReady: ${cond#False }; kubectl apply -f deploy/weftd.yaml -f deploy/weftd-own-node.yaml"
    render_weftd_manifest > "$STATE/weftd.yaml"
    kctl apply -f "$STATE/weftd.yaml" -f "$repo/deploy/weftd-own-node.yaml" >/dev/null
    end=$(( SECONDS + 600 ))
    until kctl wait --for=condition=Ready node --all --timeout=5s >/dev/null 2>&1; do
        if (( SECONDS >= end )); then
            kctl get nodes -o wide >&2; kctl -n kube-system get pods -o wide >&2
            die "nodes not Ready after 600s (logs: $STATE/logs/kubelet-n*.log; kubectl -n kube-system logs ds/weftd)"
        fi
        sleep 2
    done
    log "$nodes node(s) Ready"
    # The control plane reaches the pods as a control-plane node of a real
    # cluster does (the API server's pods/proxy and services/proxy, webhooks):
    # a route to each node's pod CIDRs via that node, as a routed network
    # between hosts would have. Inside the run's namespaces only.
    local cidr via
    for (( n = 1; n <= nodes; n++ )); do
        for cidr in $(kctl get node "$PREFIX-n$n" -o jsonpath='{.spec.podCIDRs[*]}'); do
            via=192.0.2.$(( 10 + n ))
            [[ $cidr == *:* ]] && via=$NODE_NET6$(( 10 + n ))
            ip -n "$CP_NS" route replace "$cidr" via "$via"
        done
    done
}

kctl() { in_ns "$CP_NS" "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

# --- nodes -------------------------------------------------------------------

# The cgroup hierarchies a node's cgroup root is made in (kubelet's cgroupfs
# driver wants the root in every v1 one it uses; runc also makes each
# container's cgroup in the hybrid layout's v2 tree, "unified").
cgroup_hierarchies() {
    local c
    for c in cpu cpuacct cpuset memory devices freezer blkio pids hugetlb net_cls perf_event systemd unified; do
        [[ -d /sys/fs/cgroup/$c ]] && mountpoint -q "/sys/fs/cgroup/$c" && echo "$c"
    done
    return 0
}

# Values kubelet wants for machine-wide sysctls (setupKernelTunables). Inside a
# node's mount namespace a file holding the value is bind-mounted over each, so
# kubelet reads what it wants and writes nothing; the machine's stay as they are.
KUBELET_SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
                 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# node_exec N CMD...: CMD in node N's network, mount and UTS namespaces.
node_exec() {
    local n=$1; shift
    nsenter --net="/run/netns/$PREFIX-n$n" --mount="$STATE/ns/n$n.mnt" --uts="$STATE/ns/n$n.uts" "$@"
}

node_ctr() { local n=$1; shift; node_exec "$n" ctr --address /run/containerd/containerd.sock -n k8s.io "$@"; }

# make_node N: node N's namespaces, cgroup root, certificates and configuration.
# Every name is recorded in the state dir before it is made (`down` after a crash).
make_node() {
    local n=$1 name=n$1 node=$PREFIX-n$1 nd=$STATE/nodes/n$1 ip=192.0.2.$(( 10 + $1 ))
    cmd_node_ns "$name" "$n" >/dev/null
    in_ns "$node" sysctl -qw net.ipv4.ip_forward=1
    if (( DUAL_STACK )); then
        in_ns "$node" sysctl -qw net.ipv6.conf.all.forwarding=1
        # With forwarding on, accept_ra 1 ignores router advertisements; weftd
        # asks the node for 2 on its uplink (docs/weftd.md, "What the node provides").
        in_ns "$node" sysctl -qw net.ipv6.conf.eth0.accept_ra=2
        ip -n "$node" addr add "$NODE_NET6$(( 10 + n ))/64" dev eth0 nodad
        ip -n "$node" route add default via "${NODE_NET6}1"
    fi

    # The node's file system: its own /etc/cni, /opt, /var/lib, /var/log and
    # /run (a tmpfs), so hostPath volumes land in the node's own directories.
    mkdir -p "$nd"/{etc-cni/net.d,opt/cni/bin,var-lib/kubelet,var-lib/containerd,var-lib/weft,var-lib/weftd,var-log/pods,var-log/containers,sysctl}
    # The loopback CNI plugin, which containerd 1.6 calls for every sandbox's
    # lo (a real node has it from the kubernetes-cni / containernetworking-plugins package).
    cp /usr/lib/cni/loopback "$nd/opt/cni/bin/loopback"
    local kv f
    for kv in "${KUBELET_SYSCTLS[@]}"; do
        f=${kv%%=*}; echo "${kv#*=}" > "$nd/sysctl/${f//\//.}"
    done

    # The cgroup root: /<prefix>-nN in every hierarchy; kubelet's pods beneath.
    echo "$node" >> "$STATE/cgroups"
    local c
    for c in $(cgroup_hierarchies); do
        mkdir -p "/sys/fs/cgroup/$c/$node"
        if [[ $c == cpuset ]]; then
            cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$node/cpuset.cpus"
            cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$node/cpuset.mems"
        fi
    done

    # The mount namespace, kept by a bind mount of its nsfs file on a private mount.
    if ! mountpoint -q "$STATE/ns"; then
        mkdir -p "$STATE/ns"
        echo "$STATE/ns" >> "$STATE/mounts"
        mount --bind "$STATE/ns" "$STATE/ns"
        mount --make-private "$STATE/ns"
    fi
    : > "$STATE/ns/$name.mnt"
    echo "$STATE/ns/$name.mnt" >> "$STATE/mounts"
    # A UTS namespace of its own, whose hostname is the node's name, as on a
    # real node: a hostNetwork pod shares it (containerd gives such a pod the
    # runtime's), and upstream specs tell the nodes apart by that hostname.
    : > "$STATE/ns/$name.uts"
    echo "$STATE/ns/$name.uts" >> "$STATE/mounts"
    local binds=""
    for kv in "${KUBELET_SYSCTLS[@]}"; do
        f=${kv%%=*}
        binds+="mount --bind '$nd/sysctl/${f//\//.}' /proc/sys/$f; "
    done
    unshare --mount="$STATE/ns/$name.mnt" --uts="$STATE/ns/$name.uts" --propagation slave sh -ec "
        hostname '$node'
        mount -t tmpfs -o mode=755,size=256m tmpfs-$node /run
        mkdir -p /run/netns /run/containerd
        : > /run/xtables.lock
        mount --bind '$nd/etc-cni' /etc/cni
        mount --bind '$nd/opt' /opt
        mount --bind '$nd/var-lib' /var/lib
        mount --bind '$nd/var-log' /var/log
        $binds
        mount --make-rshared /"

    # Identities: kubelet's client (Node authorizer) and serving certificates.
    cert "node-$name" "/O=system:nodes/CN=system:node:$node" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    cert "kubelet-$name" "/CN=$node" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$ip,DNS:$node"
    kubeconfig "kubelet-$name" "node-$name"

    cat > "$nd/containerd.toml" <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  disable_apparmor = true
  # This machine withholds CAP_SYS_RESOURCE even from root: runc cannot lower
  # a container's oom_score_adj below containerd's own (kubelet asks -998 for
  # a sandbox; "nsexec: failed to update /proc/self/oom_score_adj: Permission
  # denied"), so containerd raises it to its own, as it does rootless.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
EOF
    local p=$STATE/pki
    cat > "$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here (docs/cluster.md); the node's own cgroup root, cgroupfs driver.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$node
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $p/kubelet-$name.crt
tlsPrivateKeyFile: $p/kubelet-$name.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [${SVC_CIDR4%.0/*}.10]
resolvConf: ""
# Every kubelet sees the whole machine's disks and memory: eviction off.
evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
protectKernelDefaults: false
serializeImagePulls: false
maxPods: 110
EOF
    cat > "$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: $PROXY_MODE
hostnameOverride: $node
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
clusterCIDR: $CLUSTER_CIDR
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# NodePorts on the node's own address (eth0), not on every local one.
nodePortAddresses: [primary]
# 0: kube-proxy leaves nf_conntrack_max and the hashsize (machine-wide) alone,
# and the established timeout as it is. CLOSE_WAIT's is set to upstream's 1h:
# the sysctl is the node's network namespace's own (the machine's stays at
# 60 s), and "KubeProxy should set TCP CLOSE_WAIT timeout" checks it.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 1h}
EOF
}

# start_node_daemons N: containerd, the images, kubelet and kube-proxy of node N.
start_node_daemons() {
    local n=$1 name=n$1 node=$PREFIX-n$1 nd=$STATE/nodes/n$1 ip=192.0.2.$(( 10 + $1 ))
    start "containerd-$name" "@node$n" containerd --config "$nd/containerd.toml" --log-level warn
    local i
    for (( i = 0; i < 600; i++ )); do
        node_ctr "$n" version >/dev/null 2>&1 && break
        alive "containerd-$name" || break
        sleep 0.2
    done
    node_ctr "$n" version >/dev/null 2>&1 ||
        { tail -n 20 "$STATE/logs/containerd-$name.log" >&2; die "containerd of $node does not answer"; }
    local t
    for t in "${IMAGE_TARS[@]}"; do
        node_ctr "$n" images import "$t" >/dev/null || die "importing $t into $node failed"
    done
    # The manifest names weft/weftd:0.1.0 (docker.io/weft/weftd:0.1.0 to the
    # runtime): the image is loaded under that name, as docs/deploy.md says.
    node_ctr "$n" images tag --force "$WEFT_IMAGE_LOCAL" "$WEFT_IMAGE_NAME" >/dev/null
    local node_ips=$ip
    (( DUAL_STACK )) && node_ips+=",$NODE_NET6$(( 10 + n ))"
    start "kubelet-$name" "@node$n" "$BIN/kubelet" --config "$nd/kubelet.yaml" \
        --kubeconfig "$STATE/kubelet-$name.kubeconfig" --hostname-override "$node" \
        --node-ip "$node_ips" --v=1
    [[ $PROXY_MODE == weft ]] ||
        start "kube-proxy-$name" "@node$n" "$BIN/kube-proxy" --config "$nd/kube-proxy.yaml" --v=1
}

# render_weftd_manifest: deploy/weftd.yaml as this run applies it (a copy in
# <state>/weftd.yaml). With --proxy-mode weft, as docs/services.md's migration
# says: the Service proxy on, and weftd told the API server's own address,
# since the `kubernetes` ClusterIP the kubelet puts in KUBERNETES_SERVICE_HOST
# is served by weftd itself once it runs (an env var the container declares
# wins over the kubelet's). Each edit is checked: a manifest that no longer
# has the line it replaces fails `up` instead of starting the wrong thing.
render_weftd_manifest() {
    local m=$repo/deploy/weftd.yaml
    if [[ $PROXY_MODE != weft ]]; then cat "$m"; return; fi
    grep -q '^    service-proxy = false$' "$m" || die "$m: no 'service-proxy = false' line to turn on"
    grep -q '^              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}$' "$m" ||
        die "$m: no NODE_NAME env entry to add KUBERNETES_SERVICE_HOST beside"
    sed -e 's/^    service-proxy = false$/    service-proxy = true/' \
        -e "/^              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\$/a\\
            - {name: KUBERNETES_SERVICE_HOST, value: \"$API_IP\"}\\
            - {name: KUBERNETES_SERVICE_PORT, value: \"$API_PORT\"}" "$m"
}

# podman_image_tar TAG TAR CONTEXT_FILE ENTRYPOINT: a FROM scratch image of one
# static binary, saved as TAR (for pause and agnhost when build-k8s/images has none).
podman_image_tar() {
    local tag=$1 tar=$2 file=$3 ctx
    ctx=$(mktemp -d)
    cp "$file" "$ctx/$(basename "$file")"
    printf 'FROM scratch\nCOPY %s /%s\nENTRYPOINT ["/%s"]\n' "$(basename "$file")" "$(basename "$file")" \
        "$(basename "$file")" > "$ctx/Containerfile"
    podman build -q -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
    podman save -q -o "$tar.tmp" "$tag" && mv "$tar.tmp" "$tar"
    podman rmi -f "$tag" >/dev/null 2>&1 || true
    rm -rf "$ctx"
}

# prepare_images: the tarballs every node imports. build-k8s/images/*.tar
# (scripts/k8s-images.sh: pause, agnhost, ... tagged as upstream); pause and
# agnhost made here from the built binaries when that dir has none; and the
# weftd image (deploy/build-image.sh --prebuilt build).
prepare_images() {
    IMAGE_TARS=()
    local t have="" own=$repo/build-k8s/images-min
    for t in "$repo"/build-k8s/images/*.tar; do
        [[ -e $t ]] || continue
        IMAGE_TARS+=("$t")
        have+=" $( (tar -xOf "$t" manifest.json 2>/dev/null || true) | tr -d '\n')"
    done
    mkdir -p "$own"
    if [[ $have != *"$PAUSE_IMAGE"* ]]; then
        [[ -s $own/pause.tar && $own/pause.tar -nt $BIN/pause ]] ||
            podman_image_tar "$PAUSE_IMAGE" "$own/pause.tar" "$BIN/pause"
        IMAGE_TARS+=("$own/pause.tar")
    fi
    if [[ $have != *"$AGNHOST_IMAGE"* ]]; then
        [[ -s $own/agnhost.tar && $own/agnhost.tar -nt $BIN/agnhost ]] ||
            podman_image_tar "$AGNHOST_IMAGE" "$own/agnhost.tar" "$BIN/agnhost"
        IMAGE_TARS+=("$own/agnhost.tar")
    fi
    local build=${WEFT_BUILD:-$repo/build}
    # The image holds all three (deploy/build-image.sh --prebuilt).
    if [[ ! -x $build/cmd/weftd/weftd || ! -x $build/cmd/weftctl/weftctl || ! -x $build/cmd/weft/weft ]]; then
        log "building weftd, weftctl and the plugin into $build"
        WEFT_BUILD_DIR=$build "$repo/scripts/build.sh" weftd weftctl weft >/dev/null
    fi
    WEFT_IMAGE_LOCAL=localhost/weft/weftd:cluster-$PREFIX
    WEFT_IMAGE=$WEFT_IMAGE_LOCAL "$repo/deploy/build-image.sh" --prebuilt "$build" >&2 ||
        die "deploy/build-image.sh --prebuilt $build failed"
    podman save -q -o "$STATE/weftd-image.tar" "$WEFT_IMAGE_LOCAL" || die "podman save $WEFT_IMAGE_LOCAL failed"
    # This run's name only: `podman untag IMAGE` alone removes every name of
    # the image, and a cluster starting beside this one with the same
    # binaries gets the same image (all layers cached) under its own name.
    podman untag "$WEFT_IMAGE_LOCAL" "$WEFT_IMAGE_LOCAL" >/dev/null 2>&1 || true
    IMAGE_TARS+=("$STATE/weftd-image.tar")
}


# run_pids: every process of the run that a namespace or cgroup shows: those in
# one of its network namespaces, in a node's mount namespace (kubelet,
# containerd, its shims) and in a node's cgroups (the pods' processes, which
# live in network namespaces containerd made).
run_pids() {
    local ns f ino c node
    for ns in "${namespaces[@]}"; do
        [[ -e /run/netns/$ns ]] && ip netns pids "$ns" 2>/dev/null
    done
    local inos=()
    for f in "$STATE"/ns/*.mnt; do
        [[ -e $f ]] && mountpoint -q "$f" && ino=$(stat -L -c %i "$f" 2>/dev/null) && inos+=("$ino")
    done
    if (( ${#inos[@]} )); then
        local expr=() i
        for i in "${inos[@]}"; do expr+=(${expr:+-o} -lname "mnt:\\[$i\\]"); done
        find /proc/[0-9]*/ns/mnt -maxdepth 0 \( "${expr[@]}" \) 2>/dev/null | cut -d/ -f3
    fi
    for node in "${cgroups[@]}"; do
        for c in $(cgroup_hierarchies); do
            [[ -d /sys/fs/cgroup/$c/$node ]] || continue
            find "/sys/fs/cgroup/$c/$node" -name cgroup.procs -exec cat {} + 2>/dev/null
        done
    done
    return 0
}

# Stops every process of the run and removes its namespaces, mounts, cgroups
# and its state dir.
do_down() {
    load_env || true
    local f pid ns
    local namespaces=() cgroups=() mounts=()
    [[ -r $STATE/netns ]] && mapfile -t namespaces < "$STATE/netns"
    [[ -r $STATE/cgroups ]] && mapfile -t cgroups < "$STATE/cgroups"
    [[ -r $STATE/mounts ]] && mapfile -t mounts < "$STATE/mounts"
    # Every process that recorded itself, then every process left in one of the
    # run's namespaces or cgroups (one whose pid file was never written is found there).
    for f in "$STATE"/pids/*.pid; do
        [[ -e $f ]] || continue
        if alive "$(basename "$f" .pid)"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
    done
    for pid in $(run_pids); do kill -TERM "$pid" 2>/dev/null || true; done
    local end=$(( SECONDS + 15 )) left
    while :; do
        left=""
        for f in "$STATE"/pids/*.pid; do
            [[ -e $f ]] && alive "$(basename "$f" .pid)" && left+=" $(cat "$f")"
        done
        left+=" $(run_pids | tr '\n' ' ')"
        [[ -z ${left// } ]] && break
        if (( SECONDS >= end )); then
            log "still running after 15s, SIGKILL:$left"
            for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
            # Until they are gone (a killed process may take a while to exit on a
            # busy machine; one forked meanwhile is killed too), up to 30 s.
            local kend=$(( SECONDS + 30 ))
            while left=$(run_pids | tr '\n' ' ') && [[ -n ${left// } ]] && (( SECONDS < kend )); do
                sleep 0.5
                for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
            done
            [[ -z ${left// } ]] || log "still there after SIGKILL:$left"
            break
        fi
        sleep 0.2
    done
    log "processes stopped"
    # The nodes' mount namespaces (their files, then the private mount holding
    # them): with no process left in them, they and every mount inside are gone.
    local i
    for (( i = ${#mounts[@]} - 1; i >= 0; i-- )); do
        mountpoint -q "${mounts[i]}" && { umount "${mounts[i]}" || umount -l "${mounts[i]}" || log "cannot unmount ${mounts[i]}"; }
    done
    for ns in "${namespaces[@]}"; do
        [[ -e /run/netns/$ns ]] || continue
        ip netns del "$ns" || log "cannot delete netns $ns"
    done
    # The nodes' cgroups, deepest first (a cgroup empties a moment after its last process exits).
    local node c d
    for node in "${cgroups[@]}"; do
        [[ $node == wk* && $node != */* ]] || continue
        for c in $(cgroup_hierarchies); do
            [[ -d /sys/fs/cgroup/$c/$node ]] || continue
            for (( i = 0; i < 120; i++ )); do   # up to 30 s
                while read -r d; do rmdir "$d" 2>/dev/null; done < <(find "/sys/fs/cgroup/$c/$node" -depth -type d)
                [[ -d /sys/fs/cgroup/$c/$node ]] || break
                sleep 0.25
            done
            [[ -d /sys/fs/cgroup/$c/$node ]] && log "cannot remove cgroup /sys/fs/cgroup/$c/$node"
        done
    done
    log "namespaces, mounts and cgroups removed"
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
    local comps=(etcd kube-apiserver kube-controller-manager kube-scheduler) i
    for (( i = 1; i <= ${NODES:-0}; i++ )); do
        comps+=("containerd-n$i" "kubelet-n$i")
        [[ ${PROXY_MODE:-nftables} == weft ]] || comps+=("kube-proxy-n$i")
    done
    for c in "${comps[@]}"; do
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
        (( ${NODES:-0} > 0 )) && kctl get nodes -o wide 2>/dev/null | sed 's/^/  /'
        return 0
    fi
    (( up == 0 )) && return 3
    return 1
}

# restart NAME: stops a process started by `start` (SIGTERM, SIGKILL after
# 30 s) and starts it again with the same namespace and arguments.
cmd_restart() {
    local name=$1 down_for=${2:-0} pid i
    [[ $down_for =~ ^[0-9]+$ ]] || die "restart: --down-for $down_for: not a number of seconds"
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
    (( down_for > 0 )) && { log "$name stopped; started again in ${down_for}s"; sleep "$down_for"; }
    start "$name" "${cmd[@]}"
    case $name in
        etcd) wait_for etcd 120 etcd etcd_ok ;;
        kube-apiserver) wait_for kube-apiserver 240 kube-apiserver api_ok ;;
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
    restart) if (( $# == 4 )) && [[ $3 == --down-for ]]; then cmd_restart "$2" "$4"
             else (( $# == 2 )) || usage; cmd_restart "$2"; fi ;;
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
    conformance) shift; exec "$repo/scripts/k8s-conformance.sh" "$@" ;;   # ClusterNetworkPolicy's suite (docs/clusternetworkpolicy.md)
    *) usage ;;
esac
