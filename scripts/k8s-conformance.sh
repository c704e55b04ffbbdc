#!/usr/bin/env bash
# Runs the upstream ClusterNetworkPolicy conformance suite
# (sigs.k8s.io/network-policy-api's `conformance` package, pinned in
# tests/k8s/cnpconformance/go.mod, built by scripts/k8s-build.sh into
# build-k8s/bin/cnp-conformance.test) against the running scripts/cluster.sh
# cluster with Weft; what `scripts/cluster.sh conformance` runs
# (docs/clusternetworkpolicy.md, docs/cluster.md).
#
#   sudo scripts/k8s-conformance.sh                 # the ClusterNetworkPolicy profile
#   sudo scripts/k8s-conformance.sh --run REGEX     # only the conformance tests matching (go test -run)
#   sudo scripts/k8s-conformance.sh -- ARGS         # ARGS passed to the test binary as they are
#
# Before the suite: the CRD (deploy/crd/clusternetworkpolicies.yaml, the
# module's experimental channel) is applied and waited for; the suite's pods
# use registry.k8s.io/e2e-test-images/agnhost:2.45, so each node's containerd
# gets that name as a tag of the agnhost image the nodes import (the same
# binary family; the suite only runs `agnhost netexec` and `connect`).
# The profile's experimental features (named ports, egress node peers) are
# on. Tests that need SCTP are left out (go test -skip) only when this kernel
# cannot make an SCTP socket, and the reason is printed.
#
# The suite runs inside the control plane's network namespace with the run's
# admin kubeconfig. The report (the suite's YAML conformance report) and the
# log go to <state>/conformance/<time>/. The last line is
# `N passed, N failed, N skipped` over the profile's conformance tests (each
# test one count: passed when all of its steps passed). Exit 0 when nothing
# failed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "k8s-conformance: $*" >&2; exit 1; }

