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
# for each). Beside them, kubelet's own mean duration of its CRI calls over each
# plugin's rounds (RunPodSandbox, with the CNI ADD inside it; CreateContainer;
# StartContainer), from its metrics through the API server's node proxy, so
# the part the plugin owns is set against containerd's and runc's.
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
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
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
# kubelet's own timings of its CRI calls (sum and count of each histogram),
# through the API server's node proxy: RunPodSandbox (containerd's sandbox
# with the CNI ADD inside it), CreateContainer, StartContainer.
kmetrics() {
    kc get --raw "/api/v1/nodes/$node/proxy/metrics" 2>/dev/null |
        grep -E '^kubelet_(runtime_operations_duration_seconds|run_podsandbox_duration_seconds|pod_worker_start_duration_seconds)_(sum|count)' || true
}

run() {  # run weft|ref ROUND
    local what=$1 r=$2
    cp "$out/$what.conflist" "$nd/etc-cni/net.d/.00-bench.tmp"
    mv "$nd/etc-cni/net.d/.00-bench.tmp" "$nd/etc-cni/net.d/00-bench.conflist"
    sleep 3   # containerd's CRI reloads the CNI configuration on the change
    echo "k8s_startup: round $r, $what: $pods pods on $node (load $(load))" >&2
    kmetrics >"$out/$what-$r.kubelet.before"
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
    kmetrics >"$out/$what-$r.kubelet.after"
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

# kubelet's own view: the mean duration of its CRI calls over each plugin's rounds
# (histogram sums and counts, after minus before), and the CNI ADD's mean inside
# RunPodSandbox: containerd's sandbox without the plugin.
def kubelet(what):
    acc = {}
    for f in sorted(glob.glob(f"{out}/{what}-*.kubelet.after")):
        vals = {}
        for tag, fn in (("b", f[:-6] + ".before"), ("a", f)):
            try:
                for line in open(fn):
                    name, v = line.rsplit(" ", 1)
                    vals[(tag, name)] = float(v)
            except OSError:
                pass
        for (tag, name), v in vals.items():
            if tag == "a":
                acc[name] = acc.get(name, 0) + v - vals.get(("b", name), 0)
    def mean(metric, op=None):
        sel = (lambda n: f'operation_type="{op}"' in n) if op else (lambda n: True)
        sm = sum(v for n, v in acc.items() if n.startswith(metric + "_sum") and sel(n))
        ct = sum(v for n, v in acc.items() if n.startswith(metric + "_count") and sel(n))
        return (1000 * sm / ct, ct) if ct else (float("nan"), 0)
    return {"sandbox": mean("kubelet_runtime_operations_duration_seconds", "run_podsandbox"),
            "create": mean("kubelet_runtime_operations_duration_seconds", "create_container"),
            "start": mean("kubelet_runtime_operations_duration_seconds", "start_container"),
            "worker": mean("kubelet_pod_worker_start_duration_seconds")}
def mean(v): return sum(v) / len(v) if v else float("nan")
k = {w: kubelet(w) for w in ("weft", "ref")}
print(f"\nWhere a pod's start-up goes, mean ms per pod (kubelet's metrics of its CRI calls; the CNI ADD from cni_timer)")
print(f"| {'':78} | Weft | ref |")
print(f"|{'-'*80}|-----:|----:|")
rowsk = [("create -> Ready (podbench)", mean(series["weft"].get("ready", [])), mean(series["ref"].get("ready", []))),
         ("  kubelet: RunPodSandbox (containerd: netns, pause container, CNI ADD)", k["weft"]["sandbox"][0], k["ref"]["sandbox"][0]),
         ("    of it the CNI ADD: the part the plugin owns", mean(series["weft"].get("cni", [])), mean(series["ref"].get("cni", []))),
         ("    of it containerd's sandbox without the CNI ADD", k["weft"]["sandbox"][0] - mean(series["weft"].get("cni", [])),
          k["ref"]["sandbox"][0] - mean(series["ref"].get("cni", []))),
         ("  kubelet: CreateContainer (containerd, runc create)", k["weft"]["create"][0], k["ref"]["create"][0]),
         ("  kubelet: StartContainer (runc start)", k["weft"]["start"][0], k["ref"]["start"][0]),
         ("  the rest: API, scheduler, kubelet's queues, status updates, waiting for a CPU", None, None)]
for label, w, r in rowsk:
    if w is None:
        tw = rowsk[0][1] - rowsk[1][1] - rowsk[4][1] - rowsk[5][1]
        tr = rowsk[0][2] - rowsk[1][2] - rowsk[4][2] - rowsk[5][2]
        w, r = tw, tr
    print(f"| {label:78} | {w:5.0f} | {r:5.0f} |")
for wh in ("weft", "ref"):
    c = k[wh]
    print(f"({wh}: kubelet counted {c['sandbox'][1]:.0f} RunPodSandbox, {c['create'][1]:.0f} CreateContainer, "
          f"{c['start'][1]:.0f} StartContainer calls; the CNI ADD is {100 * mean(series[wh].get('cni', [])) / mean(series[wh].get('ready', [])):.1f} % "
          f"of the mean create -> Ready)")
w99, r99 = pct(series["weft"].get("ready", []), 99), pct(series["ref"].get("ready", []), 99)
print(f"\ncreate -> Ready p99, Weft / reference: {w99 / r99:.2f} (target <= 0.5)")
EOF
