#!/usr/bin/env bash
# The Weft demo: a node (a network namespace with an uplink), three pods
# attached through the real weft CNI plugin, a table of what was built,
# node->pod and pod->pod traffic, then everything removed (also on Ctrl-C).
# Usage: sudo scripts/demo.sh [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
bash scripts/setup.sh >/dev/null
bash scripts/build.sh weft >/dev/null
WEFT=$PWD/${WEFT_BUILD_DIR:-build}/cmd/weft/weft

P="wdemo$$"
NODE="$P-node"
DATA=$(mktemp -d "/tmp/$P-data-XXXXXX")
PODS=(web api db)

cleanup() {
  for pod in "${PODS[@]}"; do
    run_cni DEL "$pod" "" >/dev/null 2>&1 || true
    ip netns del "$P-$pod" 2>/dev/null || true
  done
  ip netns del "$NODE" 2>/dev/null || true
  rm -rf "$DATA"
}

CONF=$(cat <<JSON
{"cniVersion":"1.1.0","name":"weft","type":"weft","mode":"routed","mtu":1450,
 "masquerade":true,"dataDir":"$DATA","ranges":["10.244.2.0/24"]}
JSON
)

# Runs the plugin inside the node namespace, exactly as a runtime would.
run_cni() {  # verb pod netns-path
  echo "$CONF" | ip netns exec "$NODE" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    CNI_COMMAND="$1" CNI_CONTAINERID="$2" CNI_NETNS="$3" CNI_IFNAME=eth0 \
    CNI_PATH="$(dirname "$WEFT")" "$WEFT"
}

if [ $KEEP = 0 ]; then trap cleanup EXIT; fi
trap 'echo; echo "interrupted: cleaning up"; cleanup; exit 130' INT TERM

ok() { printf '  \e[32m✔\e[0m %s\n' "$1"; }
bad() { printf '  \e[31m✗\e[0m %s\n' "$1"; FAILED=1; }
FAILED=0

echo "== Weft demo: one node, three pods, routed mode =="
ip netns add "$NODE"
ip -n "$NODE" link set lo up
ip -n "$NODE" link add up0 type veth peer name up1
ip -n "$NODE" addr add 192.0.2.10/24 dev up0
ip -n "$NODE" link set up0 up; ip -n "$NODE" link set up1 up

declare -A IP VETH MS
for pod in "${PODS[@]}"; do
  ip netns add "$P-$pod"
  start=$(date +%s%N)
  out=$(run_cni ADD "$pod" "/run/netns/$P-$pod")
  end=$(date +%s%N)
  MS[$pod]=$(awk "BEGIN{printf \"%.1f\", ($end-$start)/1e6}")
  IP[$pod]=$(echo "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["ips"][0]["address"].split("/")[0])')
  VETH[$pod]=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["interfaces"][0]["name"])')
done

echo
printf '  %-6s %-14s %-17s %s\n' POD IP "HOST VETH" "ADD (incl. ip netns exec)"
for pod in "${PODS[@]}"; do
  printf '  %-6s %-14s %-17s %s ms\n' "$pod" "${IP[$pod]}" "${VETH[$pod]}" "${MS[$pod]}"
done
echo
echo "Node routing table (one /32 per pod, proto 201 = weft):"
ip -n "$NODE" route show proto 201 | sed 's/^/  /'
echo "Inside pod 'web':"
ip -n "$P-web" -br addr show dev eth0 | sed 's/^/  /'
ip -n "$P-web" route | sed 's/^/  /'
echo
echo "Connectivity:"
for pod in "${PODS[@]}"; do
  if ip netns exec "$NODE" ping -c1 -W2 "${IP[$pod]}" >/dev/null; then ok "node -> $pod (${IP[$pod]})"; else bad "node -> $pod"; fi
done
for pair in "web api" "api db" "db web"; do
  set -- $pair
  if ip netns exec "$P-$1" ping -c1 -W2 "${IP[$2]}" >/dev/null; then ok "$1 -> $2 (${IP[$2]})"; else bad "$1 -> $2"; fi
done

if [ $KEEP = 1 ]; then
  echo
  echo "Left running (--keep). Explore with:"
  echo "  ip netns exec $P-web sh            # a shell inside pod 'web'"
  echo "  ip -n $NODE route                  # the node's routes"
  echo "  sqlite3 $DATA/ipam.db 'select container_id, ip_address_v4, interface_name from pods'"
  echo "Remove with: for n in \$(ip netns list | awk '/^$P-/{print \$1}'); do ip netns del \$n; done; rm -rf $DATA"
  exit $FAILED
fi
echo
echo "Removing the pods (DEL) and the node..."
exit $FAILED