run_re="" extra=()
while (( $# )); do
    case $1 in
        --run) run_re=${2:?--run needs a regular expression}; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "k8s-conformance: unknown argument $1 (--run R, -- ARGS)" >&2; exit 2 ;;
    esac
    shift
done

[[ $(id -u) == 0 ]] || die "run as root (the suite runs in the cluster's network namespace)"
env=$("$repo/scripts/cluster.sh" env 2>/dev/null) || die "no cluster is up (sudo scripts/cluster.sh up --nodes 2)"
eval "$env"
bin=$BIN
test_bin=$bin/cnp-conformance.test
[[ -x $test_bin ]] || die "$test_bin is missing (scripts/k8s-build.sh)"
"$repo/scripts/cluster.sh" status >/dev/null 2>&1 || die "the cluster is not healthy (sudo scripts/cluster.sh status)"
kc() { ip netns exec "$CP_NS" "$bin/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }

ready=$(kc get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
total=$(kc get nodes --no-headers 2>/dev/null | wc -l)
echo "k8s-conformance: $ready of $total nodes Ready"
(( ready > 0 )) || die "no Ready node (sudo scripts/cluster.sh up --nodes 2)"

# The CRD, as an administrator installs it.
kc apply -f "$repo/deploy/crd/clusternetworkpolicies.yaml" >/dev/null || die "kubectl apply of the CRD failed"
kc wait --for condition=established --timeout=60s crd/clusternetworkpolicies.policy.networking.k8s.io >/dev/null ||
    die "the CRD did not become Established"

# The suite's image name, on every node.
want=registry.k8s.io/e2e-test-images/agnhost:2.45
for (( n = 1; n <= ${NODES:-0}; n++ )); do
    ctr=(nsenter --net="/run/netns/$PREFIX-n$n" --mount="$STATE/ns/n$n.mnt"
         ctr --address /run/containerd/containerd.sock -n k8s.io)
    # The newest agnhost the node imported (scripts/k8s-images.sh: Debian-based, with the
    # /bin/bash the suite's commands run), under the suite's name.
    have=$("${ctr[@]}" images ls -q 2>/dev/null | grep '^registry.k8s.io/e2e-test-images/agnhost:' |
           grep -v ":${want##*:}\$" | sort -V | tail -1 || true)
    [[ -n $have ]] || die "node n$n has no agnhost image (scripts/k8s-images.sh)"
    "${ctr[@]}" images tag --force "$have" "$want" >/dev/null || die "cannot tag $have as $want on node n$n"
done

# What an interrupted run left behind (the suite's namespaces and policies).
left=$(kc get namespaces -o name 2>/dev/null | grep '^namespace/network-policy-conformance-' || true)
if [[ -n $left ]]; then
    echo "k8s-conformance: deleting what an earlier run left: $(echo $left)"
    kc delete $left --wait=true --timeout=180s >/dev/null || die "cannot delete $left"
fi
kc delete clusternetworkpolicies --all >/dev/null 2>&1 || true

# SCTP: the kernel either makes an SCTP socket or it does not.
skip_re=""
sctp_reason=$(python3 -c '
import errno, socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132).close()
except OSError as e:
    print("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): " + errno.errorcode.get(e.errno, str(e.errno)))
')
sctp_tests=()
if [[ -n $sctp_reason ]]; then
    src=$(cd "$repo/tests/k8s/cnpconformance" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)
    mapfile -t sctp_tests < <(grep -ho 'ShortName: *"[A-Za-z]*SCTP"' "$src"/conformance/tests/*.go | grep -o 'CNP[A-Za-z]*' | sort -u)
    echo "k8s-conformance: skipping the SCTP tests (${sctp_tests[*]}): this kernel has no SCTP ($sctp_reason)"
    skip_re="SCTP"
fi

# Every pod of the suite's base manifests also runs `agnhost porter` on SCTP
# ports; without SCTP those containers exit at once and no pod ever becomes
# ready, so no test at all could run. On such a kernel (only), a watcher
# removes those containers from the suite's StatefulSets as soon as they
# appear (each removal printed); the SCTP tests are left out above.
watcher=""
if [[ -n $sctp_reason ]]; then
    (
        set +e +o pipefail  # a failed poll (the API server busy) is tried again
        while sleep 1; do
            kc get statefulsets -A -o json 2>/dev/null | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("items", []):
    ns = s["metadata"]["namespace"]
    if not ns.startswith("network-policy-conformance-"):
        continue
    cs = s["spec"]["template"]["spec"]["containers"]
    drop = [i for i, c in enumerate(cs) if any(e.get("name", "").startswith("SERVE_SCTP_PORT") for e in c.get("env") or [])]
    if drop:
        ops = [{"op": "remove", "path": "/spec/template/spec/containers/%d" % i} for i in reversed(drop)]
        print(ns, s["metadata"]["name"], json.dumps(ops, separators=(",", ":")), " ".join(cs[i]["name"] for i in drop))
' | while read -r ns name ops names; do
                # (pods of the old template are deleted: a rolling update would wait for them to be ready)
                kc -n "$ns" patch statefulset "$name" --type=json -p "$ops" >/dev/null &&
                    kc -n "$ns" delete pods --all --wait=false >/dev/null &&
                    echo "k8s-conformance: no SCTP: removed the SCTP containers ($names) from $ns/$name"
            done
        done
    ) &
    watcher=$!
    trap '[[ -n $watcher ]] && kill "$watcher" 2>/dev/null' EXIT
fi

out=$STATE/conformance/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
version=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
cmd=(ip netns exec "$CP_NS" env KUBECONFIG="$KUBECONFIG" "$test_bin" -test.v -test.timeout=3h
     -test.run "TestConformanceProfiles${run_re:+/($run_re)}"
     -conformance-profiles=ClusterNetworkPolicy
     -supported-features=ClusterNetworkPolicy,ClusterNetworkPolicyNamedPorts,ClusterNetworkPolicyEgressNodePeers
     -organization=weft -project=weft -url=https://example.invalid/weft -version="$version"
     -contact=weft -additional-info="scripts/k8s-conformance.sh (weft repository)" -report-output="$out/report.yaml")
[[ -n $skip_re ]] && cmd+=(-test.skip "TestConformanceProfiles/.*$skip_re")
cmd+=("${extra[@]}")
echo "k8s-conformance: ${cmd[*]}"
rc=0
(cd "$out" && "${cmd[@]}" 2>&1) | tee "$out/conformance.log" || rc=$?
echo "k8s-conformance: report and log in $out"

# The last line: one count per conformance test (TestConformanceProfiles/<ShortName>).
NSKIP=${#sctp_tests[@]} python3 - "$out/conformance.log" <<'EOF' || exit 1
import os, re, sys
res = {}
probes = {}  # test -> the protocols of its failed probes
cur = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*--- (PASS|FAIL|SKIP): TestConformanceProfiles/([^/\s]+) ", line)
    if m:
        res[m.group(2)] = m.group(1)
    m = re.match(r"=== (RUN|NAME) +TestConformanceProfiles/([^/\s]+)", line)
    if m:
        cur = m.group(2)
    m = re.search(r"FAILED Command was \[.*--protocol=(\w+)", line)
    if m and cur:
        probes.setdefault(cur, set()).add(m.group(1))
for name, r in sorted(res.items()):
    if r != "PASS":
        why = ""
        if r == "FAIL" and probes.get(name) == {"sctp"}:
            why = " (every failed probe was SCTP, which this kernel does not have)"
        print(f"  {r.lower()}: {name}{why}")
passed = sum(r == "PASS" for r in res.values())
failed = sum(r == "FAIL" for r in res.values())
skipped = sum(r == "SKIP" for r in res.values()) + int(os.environ["NSKIP"])
if not res:
    print("  no conformance test reported a result (see the log)")
    failed = max(failed, 1)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
EOF
exit "$rc"
