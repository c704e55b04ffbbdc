# Sourced by tests/k8s/cluster_nodes_test.sh on its running cluster (docs/reliability.md, "Kernel state deleted
# underneath"): on node 1, kernel state Weft owns deleted by hand, one piece at a time, as an operator's mistake or
# another tool would, and timed until weftd has put it back (a poll every 20 ms, at most 10 s; the target is 2 s):
#   - table netdev weft-guard (the source guard), until it and pod c1's port chain are back; then pod c1 forges
#     pod s1's address towards pod h2 on node 2 (raw UDP datagrams): none may arrive, while the same datagrams
#     from c1's own address do;
#   - pod s1's host route, until it is back; then c1 -> s1 answers;
#   - table inet weft-netpol, until it is back; then h2 -> s1 is refused again and c1 -> s1 answers.
# Then `kubectl exec` of `weftctl doctor` in node 1's weftd pod (its output printed), and weftd's
# weft_repairs_total. Uses the caller's k, check, ok, bad, poll, pid_of, in_node, answer, refused, say, $PREFIX,
# $C1, $S1, $H2, $cpid, $hpid.

# heal_ms CMD...: milliseconds until CMD succeeds (a try every 20 ms), -1 after 10 s.
heal_ms() {
    local t0 now
    t0=$(date +%s%N)
    until "$@" >/dev/null 2>&1; do
        now=$(date +%s%N)
        (( (now - t0) / 1000000 > 10000 )) && { echo -1; return; }
        sleep 0.02
    done
    echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
within_2s() { (( $1 >= 0 && $1 <= 2000 )); }
say "heal: kernel state deleted on $PREFIX-n1, timed until weftd puts it back"
c1_if=$(in_node n1 ip -o route show "$C1" | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}')
s1_route=$(in_node n1 ip -o route show "$S1")
if [[ -z $c1_if || -z $s1_route || -z $cpid || -z $hpid ]]; then
    bad "heal: c1's host port ('$c1_if'), s1's host route ('$s1_route') and the pods' processes found"
else
    # --- the source guard, and a forgery after its repair
    guarded() { in_node n1 nft list chain netdev weft-guard "$c1_if"; }
    check "heal: c1's port chain in table netdev weft-guard before" guarded
    in_node n1 nft delete table netdev weft-guard
    ms=$(heal_ms guarded)
    check "heal: table netdev weft-guard deleted, back with c1's port chain ($c1_if) in $ms ms (<= 2000)" within_2s "$ms"
    # A listener in h2's netns counts datagrams to UDP 9999 by source; c1's netns sends 5 with s1's address
    # forged on a raw socket, then 5 with its own.
    nsenter -t "$hpid" -n timeout 8 python3 -c '
import socket, sys, collections
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999)); s.settimeout(6)
seen = collections.Counter()
try:
    while True: seen[s.recvfrom(100)[1][0]] += 1
except socket.timeout: pass
print(" ".join("%s=%d" % kv for kv in sorted(seen.items())))' >"$STATE/heal-listener.out" 2>&1 &
    listener=$!
    sleep 1
    nsenter -t "$cpid" -n python3 - "$S1" "$C1" "$H2" <<'EOF'
import socket, struct, sys, time
forged, own, dst = sys.argv[1:4]
def datagram(src):
    payload = b"weft-heal-test"
    udp = struct.pack("!HHHH", 40000, 9999, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + udp
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for src in (forged, own):
    for _ in range(5):
        raw.sendto(datagram(src), (dst, 0)); time.sleep(0.05)
EOF
    wait "$listener"
    got=$(cat "$STATE/heal-listener.out")
    no_forged() { [[ " $got " != *" $S1="* ]]; }
    own_arrived() { [[ " $got " == *" $C1=5 "* ]]; }
    check "heal: after the guard's repair, c1 forging s1's address ($S1) reaches h2 0 of 5 times ('$got')" no_forged
    check "heal: the same datagrams from c1's own address ($C1) arrive ('$got')" own_arrived

    # --- a pod's host route
    routed() { [[ -n $(in_node n1 ip -o route show "$S1") ]]; }
    in_node n1 ip route del "$S1"
    ms=$(heal_ms routed)
    check "heal: s1's host route ($s1_route) deleted, back in $ms ms (<= 2000)" within_2s "$ms"
    got=$(answer "$C1" "$S1" 8080 http n1)
    check "heal: c1 -> s1 answers after the route's repair ('$got')" test "$got" = s1

    # --- the NetworkPolicy table
    netpol() { in_node n1 nft list table inet weft-netpol; }
    in_node n1 nft delete table inet weft-netpol
    ms=$(heal_ms netpol)
    check "heal: table inet weft-netpol deleted, back in $ms ms (<= 2000)" within_2s "$ms"
    check "heal: h2 -> s1 refused again after the table's repair" poll 10 refused "$H2" "$S1" 8080 http n2
    got=$(answer "$C1" "$S1" 8080 http n1)
    check "heal: c1 -> s1 still answers ('$got')" test "$got" = s1

    repairs=$(in_node n1 curl -s --max-time 5 http://127.0.0.1:9641/metrics | grep '^weft_repairs_total' | tr '\n' ' ')
    say "heal: weftd's repairs on n1: $repairs"
    counted() { [[ $repairs == *weft_repairs_total* ]]; }
    check "heal: weftd counted its repairs (weft_repairs_total: $repairs)" counted
fi

# --- weftctl doctor, as an operator runs it on a real cluster
wpod1=$(k -n kube-system get pods -l app=weftd --field-selector "spec.nodeName=$PREFIX-n1" -o jsonpath='{.items[0].metadata.name}')
doctor_out=$(k -n kube-system exec "$wpod1" -c weftd -- weftctl doctor 2>&1)
doctor_rc=$?
echo "--- kubectl -n kube-system exec $wpod1 -c weftd -- weftctl doctor (exit $doctor_rc)"
echo "$doctor_out"
# 5: discrepancies found (docs/weftctl.md); 1 also when a check could not run (the policy comparison in a pod).
doctor_clean() { [[ $doctor_rc != 5 && $doctor_out == *"no discrepancies"* ]]; }
doctor_peers() { [[ $doctor_out == *"control plane: the pod's service account"* && $doctor_out != *"peer checks skipped"* ]]; }
check "heal: weftctl doctor in $wpod1 finds no discrepancy after the repairs (exit $doctor_rc)" doctor_clean
check "heal: weftctl doctor in the pod checked the peers with weftd's service account" doctor_peers
