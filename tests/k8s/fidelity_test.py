#!/usr/bin/env python3
"""Stand-in fidelity: the calls weftd makes, against the real kube-apiserver and
against tests/integration/agent/fake_apiserver.py, with the answers compared.

The fast suites test weftd against the stand-in only; this test keeps the
stand-in honest. It replays, on both servers, the requests weftd's informers
and control plane send (lists with fieldSelector, labelSelector, limit and
continue; watches with allowWatchBookmarks and timeoutSeconds, under a
selector; a watch from a compacted resourceVersion and a continue token after
a compaction, both 410; a Node merge patch; NetworkPolicy defaulting; the
Status of a 404, a 422, and a 401 for a wrong token; the status server's
TokenRequest, TokenReview and SubjectAccessReview) and compares, step by
step:

  * exactly: HTTP status codes, Status reason/code, watch event types in
    order, the names a paginated list yields, the spec a NetworkPolicy is
    defaulted to, a patched Node's annotations;
  * by shape: every JSON path and the type of its value, in each answer.

Each difference is printed; the test fails on any not in ACCEPTED (each with
why it does not matter to a client). The real side is scripts/cluster.sh's
control plane (its own state dir, brought up and down here); compaction is
etcd's own (its v3 JSON gateway, /v3/kv/compaction); the stand-in runs in the
same network namespace.

  sudo tests/k8s/fidelity_test.py           needs build-k8s/bin (scripts/k8s-build.sh)

Skipped (exit 0, reason printed) without the Kubernetes binaries. Ends with
"N passed, N failed".
"""
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.parse

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER = os.path.join(REPO, "scripts", "cluster.sh")
FAKE = os.path.join(REPO, "tests", "integration", "agent", "fake_apiserver.py")
BIN = os.environ.get("WEFT_K8S_BIN", os.path.join(REPO, "build-k8s", "bin"))
STATE = os.environ.get("WEFT_CLUSTER_STATE", os.path.join(REPO, "build-k8s", "cluster-fidelity-test"))

# Differences that do not matter to a client, path regex -> why. Everything
# else fails the test.
ACCEPTED = {
    r"(^|\.)metadata\.managedFields": "server-side apply bookkeeping; no client of ours reads it",
}


class Api:
    """One server: requests, watches, and the one control a client cannot do (compaction)."""

    def __init__(self, name, host, port, ctx=None, token=None):
        self.name, self.host, self.port, self.ctx, self.token = name, host, port, ctx, token

    def conn(self, timeout=30):
        if self.ctx:
            return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, ctype=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if ctype:
            h["Content-Type"] = ctype
        return h

    def req(self, method, path, body=None, ctype="application/json"):
        c = self.conn()
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers=self.headers(ctype if data else None))
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def watch(self, path, seconds):
        """(status, [events]) of a watch read until the server ends it or `seconds` + 10 pass."""
        c = self.conn(timeout=seconds + 10)
        c.request("GET", path, headers=self.headers())
        r = c.getresponse()
        if r.status != 200:
            raw = r.read()
            c.close()
            return r.status, [json.loads(raw)] if raw else []
        events, buf = [], b""
        try:
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        events.append(json.loads(line))
        except TimeoutError:
            events.append({"type": "CLIENT-TIMEOUT"})
        c.close()
        return 200, events


class Fake(Api):
    def compact(self):
        st, _ = self.req("POST", "/_test/expire")
        assert st == 200, st


class Real(Api):
    def compact(self):
        """etcd compacted at its current revision (its v3 JSON gateway), then the
        API server restarted: its watch cache, and the list snapshots it serves
        continue tokens from, start anew at the current revision. (Compaction
        alone is not seen: v1.36 serves an old continue token and a watch from an
        RV its cache still holds from memory.)"""
        c = http.client.HTTPConnection("127.0.0.1", 2379, timeout=10)
        c.request("POST", "/v3/kv/range", body=json.dumps({"key": "AA=="}))
        rev = int(json.loads(c.getresponse().read())["header"]["revision"])
        c.request("POST", "/v3/kv/compaction", body=json.dumps({"revision": rev, "physical": True}))
        r = c.getresponse()
        assert r.status == 200, r.read()
        r.read()
        c.close()
        subprocess.run([CLUSTER, "restart", "kube-apiserver"], check=True)


