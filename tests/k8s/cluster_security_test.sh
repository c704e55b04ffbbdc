# Sourced by tests/k8s/cluster_nodes_test.sh on its running cluster, where
# scripts/cluster.sh up applied deploy/weftd-own-node.yaml beside weftd.yaml:
# weftd's status server tried from an ordinary pod, and weftd's credentials
# tried as a thief would use them. Uses the caller's k, check, ok, bad, poll,
# pid_of, say, $STATE, $PREFIX, $CP_NS, $N1, $N2; pod c1 runs on $N1.
#
# 1. From pod c1's network namespace, each protected path of both nodes'
#    weftd (192.0.2.11 and .12, port 9641): 401 without a token and with a
#    forged one, 403 with the token of ServiceAccount default/default, 200
#    with the token of a ServiceAccount bound to deploy/'s weftd-status-reader;
#    /healthz and /metrics 200 without a token.
# 2. The token mounted into n1's weftd pod (read from its projected volume in
#    the node's mount namespace), used against kube-apiserver: patch n1's
#    weft.io/host-ip (no-op, 200); the same on n2, n1's labels, spec, another
#    annotation and status (403, naming the ValidatingAdmissionPolicy
#    weftd-own-node); a weftd token bound to no pod (kubectl create token)
#    patching n1 (403: it names no node).

sec_api() { # sec_api TOKEN METHOD PATH [BODY]: "CODE BODY" from kube-apiserver, in the control plane's netns
    local out
    out=$(ip netns exec "$CP_NS" curl -s --max-time 10 --cacert "$STATE/pki/ca.crt" -X "$2" \
        -H "Authorization: Bearer $1" -H 'Content-Type: application/merge-patch+json' \
        ${4:+--data "$4"} -w '\n%{http_code}' "$API$3")
    echo "$(tail -n1 <<<"$out") $(head -n -1 <<<"$out" | tr -d '\n' | cut -c1-400)"
}

say "security: weftd's status server from pod c1, and weftd's stolen token"
# refused_by "CODE BODY" TEXT: a 403 from the policy weftd-own-node whose message has TEXT.
refused_by() { [[ ${1:0:3} == 403 && $1 == *"ValidatingAdmissionPolicy 'weftd-own-node'"* && $1 == *"$2"* ]]; }
sec_cpid=$(pid_of c1 n1)
k create serviceaccount weft-operator >/dev/null
k create clusterrolebinding weft-operator-test --clusterrole=weftd-status-reader \
    --serviceaccount=default:weft-operator >/dev/null
sec_op=$(k create token weft-operator) sec_default=$(k create token default)
sec_codes() { # sec_codes NODE_IP PATH: the codes for no token, forged, default's, the operator's
    local t c out=""
    for t in "" "forged.token.value" "$sec_default" "$sec_op"; do
        c=$(nsenter -t "$sec_cpid" -n curl -s -o /dev/null --max-time 5 -w '%{http_code}' \
            ${t:+-H "Authorization: Bearer $t"} "http://$1:9641$2")
        out+="$c "
    done
    echo "${out% }"
}
if [[ -z $sec_cpid ]]; then
    bad "security: pod c1's process found"
