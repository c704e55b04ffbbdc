#!/usr/bin/env bash
# Pod start-up through the real kubelet (issue 21 §5; docs/performance.md,
# "Pod start-up on the real cluster"): a burst of --pods pods created at once
# on one node of the running scripts/cluster.sh cluster, with Weft and with
# the reference bridge + host-local + portmap conflist, in the same run on the
# same node, --rounds rounds alternating which goes first.
#
#   sudo scripts/cluster.sh up            # a cluster with nodes, Weft installed
#   sudo bench/k8s_startup.sh             # [--pods 100] [--rounds 1] [--node 1]
#
# Per pod (tests/k8s/cmd/podbench, run in the node's network namespace, which
# reaches the node's pods): API create -> scheduled -> pod IP in the status
# (kubelet, containerd's sandbox, the CNI ADD) -> container running -> Ready,
# and create -> the first HTTP answer of agnhost netexec at the pod's IP; p50
# and p99 of each. The CNI ADD itself is timed by bench/k8s/cni_timer.c, put in
# front of the plugin for both (bench-weft, bench-bridge: the same fork+exec
# for each).
#
# How the two are switched: containerd loads the lexically first conflist of
# the node's /etc/cni/net.d. The bench writes 00-bench.conflist there: for
# Weft, weftd's own 10-weft.conflist with the plugin's type bench-weft (so the
# same plugin and configuration, behind the timer); for the reference, a
# bridge (benchbr0, 10.250.0.0/16 from host-local) + portmap conflist with
# Debian's containernetworking-plugins (scripts/setup.sh), copied into the
# node's /opt/cni/bin. Everything it adds (conflist, binaries, the bridge, the
# host-local state, the namespace) is removed at the end, also on failure.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
pods=100 rounds=1 n=1
while (( $# )); do
    case $1 in
        --pods) pods=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --node) n=$2; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "k8s_startup: unknown argument $1 (--pods N, --rounds N, --node N)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "k8s_startup: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root"
env=$("$repo/scripts/cluster.sh" env 2>/dev/null) || die "no cluster is up (sudo scripts/cluster.sh up)"
eval "$env"
node=$PREFIX-n$n nd=$STATE/nodes/n$n
[[ -e /run/netns/$node && -d $nd/etc-cni/net.d ]] || die "no node $n in run $PREFIX (sudo scripts/cluster.sh up --nodes N)"
for p in bridge host-local portmap; do
    [[ -x /usr/lib/cni/$p ]] || die "/usr/lib/cni/$p is missing (Debian package containernetworking-plugins; scripts/setup.sh)"