def shape(v, path="", out=None):
    """{path: type} for every value in v; list elements share the path 'p[]'."""
    if out is None:
        out = {}
    t = type(v).__name__ if v is not None else "null"
    out.setdefault(path or ".", set()).add(t)
    if isinstance(v, dict):
        for k, x in v.items():
            shape(x, (path + "." if path else "") + k, out)
    elif isinstance(v, list):
        for x in v:
            shape(x, path + "[]", out)
    return out


class Compare:
    def __init__(self):
        self.passed = self.failed = 0
        self.accepted = []

    def exact(self, what, real, fake):
        if real == fake:
            self.passed += 1
            print("PASS %s: %s" % (what, json.dumps(real)[:200]))
        else:
            self.failed += 1
            print("FAIL %s:\n  real: %s\n  fake: %s" % (what, json.dumps(real)[:2000], json.dumps(fake)[:2000]))

    def shapes(self, what, real, fake):
        a, b = shape(real), shape(fake)
        diffs = []
        for p in sorted(set(a) | set(b)):
            if a.get(p) == b.get(p):
                continue
            why = next((w for rx, w in ACCEPTED.items() if re.search(rx, p)), None)
            d = "%s: real %s, fake %s" % (p, sorted(a.get(p, [])) or "absent", sorted(b.get(p, [])) or "absent")
            if why:
                self.accepted.append((what, why))
            else:
                diffs.append(d)
        if diffs:
            self.failed += 1
            print("FAIL %s: shapes differ\n  %s" % (what, "\n  ".join(diffs)))
        else:
            self.passed += 1
            print("PASS %s: same shape (%d paths)" % (what, len(a)))


def q(path, **params):
    return path + "?" + urllib.parse.urlencode(params) if params else path


NS = "weft-fid"
NP = "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies" % NS
NPALL = "/apis/networking.k8s.io/v1/networkpolicies"


def np(name, labels, spec):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec}


