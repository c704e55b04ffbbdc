#!/usr/bin/env bash
# NetworkPolicy API write -> enforced on the real cluster (issue 21 §5;
# docs/performance.md, "NetworkPolicy on the real cluster"): policies created,
# updated and deleted through the real API server of the running
# scripts/cluster.sh cluster, each timed until a pod's probe sees the datapath
# change (bench/k8s/netpol_flip.py: a new TCP connect every 10 ms from a
# client pod to a server pod, refused <-> allowed).
#
#   sudo scripts/cluster.sh up              # 2 nodes, Weft installed
#   sudo bench/k8s_netpol.sh                # [--writes 60] [--same-node] [--updates 1]
#
# The server (agnhost netexec, label app=npb-srv) runs on node 2, the client
# (app=npb-cli) on node 1 (--same-node: both on node 1), in namespace
# npbench. The policy selects the server (Ingress): created with no rule
# (refused), updated to allow the client's label (allowed), updated back
# (refused), deleted (allowed); --writes writes in all, p50/p99 per kind and
# overall. Beside it, weftd's own figure for the same writes on the server's
# node: weft_netpol_sync_duration_seconds (from a batch of API events to its
# rules in the kernel), its histogram's difference over the run. Everything it
# made (the namespace, its pods) is deleted at the end, also on failure.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
writes=60 same=0 updates=1
while (( $# )); do
    case $1 in
        --writes) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "k8s_netpol: --writes N" >&2; exit 2; }; writes=$2; shift ;;
        --updates) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "k8s_netpol: --updates N (>= 1)" >&2; exit 2; }; updates=$2; shift ;;
        --same-node) same=1 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "k8s_netpol: unknown argument $1 (--writes N, --updates N, --same-node)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "k8s_netpol: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root (network namespaces)"
env=$("$repo/scripts/cluster.sh" env 2>/dev/null) || die "no cluster is up (sudo scripts/cluster.sh up)"
eval "$env"
srv_n=2; (( same )) && srv_n=1
(( NODES >= srv_n )) || die "needs $srv_n node(s) (sudo scripts/cluster.sh up --nodes 2), the run has $NODES"
kc() { ip netns exec "$CP_NS" "$BIN/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }
ns=npbench
out=$STATE/bench/k8s_netpol-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }

cleanup() {
    set +e
    kc delete namespace "$ns" --wait=false >/dev/null 2>&1
}
trap cleanup EXIT
kc delete namespace "$ns" --wait=true --timeout=120s >/dev/null 2>&1 || true
kc create namespace "$ns" >/dev/null
pod() {  # pod NAME LABEL NODE
    kc -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $2}}
spec:
  nodeSelector: {kubernetes.io/hostname: $PREFIX-n$3}
  terminationGracePeriodSeconds: 1
  containers:
  - name: agnhost
    image: registry.k8s.io/e2e-test-images/agnhost:2.63.0
    args: [netexec, --http-port=8080]
EOF
}
pod npb-srv npb-srv "$srv_n"
pod npb-cli npb-cli 1
kc -n "$ns" wait --for=condition=Ready pod/npb-srv pod/npb-cli --timeout=300s >/dev/null ||
    die "the bench's pods did not become Ready (kubectl -n $ns describe pods)"