else
    for ip in 192.0.2.11 192.0.2.12; do
        for path in /netpol /netpol/ruleset "/netpol/explain?src=default/c1&dst=default/s2" /drops; do
            got=$(sec_codes "$ip" "$path")
            check "pod c1 -> weftd $ip:9641$path: no token, forged, default's, weftd-status-reader's -> $got" \
                test "$got" = "401 401 403 200"
        done
        for path in /healthz /metrics; do
            got=$(nsenter -t "$sec_cpid" -n curl -s -o /dev/null --max-time 5 -w '%{http_code}' "http://$ip:9641$path")
            check "pod c1 -> weftd $ip:9641$path without a token -> $got" test "$got" = 200
        done
    done
    body=$(nsenter -t "$sec_cpid" -n curl -s --max-time 5 http://192.0.2.12:9641/netpol/ruleset)
    no_table() { [[ $body != *table* ]]; }
    check "a refusal tells nothing of the ruleset (${body:0:80}...)" no_table
fi

# --- the stolen token ---------------------------------------------------------
sec_wpod=$(k -n kube-system get pods -l app=weftd --field-selector "spec.nodeName=$N1" -o jsonpath='{.items[0].metadata.name}')
sec_uid=$(k -n kube-system get pod "$sec_wpod" -o jsonpath='{.metadata.uid}')
sec_tokfile=$(nsenter --mount="$STATE/ns/n1.mnt" find "/var/lib/kubelet/pods/$sec_uid/volumes" -path '*projected*' \
    -name token 2>/dev/null | head -n1)
sec_stolen=""
[[ -n $sec_tokfile ]] && sec_stolen=$(nsenter --mount="$STATE/ns/n1.mnt" cat "$sec_tokfile")
if [[ -z $sec_stolen ]]; then
    bad "security: the token of $sec_wpod read from its projected volume on $N1"
else
    ok "security: the token of $sec_wpod read from its projected volume on $N1 ($sec_tokfile)"
    # Whose it is, as the API server says (TokenReview with the admin's credentials).
    who=$(k create -o json -f - <<EOF | jq -c '.status.user | {username, node: .extra["authentication.kubernetes.io/node-name"]}'
{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "$sec_stolen"}}
EOF
)
    check "the stolen token is weftd's, bound to $N1 ($who)" \
        test "$who" = "{\"username\":\"system:serviceaccount:kube-system:weftd\",\"node\":[\"$N1\"]}"
    hip1=$(k get node "$N1" -o jsonpath='{.metadata.annotations.weft\.io/host-ip}')
    hip2=$(k get node "$N2" -o jsonpath='{.metadata.annotations.weft\.io/host-ip}')
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1" "{\"metadata\":{\"annotations\":{\"weft.io/host-ip\":\"$hip1\"}}}")
    check "stolen token: patch its own node's weft.io/host-ip -> ${got:0:3}" test "${got:0:3}" = 200
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N2" "{\"metadata\":{\"annotations\":{\"weft.io/host-ip\":\"$hip2\"}}}")
    check "stolen token: patch $N2's weft.io/host-ip -> $got" refused_by "$got" "may not write node $N2"
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N2" '{"metadata":{"annotations":{"weft.io/host-ip":"192.0.2.99"}}}')
    check "stolen token: point $N2's weft.io/host-ip elsewhere -> ${got:0:3}" test "${got:0:3}" = 403
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1" '{"metadata":{"labels":{"weft-test":"x"}}}')
    check "stolen token: add a label to its own node -> $got" refused_by "$got" "not labels"
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1" '{"spec":{"unschedulable":true}}')
    check "stolen token: cordon its own node (spec) -> ${got:0:3}" test "${got:0:3}" = 403
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1" \
        '{"spec":{"taints":[{"key":"weft-test","effect":"NoSchedule"}]}}')
    check "stolen token: taint its own node -> ${got:0:3}" test "${got:0:3}" = 403
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1" '{"metadata":{"annotations":{"example.com/x":"y"}}}')
    check "stolen token: another prefix's annotation on its own node -> $got" \
        refused_by "$got" "may change only weft.io/ annotations"
    got=$(sec_api "$sec_stolen" PATCH "/api/v1/nodes/$N1/status" '{"status":{"capacity":{"weft.io/x":"1"}}}')
    check "stolen token: patch its own node's status -> ${got:0:3}" test "${got:0:3}" = 403
    unbound=$(k -n kube-system create token weftd)
    got=$(sec_api "$unbound" PATCH "/api/v1/nodes/$N1" "{\"metadata\":{\"annotations\":{\"weft.io/host-ip\":\"$hip1\"}}}")
    check "a weftd token bound to no pod: patch $N1 -> $got" refused_by "$got" "the token names no node"
    unchanged() {
        [[ $(k get node "$N1" -o jsonpath='{.metadata.labels.weft-test}{.spec.unschedulable}{.spec.taints}') == "" &&
           $(k get node "$N2" -o jsonpath='{.metadata.annotations.weft\.io/host-ip}') == "$hip2" ]]
    }
    check "$N1 and $N2 unchanged: no label, cordon or taint on $N1, $N2's host-ip $hip2" unchanged
fi
tc=$(k get validatingadmissionpolicy weftd-own-node -o jsonpath='{.status.typeChecking}')
no_warning() { [[ $tc != *arning* ]]; }
check "weftd-own-node type-checks without warnings (status.typeChecking: '$tc')" no_warning
k delete clusterrolebinding weft-operator-test >/dev/null
k delete serviceaccount weft-operator >/dev/null