def node(name, labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def list_all(api, path, limit, **params):
    """(names, pages, last status) following continue tokens."""
    names, pages, cont = [], [], None
    while True:
        p = dict(params, limit=limit)
        if cont:
            p["continue"] = cont
        st, body = api.req("GET", q(path, **p))
        if st != 200:
            return names, pages, (st, body)
        pages.append(body)
        names += [i["metadata"]["name"] for i in body["items"]]
        cont = body["metadata"].get("continue")
        if not cont:
            return names, pages, (st, None)


def scenario(api, unauth):
    """Runs every step on one server (`unauth`: the same server with a wrong
    bearer token and no client certificate); returns {step: answer}."""
    out = {}

    def step(name, value):
        out[name] = value
        return value

    # A token the server does not accept (weftd re-reads its token file on a 401).
    step("wrong token: list nodes", unauth.req("GET", q("/api/v1/nodes", limit=500)))
    st, events = unauth.watch(q("/api/v1/nodes", watch=1, allowWatchBookmarks="true", timeoutSeconds=2), 2)
    step("wrong token: watch nodes", (st, events))

    step("create namespace", api.req("POST", "/api/v1/namespaces",
                                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
    # Nodes: weftd lists them all (limit 500), gets its own by name, merge-patches its annotations.
    for i in range(3):
        step("create node %d" % i, api.req("POST", "/api/v1/nodes", node("fid-%d" % i, {"weft.io/fid": "yes"})))
    step("list nodes limit=500", api.req("GET", q("/api/v1/nodes", limit=500, labelSelector="weft.io/fid=yes")))
    step("get node", api.req("GET", "/api/v1/nodes/fid-1"))
    step("list nodes fieldSelector metadata.name", api.req(
        "GET", q("/api/v1/nodes", fieldSelector="metadata.name=fid-1", limit=500)))
    step("patch node annotations", api.req(
        "PATCH", "/api/v1/nodes/fid-1",
        {"metadata": {"annotations": {"weft.io/vtep-mac": "0a:58:00:00:00:01", "weft.io/host-ip": "192.0.2.11",
                                      "weft.io/backend": "vxlan", "weft.io/host-ip6": None}}},
        "application/merge-patch+json"))
    step("patch node annotation null removes", api.req(
        "PATCH", "/api/v1/nodes/fid-1", {"metadata": {"annotations": {"weft.io/backend": None}}},
        "application/merge-patch+json"))
    step("patch missing node", api.req("PATCH", "/api/v1/nodes/fid-missing", {"metadata": {"annotations": {"a": "b"}}},
                                       "application/merge-patch+json"))
    step("get missing node", api.req("GET", "/api/v1/nodes/fid-missing"))

    # NetworkPolicy defaulting, as weftd's informer receives the objects.
    specs = {
        "empty": {"podSelector": {}},
        "ingress-ports": {"podSelector": {"matchLabels": {"app": "a"}},
                          "ingress": [{"ports": [{"port": 80}, {"port": "http"}, {"protocol": "UDP", "port": 53}],
                                       "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]},
        "egress-only": {"podSelector": {}, "egress": [{"to": [{"namespaceSelector": {}}]}]},
        "both-types": {"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]},
        "empty-rules": {"podSelector": {}, "ingress": [], "egress": []},
        "endport": {"podSelector": {}, "egress": [{"ports": [{"port": 1000, "endPort": 2000}]}]},
    }
    for name, spec in specs.items():
        st, body = api.req("POST", NP, np("def-" + name, {"weft.io/fid": "def"}, spec))
        step("create networkpolicy %s" % name, (st, body))
    step("create invalid networkpolicy", api.req("POST", NP, np("bad", {}, {"podSelector": {}, "policyTypes": ["Sideways"]})))

    # Pagination under a label selector: 9 policies, 4 of them labelled.
    for i in range(9):
        api.req("POST", NP, np("pg-%d" % i, {"weft.io/fid": "page", "sel": "yes" if i % 2 == 0 else "no"},
                               {"podSelector": {}}))
    step("paginate limit=2", list_all(api, NPALL, 2, labelSelector="weft.io/fid=page"))
    step("paginate limit=2 labelSelector sel=yes", list_all(api, NPALL, 2, labelSelector="weft.io/fid=page,sel=yes"))
    step("paginate fieldSelector metadata.namespace", list_all(
        api, NPALL, 500, fieldSelector="metadata.namespace=%s" % NS, labelSelector="weft.io/fid=page"))

    # A watch under a label selector from a list's resourceVersion: an object
    # created, one that stops matching, one that starts matching, one deleted.
    st, lst = api.req("GET", q(NP, labelSelector="sel=yes", limit=500))
    rv = lst["metadata"]["resourceVersion"]
    api.req("POST", NP, np("w-new", {"sel": "yes"}, {"podSelector": {}}))
    api.req("PATCH", NP + "/pg-0", {"metadata": {"labels": {"sel": "no"}}}, "application/merge-patch+json")
    api.req("PATCH", NP + "/pg-1", {"metadata": {"labels": {"sel": "yes"}}}, "application/merge-patch+json")
    api.req("DELETE", NP + "/pg-2")
    st, events = api.watch(q(NP, watch=1, allowWatchBookmarks="true", resourceVersion=rv, timeoutSeconds=4,
                             labelSelector="sel=yes"), 4)
    # The real server may add a BOOKMARK to this 4 s watch (due 2 s before its
    # timeout, sent on the watch cache's 1 s tick: inside the window or just
    # after it, by the machine's load). Bookmarks are compared on their own
    # below; here only the object events.
    step("watch under selector", (st, [e for e in events if e.get("type") != "BOOKMARK"]))

    # Bookmarks: watches that run to their timeout. The real server sends one
    # 2 s before the timeout (and every minute), only once its cache's
    # resourceVersion is past the watch's: a write the watch does not see (an
    # object its selector leaves out) moves it. The stand-in sends one when its
    # test control says so. Nodes, Namespaces, Pods and NetworkPolicies, at once.
    import threading
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bm"},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2"}]}}
    cases = {
        "nodes": ("/api/v1/nodes", {"fieldSelector": "metadata.name=fid-0"},
                  ("PATCH", "/api/v1/nodes/fid-2", {"metadata": {"labels": {"bm": "1"}}}, "application/merge-patch+json")),
        "namespaces": ("/api/v1/namespaces", {"labelSelector": "weft.io/fid=none"},
                       ("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": "weft-fid-bm"}}, "application/json")),
        "pods": ("/api/v1/namespaces/%s/pods" % NS, {},
                 ("POST", "/api/v1/namespaces/default/pods", pod, "application/json")),
        "networkpolicies": (NP, {},
                            ("POST", NP.replace(NS, "default"),
                             dict(np("elsewhere", {}, {"podSelector": {}}),
                                  metadata={"name": "elsewhere", "namespace": "default"}), "application/json")),
    }
    results = {}

    def run(kind, path, params, trigger):
        st, lst = api.req("GET", q(path, limit=500, **params))
        threading.Timer(1.0, lambda: api.req(*trigger)).start()
        results[kind] = api.watch(q(path, watch=1, allowWatchBookmarks="true",
                                    resourceVersion=lst["metadata"]["resourceVersion"], timeoutSeconds=8, **params), 8)

    threads = [threading.Thread(target=run, args=(k,) + v) for k, v in cases.items()]
    for t in threads:
        t.start()
    if isinstance(api, Fake):
        threading.Timer(3.0, lambda: api.req("POST", "/_test/bookmark")).start()
    for t in threads:
        t.join()
    for kind in cases:
        st, events = results[kind]
        step("watch bookmark %s" % kind, (st, [e for e in events if e.get("type") == "BOOKMARK"][:1]))

    # 410 after compaction: a continue token, then a watch from an old RV.
    st, first = api.req("GET", q(NPALL, limit=2, labelSelector="weft.io/fid=page"))
    old_rv = first["metadata"]["resourceVersion"]
    for i in range(3):   # history after the RV, then compact it away
        api.req("PATCH", NP + "/pg-3", {"metadata": {"annotations": {"n": str(i)}}}, "application/merge-patch+json")
    api.compact()
    time.sleep(1)
    step("continue after compaction", api.req(
        "GET", q(NPALL, limit=2, labelSelector="weft.io/fid=page", **{"continue": first["metadata"]["continue"]})))
    st, events = api.watch(q(NP, watch=1, allowWatchBookmarks="true", resourceVersion="1", timeoutSeconds=3), 3)
    step("watch from compacted rv", (st, events[:1]))
    cnp_scenario(api, step)
    services_scenario(api, step)
    return out


SVC = "/api/v1/namespaces/%s/services" % NS
EPS = "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % NS


def services_scenario(api, step):
    """What weftd's Service proxy reads (--service-proxy): Services (defaulted:
    type, affinity timeout, targetPort, traffic policies, families, the
    allocated clusterIP and nodePort, compared by shape) and EndpointSlices,
    listed and watched cluster-wide. No selector: no controller writes a slice
    of its own on the real side."""
    labels = {"weft.io/fid": "svc"}
    step("services: create clusterip", api.req("POST", SVC, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "fid-web", "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
    step("services: create nodeport clientip", api.req("POST", SVC, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "fid-np", "labels": labels},
        "spec": {"type": "NodePort", "sessionAffinity": "ClientIP", "ports": [{"port": 81}]}}))
    step("services: create invalid port", api.req("POST", SVC, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "fid-bad", "labels": labels},
        "spec": {"ports": [{"port": 70000}]}}))
    step("endpointslices: create", api.req("POST", EPS, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "fid-web-1", "labels": dict(labels, **{"kubernetes.io/service-name": "fid-web"})},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": True}, "nodeName": "fid-0"}]}))
    st, lst = step("services: list", api.req("GET", q("/api/v1/services", limit=500, labelSelector="weft.io/fid=svc")))
    step("endpointslices: list", api.req("GET", q("/apis/discovery.k8s.io/v1/endpointslices", limit=500,
                                                  labelSelector="weft.io/fid=svc")))
    rv = lst["metadata"]["resourceVersion"]
    api.req("PATCH", EPS + "/fid-web-1", {"endpoints": [{"addresses": ["10.244.2.5"]}]}, "application/merge-patch+json")
    api.req("DELETE", EPS + "/fid-web-1")
    st, events = api.watch(q("/apis/discovery.k8s.io/v1/endpointslices", watch=1, resourceVersion=rv,
                             timeoutSeconds=3, labelSelector="weft.io/fid=svc"), 3)
    step("endpointslices: watch", (st, [e for e in events if e.get("type") != "BOOKMARK"]))


CNP = "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies"
CRD = os.path.join(REPO, "deploy", "crd", "clusternetworkpolicies.yaml")


def cnp(name, tier, priority, egress):
    return {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
            "metadata": {"name": name, "labels": {"weft.io/fid": "cnp"}},
            "spec": {"tier": tier, "priority": priority, "subject": {"namespaces": {"matchLabels": {"fid": "x"}}},
                     "egress": egress}}


def cnp_scenario(api, step):
    """ClusterNetworkPolicy as weftd uses it (issue 23): the list before the
    CRD exists (404: weftd treats it as empty), the CRD installed (the real
    server: deploy/crd's manifest POSTed; the stand-in: its test control),
    then list, watch, the /status merge patch weftd writes, a spec change
    (generation), a schema violation and a strategic merge patch."""
    step("cnp: list without the CRD", api.req("GET", q(CNP, limit=500)))
    if isinstance(api, Fake):
        api.req("POST", "/_test/crds", {"install": ["clusternetworkpolicies"]})
    else:
        import yaml
        with open(CRD) as f:
            crd = yaml.safe_load(f)
        api.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for _ in range(300):  # Established: the list answers
        if api.req("GET", q(CNP, limit=1))[0] == 200:
            break
        time.sleep(0.1)
    deny = [{"name": "meta", "action": "Deny", "to": [{"networks": ["169.254.169.254/32"]}]}]
    step("cnp: create", api.req("POST", CNP, cnp("fid-a", "Admin", 10, deny)))
    step("cnp: create baseline", api.req("POST", CNP, cnp("fid-b", "Baseline", 0, [
        {"action": "Accept", "to": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}],
         "protocols": [{"destinationNamedPort": "dns"}]}])))
    step("cnp: create invalid tier", api.req("POST", CNP, cnp("fid-bad", "Middle", 10, deny)))
    step("cnp: create invalid priority", api.req("POST", CNP, cnp("fid-bad2", "Admin", 1001, deny)))
    st, lst = step("cnp: list limit=500", api.req("GET", q(CNP, limit=500, labelSelector="weft.io/fid=cnp")))
    rv = lst["metadata"]["resourceVersion"] if st == 200 else "0"
    cond = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "enforced by weft",
            "observedGeneration": 1, "lastTransitionTime": "2026-11-27T06:00:00Z"}
    step("cnp: patch status", api.req("PATCH", CNP + "/fid-a/status", {"status": {"conditions": [cond]}},
                                      "application/merge-patch+json"))
    step("cnp: patch spec", api.req("PATCH", CNP + "/fid-a", {"spec": {"priority": 20}}, "application/merge-patch+json"))
    step("cnp: strategic merge patch", api.req("PATCH", CNP + "/fid-a", {"spec": {"priority": 21}},
                                               "application/strategic-merge-patch+json"))
    api.req("DELETE", CNP + "/fid-b")
    st, events = api.watch(q(CNP, watch=1, allowWatchBookmarks="true", resourceVersion=rv, timeoutSeconds=3,
                             labelSelector="weft.io/fid=cnp"), 3)
    step("watch cnp", (st, events))
    step("cnp: get", api.req("GET", CNP + "/fid-a"))
    step("cnp: get missing", api.req("GET", CNP + "/fid-missing"))

    # Identities (weftd's status server, issue 33): a ServiceAccount's token
    # from TokenRequest (bound to a Pod on a Node: its user names both),
    # TokenReview of it and of a forged one, SubjectAccessReview of its user
    # on nodes/weft-status before and after an RBAC grant.
    SA = "/api/v1/namespaces/%s/serviceaccounts" % NS
    step("identity: create serviceaccount", api.req("POST", SA, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                                 "metadata": {"name": "fid-sa"}}))
    api.req("POST", "/api/v1/namespaces/%s/pods" % NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fid-bound"},
        "spec": {"nodeName": "fid-1", "serviceAccountName": "fid-sa",
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    token_req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    st, tr = step("identity: token request", api.req("POST", SA + "/fid-sa/token", token_req))
    bound_req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 3600,
                          "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "fid-bound"}}}
    st2, btr = step("identity: token request bound to a pod", api.req("POST", SA + "/fid-sa/token", bound_req))
    step("identity: token request of a missing serviceaccount", api.req("POST", SA + "/fid-missing/token", token_req))
    TR = "/apis/authentication.k8s.io/v1/tokenreviews"

    def review(token):
        return api.req("POST", TR, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                    "spec": {"token": token}})
    token = tr["status"]["token"] if st == 201 else ""
    bound = btr["status"]["token"] if st2 == 201 else ""
    st, rev = step("identity: token review", review(token))
    step("identity: token review of a pod-bound token", review(bound))
    step("identity: token review of a forged token", review("not-a-token"))
    user = (rev or {}).get("status", {}).get("user", {}) if st == 201 else {}
    SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

    def access(name):
        return api.req("POST", SAR, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.get("username", ""), "uid": user.get("uid", ""), "groups": user.get("groups", []),
                     "extra": user.get("extra", {}),
                     "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes",
                                            "subresource": "weft-status", "name": name}}})
    step("identity: access review without a grant", access("fid-1"))
    RBAC = "/apis/rbac.authorization.k8s.io/v1/"
    api.req("POST", RBAC + "clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "weft-fid"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/weft-status"], "verbs": ["get"]}]})
    api.req("POST", RBAC + "clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "weft-fid"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "weft-fid"},
        "subjects": [{"kind": "ServiceAccount", "name": "fid-sa", "namespace": NS}]})
    time.sleep(1)  # the real RBAC authorizer reads through an informer
    step("identity: access review with a grant", access("fid-1"))