srv_ip=$(kc -n "$ns" get pod npb-srv -o jsonpath='{.status.podIP}')
cid=$(kc -n "$ns" get pod npb-cli -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
cli_pid=$(nsenter --net="/run/netns/$PREFIX-n1" --mount="$STATE/ns/n1.mnt" \
    ctr --address /run/containerd/containerd.sock -n k8s.io tasks ls 2>/dev/null | awk -v id="$cid" '$1 == id {print $2}')
[[ -n $cli_pid && -e /proc/$cli_pid/ns/net ]] || die "the client pod's process not found (container $cid)"

metrics() {  # the server node's weftd metrics
    ip netns exec "$PREFIX-n$srv_n" curl -s --max-time 10 "http://192.0.2.$(( 10 + srv_n )):9641/metrics" |
        grep '^weft_netpol_sync_duration_seconds' || true
}
metrics >"$out/metrics.before"
echo "k8s_netpol: $writes writes, server $srv_ip on $PREFIX-n$srv_n, client on $PREFIX-n1 (pid $cli_pid); load $(load)" >&2
echo "load before: $(load)" >"$out/load"
python3 "$repo/bench/k8s/netpol_flip.py" --api "${API#https://}" --ca "$STATE/pki/ca.crt" \
    --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
    --api-netns "/run/netns/$CP_NS" --probe-netns "/proc/$cli_pid/ns/net" \
    --namespace "$ns" --server "$srv_ip" --port 8080 --writes "$writes" --updates "$updates" \
    --server-label app=npb-srv --client-label app=npb-cli | tee "$out/writes.jsonl" >&2
echo "load after: $(load)" >>"$out/load"
metrics >"$out/metrics.after"
echo "k8s_netpol: load after: $(load); results in $out" >&2

python3 - "$out" "$(nproc)" "$same" <<'EOF'
import json, math, sys
out, cpus, same = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rows = [json.loads(l) for l in open(f"{out}/writes.jsonl") if l.startswith("{")]
def pct(v, p):
    if not v: return float("nan")
    s = sorted(v); return s[max(0, math.ceil(p / 100 * len(s)) - 1)]
load = open(f"{out}/load").read().split("\n")
print(f"\nNetworkPolicy API write -> enforced, as a pod's probe sees it ({'same node' if same else 'across nodes'}; "
      f"{len(rows)} writes; {cpus} cores, shared; {load[0]}, {load[1]}), ms")
print("| write | n | p50 | p99 | max | API round trip p50 | blips |")
print("|---|---:|---:|---:|---:|---:|---:|")
names = {"create": "create (no rule) -> refused", "allow": "update: allow the client -> allowed",
         "deny": "update: no rule -> refused", "delete": "delete -> allowed"}
for k in ("create", "allow", "deny", "delete", None):
    r = [x for x in rows if k is None or x["kind"] == k]
    e = [x["enforced_ms"] for x in r]; w = [x["write_ms"] for x in r]
    label = "**all**" if k is None else names[k]
    print(f"| {label} | {len(r)} | {pct(e,50):.0f} | {pct(e,99):.0f} | {max(e) if e else float('nan'):.0f} | "
          f"{pct(w,50):.1f} | {sum(x['blips'] for x in r)} |")
def hist(f):
    b, c, s = {}, 0, 0.0
    for l in open(f):
        name, v = l.rsplit(" ", 1)
        if "_bucket" in name:
            b[name.split('le="')[1].rstrip('"}')] = float(v)
        elif name.endswith("_count"): c = float(v)
        elif name.endswith("_sum"): s = float(v)
    return b, c, s
try:
    b0, c0, s0 = hist(f"{out}/metrics.before"); b1, c1, s1 = hist(f"{out}/metrics.after")
    n = c1 - c0
    les = sorted((k for k in b1 if k != "+Inf"), key=float) + ["+Inf"]
    def q(p):
        for le in les:
            if b1[le] - b0.get(le, 0) >= p / 100 * n: return le
    print(f"\nweftd on the server's node, weft_netpol_sync_duration_seconds over the run (batch of API events -> "
          f"rules in the kernel): {n:.0f} syncs, mean {1000 * (s1 - s0) / n:.1f} ms, p50 <= {float(q(50)) * 1000:.0f} ms, "
          f"p99 <= {float(q(99)) * 1000 if q(99) != '+Inf' else float('inf'):.0f} ms (histogram bucket bounds)" if n else
          "\nweftd: no sync counted over the run (metrics before/after in the results dir)")
except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
    print(f"\nweftd's metrics not read: {e}")
allv = [x["enforced_ms"] for x in rows]
print(f"\nAPI write -> enforced p99: {pct(allv, 99):.0f} ms (target of the stand-in bench, event -> enforced: <= 200 ms p99)")
EOF
