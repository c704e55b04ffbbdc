#!/usr/bin/env bash
# The Weft demo: a three-node virtual cluster on one machine — etcd as the
# control plane, weftd on every node building the VXLAN overlay, two pods per
# node attached through the real weft CNI plugin, an "internet" host outside
# the cluster — then a connectivity matrix. Then a NetworkPolicy chapter: a
# second, two-node cluster whose weftd runs with --control-plane kubernetes
# --network-policy true against the stand-in API server (not a real
# Kubernetes: tests/integration/agent/fake_apiserver.py), four pods in two
# namespaces, and the pod-to-pod matrix with no policy, after a default-deny
# ingress policy and after an allow policy, each with the time from posting
# the policy to the matrix changing; then `weftctl policy` for one pod.
# Everything is removed at the end (also on Ctrl-C). Every node and pod is a
# network namespace; the machine's own network namespace is never touched.
# About 10 s once built.
#
#   sudo scripts/demo.sh            # run it (installs dependencies and builds first)
#   sudo scripts/demo.sh --keep     # leave both clusters' namespaces, routes and nftables
#                                   # tables (policies as of the last step) to explore; prints
#                                   # how. weftd, etcd, the API server and the pods' servers
#                                   # end with the demo.
#   sudo scripts/demo.sh --clean P  # remove what --keep left (P = its prefix, e.g. wt1234)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--clean" ]; then
  P=${2:?usage: demo.sh --clean PREFIX}
  [[ "$P" =~ ^wt[0-9]+$ ]] || { echo "demo.sh: prefix must look like wt1234" >&2; exit 2; }
  pkill -9 -f "/tmp/$P-" 2>/dev/null || true
  for ns in $(ip netns list | awk '{print $1}' | grep "^$P-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  rm -rf /tmp/"$P"-*
  echo "removed $P"
  exit 0
fi

bash scripts/setup.sh >/dev/null
bash scripts/build.sh weft weftd weftctl netpol_agent weft-demo >/dev/null
exec "${WEFT_BUILD_DIR:-build}/tests/demo/weft-demo" "$@"