def names(events):
    return [(e.get("type"), (e.get("object") or {}).get("metadata", {}).get("name")) for e in events]


def status_of(body):
    if isinstance(body, dict) and body.get("kind") == "Status":
        return {k: body.get(k) for k in ("kind", "apiVersion", "status", "reason", "code")}
    return None


def compare(real, fake):
    c = Compare()
    for k in real:
        r, f = real[k], fake[k]
        if k.startswith("paginate"):
            # Page sizes differ by design: the stand-in cuts a page before it
            # applies selectors (short and empty pages), the real server fills
            # them. Compared: the names, the items' shape, the pages' metadata.
            rn, rp, rs = r
            fn, fp, fs = f
            c.exact(k + ": names", sorted(rn), sorted(fn))
            c.exact(k + ": final status", rs[0], fs[0])
            lim = 2 if "limit=2" in k else 500
            c.exact(k + ": every page within the limit", all(len(p["items"]) <= lim for p in rp),
                    all(len(p["items"]) <= lim for p in fp))
            c.shapes(k + ": items", [i for p in rp for i in p["items"]], [i for p in fp for i in p["items"]])
            if len(rp) > 1 and len(fp) > 1:
                c.shapes(k + ": a page with a continue token", dict(rp[0], items=[]), dict(fp[0], items=[]))
            c.shapes(k + ": the last page", dict(rp[-1], items=[]), dict(fp[-1], items=[]))
            continue
        (rst, rb), (fst, fb) = r, f
        c.exact(k + ": HTTP status", rst, fst)
        if k.startswith("watch"):
            c.exact(k + ": events", names(rb), names(fb))
            if rb and fb:
                c.shapes(k + ": first event", rb[0], fb[0])
                st = status_of(rb[0].get("object")), status_of(fb[0].get("object"))
                if st[0] or st[1]:
                    c.exact(k + ": ERROR Status", st[0], st[1])
            continue
        if status_of(rb) or status_of(fb):
            c.exact(k + ": Status", status_of(rb), status_of(fb))
        if k.startswith("create networkpolicy") and rst == fst == 201:
            c.exact(k + ": defaulted spec", rb["spec"], fb["spec"])
        if k.startswith("cnp: ") and rst == fst and rst in (200, 201) and "metadata" in rb:
            c.exact(k + ": spec", rb.get("spec"), fb.get("spec"))
            c.exact(k + ": generation", rb["metadata"].get("generation"), fb["metadata"].get("generation"))
            c.exact(k + ": status", rb.get("status"), fb.get("status"))
        if k.startswith("identity: token review") and rst == fst == 201:
            ru, fu = rb["status"].get("user", {}), fb["status"].get("user", {})
            c.exact(k + ": authenticated", rb["status"].get("authenticated"), fb["status"].get("authenticated"))
            c.exact(k + ": user", {x: ru.get(x) for x in ("username", "groups")},
                    {x: fu.get(x) for x in ("username", "groups")})
            c.exact(k + ": extra keys", sorted(ru.get("extra", {})), sorted(fu.get("extra", {})))
            c.exact(k + ": node", ru.get("extra", {}).get("authentication.kubernetes.io/node-name"),
                    fu.get("extra", {}).get("authentication.kubernetes.io/node-name"))
        if k.startswith("identity: access review") and rst == fst == 201:
            c.exact(k + ": status", rb.get("status"), fb.get("status"))
        if k.startswith("patch node") and rst == fst == 200:
            c.exact(k + ": annotations", rb["metadata"].get("annotations"), fb["metadata"].get("annotations"))
        if k.startswith("list") and rst == fst == 200:
            c.exact(k + ": names", [i["metadata"]["name"] for i in rb["items"]],
                    [i["metadata"]["name"] for i in fb["items"]])
        c.shapes(k, rb, fb)
    by_why = {}
    for what, why in c.accepted:
        by_why.setdefault(why, []).append(what)
    for why, whats in by_why.items():
        print("ACCEPTED in %d answers (%s): %s" % (len(set(whats)), why, ", ".join(sorted(set(whats)))))
    return c