done
weftconf=$(ls "$nd"/etc-cni/net.d/*weft*.conflist 2>/dev/null | head -1)
[[ -n $weftconf ]] || die "no Weft conflist in node $n's /etc/cni/net.d: is Weft installed?"
kc() { ip netns exec "$CP_NS" "$BIN/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }
out=$STATE/bench/k8s_startup-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

# podbench and the timer, built here when missing or older than their source.
pb=$repo/build-k8s/bench/podbench timer=$repo/build-k8s/bench/cni_timer
mkdir -p "${pb%/*}"
if [[ ! -x $pb || -n $(find "$repo/tests/k8s/cmd/podbench" -newer "$pb" -name '*.go') ]]; then
    (cd "$repo/tests/k8s" && CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -o "$pb" ./cmd/podbench)
fi
if [[ ! -x $timer || $repo/bench/k8s/cni_timer.c -nt $timer ]]; then
    cc -O2 -Wall -Wextra -Werror -static -o "$timer" "$repo/bench/k8s/cni_timer.c"
fi

added=()
cleanup() {
    set +e
    rm -f "$nd/etc-cni/net.d/00-bench.conflist"
    for f in "${added[@]}"; do rm -f "$f"; done
    kc delete namespace podbench --wait=false >/dev/null 2>&1
    sleep 2
    ip -n "$node" link del benchbr0 2>/dev/null
    rm -rf "$nd/var-lib/cni/networks/bench-ref"
    rm -f "$log"
}
trap cleanup EXIT
for p in bench-weft bench-bridge; do
    cp "$timer" "$nd/opt/cni/bin/$p"; added+=("$nd/opt/cni/bin/$p")
done
for p in bridge host-local portmap; do
    if [[ ! -e $nd/opt/cni/bin/$p ]]; then
        cp "/usr/lib/cni/$p" "$nd/opt/cni/bin/$p"; added+=("$nd/opt/cni/bin/$p")
    fi
done
python3 - "$weftconf" >"$out/weft.conflist" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = c.get("name", "weft")
for p in c["plugins"]:
    if p.get("type") == "weft":
        p["type"] = "bench-weft"
print(json.dumps(c, indent=1))
EOF
grep -q '"bench-weft"' "$out/weft.conflist" || die "no plugin of type weft in $weftconf"
cat >"$out/ref.conflist" <<'EOF'
{
 "cniVersion": "1.0.0",
 "name": "bench-ref",
 "plugins": [
  {"type": "bench-bridge", "bridge": "benchbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.0.0/16"}]], "dataDir": "/var/lib/cni/networks"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
 ]
}
EOF
kc create namespace podbench >/dev/null 2>&1 || true
log=$nd/var-log/weft-bench-cni.log   # cni_timer's default, in the node's /var/log
load() { cut -d' ' -f1-3 /proc/loadavg; }

run() {  # run weft|ref ROUND
    local what=$1 r=$2
    cp "$out/$what.conflist" "$nd/etc-cni/net.d/.00-bench.tmp"
    mv "$nd/etc-cni/net.d/.00-bench.tmp" "$nd/etc-cni/net.d/00-bench.conflist"
    sleep 3   # containerd's CRI reloads the CNI configuration on the change
    echo "k8s_startup: round $r, $what: $pods pods on $node (load $(load))" >&2
    nsenter --net="/run/netns/$node" "$pb" --kubeconfig "$KUBECONFIG" --node "$node" --namespace podbench \
        --pods "$pods" --label "$what-$r" >"$out/$what-$r.json" || echo "k8s_startup: $what round $r incomplete" >&2
    # The pods are gone from the API; their CNI DEL (containerd runs it with
    # the conflist of the moment) must reach this plugin before the switch,
    # or the other one gets it and this one's addresses leak.
    local t=0
    while (( $(awk -v p="podbench-$what-$r-" '$1 == "DEL" && index($2, p) == 1 { print $2 }' "$log" | sort -u | wc -l) < pods )); do
        (( t++ < 300 )) || { echo "k8s_startup: not every pod of $what round $r had its CNI DEL within 300 s" >&2; break; }
        sleep 1
    done
    grep " podbench-$what-$r-" "$log" >"$out/$what-$r.cni.log" || true
}
: >"$log"
for (( r = 1; r <= rounds; r++ )); do
    if (( r % 2 )); then run weft "$r"; run ref "$r"; else run ref "$r"; run weft "$r"; fi
done
echo "k8s_startup: load after: $(load); results in $out" >&2

python3 - "$out" "$pods" "$(nproc)" <<'EOF'
import glob, json, math, os, sys
out, pods, cpus = sys.argv[1], sys.argv[2], sys.argv[3]
def pct(v, p):
    if not v: return float("nan")
    s = sorted(v); return s[max(0, math.ceil(p / 100 * len(s)) - 1)]
rows = [("create -> Ready", "ready"), ("create -> first answer", "answered"),
        ("  create -> scheduled (API, scheduler)", "scheduled"),
        ("  scheduled -> pod IP (kubelet, sandbox, CNI, container)", "sched_to_ip"),
        ("    scheduled -> CNI ADD starts (kubelet, sandbox)", "sched_to_cni"),
        ("    the CNI ADD", "cni"),
        ("    CNI ADD ends -> pod IP seen (container, status)", "cni_to_ip"),
        ("  pod IP -> Ready", "ip_to_ready")]
series = {}
for what in ("weft", "ref"):
    s = {}
    for f in sorted(glob.glob(f"{out}/{what}-*.json")):
        try:
            d = json.load(open(f))
        except ValueError:
            continue
        for p in d["pods_ms"]:
            if p["ready"] and p["answered"]:
                for k in ("ready", "answered", "scheduled"):
                    s.setdefault(k, []).append(p[k])
                s.setdefault("sched_to_ip", []).append(p["ip"] - p["scheduled"])
                s.setdefault("ip_to_ready", []).append(p["ready"] - p["ip"])
        cni = {}
        for line in open(f[:-5] + ".cni.log"):
            cmd, pod, t0, t1, code = line.split()
            if cmd == "ADD" and pod.startswith("podbench-") and code == "0":
                cni[pod] = (int(t0), int(t1))
        for p in d["pods_ms"]:
            if p["name"] in cni and p["ready"] and p["answered"]:
                t0, t1 = ((t - p["sent_ns"]) / 1e6 for t in cni[p["name"]])
                s.setdefault("cni", []).append(t1 - t0)
                s.setdefault("sched_to_cni", []).append(t0 - p["scheduled"])
                s.setdefault("cni_to_ip", []).append(p["ip"] - t1)
    series[what] = s
n = {w: len(series[w].get("ready", [])) for w in series}
print(f"\nPod start-up, {pods} pods created at once on one node, ms ({n['weft']} Weft and {n['ref']} reference pods measured; {cpus} cores, shared: the machine was busy)")
print(f"| {'':56} | Weft p50 | Weft p99 | ref p50 | ref p99 |")
print(f"|{'-'*58}|---------:|---------:|--------:|--------:|")
for label, k in rows:
    w, r = series["weft"].get(k, []), series["ref"].get(k, [])
    print(f"| {label:56} | {pct(w,50):8.0f} | {pct(w,99):8.0f} | {pct(r,50):7.0f} | {pct(r,99):7.0f} |")
w99, r99 = pct(series["weft"].get("ready", []), 99), pct(series["ref"].get("ready", []), 99)
print(f"\ncreate -> Ready p99, Weft / reference: {w99 / r99:.2f} (target <= 0.5)")
EOF