def inner(ca, cert, key):
    """Runs inside the control plane's network namespace."""
    fake = subprocess.Popen([sys.executable, FAKE, "--listen", "127.0.0.1:0", "--token", "fid"],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(fake.stdout.readline().rsplit(":", 1)[1])
        ctx = ssl.create_default_context(cafile=ca)
        ctx.load_cert_chain(cert, key)
        real = Real("real", "192.0.2.1", 6443, ctx=ctx)
        stand_in = Fake("fake", "127.0.0.1", port, token="fid")
        r = scenario(real, Real("real", "192.0.2.1", 6443, ctx=ssl.create_default_context(cafile=ca),
                                token="not-a-token"))
        f = scenario(stand_in, Fake("fake", "127.0.0.1", port, token="not-a-token"))
        with open(os.path.join(STATE, "answers.json"), "w") as out:
            json.dump({"real": r, "fake": f}, out, indent=1, default=str)
        c = compare(r, f)
        print("%d passed, %d failed" % (c.passed, c.failed))
        return 1 if c.failed else 0
    finally:
        fake.terminate()
        fake.wait()


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--inner":
        return inner(*sys.argv[2:])
    for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            print("SKIP: %s is missing (build it: scripts/k8s-build.sh)" % os.path.join(BIN, b))
            # CI builds them first (scripts/test.sh runs k8s-build.sh): missing there is a defect.
            if os.environ.get("CI") == "true":
                print("FAIL: CI=true, and scripts/k8s-build.sh should have built it")
                return 1
            print("0 passed, 0 failed, 1 skipped")
            return 0
    if os.geteuid() != 0:
        print("fidelity_test: needs root (network namespaces)", file=sys.stderr)
        return 1
    env = dict(os.environ, WEFT_CLUSTER_STATE=STATE, WEFT_K8S_BIN=BIN)
    subprocess.run([CLUSTER, "down"], env=env, stderr=subprocess.DEVNULL)
    try:
        up = subprocess.run([CLUSTER, "up", "--nodes", "0"], env=env, stdout=subprocess.PIPE, text=True)
        if up.returncode != 0 or not up.stdout.strip().splitlines()[-1].startswith("KUBECONFIG="):
            print("FAIL cluster.sh up (exit %d)\n0 passed, 1 failed" % up.returncode)
            return 1
        ns = subprocess.run([CLUSTER, "netns"], env=env, stdout=subprocess.PIPE, text=True).stdout.strip()
        pki = os.path.join(STATE, "pki")
        return subprocess.run(["ip", "netns", "exec", ns, sys.executable, os.path.abspath(__file__), "--inner",
                               pki + "/ca.crt", pki + "/admin.crt", pki + "/admin.key"], env=env).returncode
    finally:
        if not os.environ.get("KEEP"):
            subprocess.run([CLUSTER, "down"], env=env, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
