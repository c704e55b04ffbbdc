#!/usr/bin/env python3
"""Self-test of fake_apiserver.py: the semantics clients rely on (TLS and
tokens, shapes and defaulting, selectors, pagination, watches, 410s). Each
test starts its own server on 127.0.0.1 over HTTPS with a throwaway CA."""
import http.client
import json
import os
import queue
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "fake_apiserver.py")
TOKEN = "t0ken"
CERTS = None
NP = "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies"
PODS = "/api/v1/namespaces/%s/pods"


def make_certs(d):
    def run(*argv):
        subprocess.run(argv, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", d + "/ca.crt", "-subj", "/CN=test-ca",
        "-days", "2")
    run("openssl", "req", "-new", *ec, "-keyout", d + "/server.key", "-out", d + "/server.csr",
        "-subj", "/CN=kube-apiserver")
    with open(d + "/ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:192.0.2.254\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.crt", "-CAkey", d + "/ca.key",
        "-CAcreateserial", "-out", d + "/server.crt", "-days", "2", "-extfile", d + "/ext")


def setUpModule():
    global CERTS
    CERTS = tempfile.mkdtemp(prefix="fakeapi-")
    make_certs(CERTS)


def tearDownModule():
    shutil.rmtree(CERTS, ignore_errors=True)


def pod(name, labels=None, node="", ports=None, ns=None):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
         "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "ports": ports or []}]}}
    if labels:
        p["metadata"]["labels"] = labels
    if node:
        p["spec"]["nodeName"] = node
    if ns:
        p["metadata"]["namespace"] = ns
    return p


class Watch:
    """A watch stream read line by line on a thread."""

    def __init__(self, t, path):
        self.conn = t.conn()
        self.conn.request("GET", path, headers={"Authorization": "Bearer " + t.token})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.lines = queue.Queue()
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                self.lines.put(line)
        except Exception as e:  # noqa: BLE001 - the end of the stream, however it ends
            self.lines.put(e)
        self.lines.put(None)

    def next(self, timeout=5):
        item = self.lines.get(timeout=timeout)
        if item is None or isinstance(item, Exception):
            return item
        if not item.endswith(b"\n"):
            return ("partial", item)
        return json.loads(item)

    def events(self, n, timeout=5):
        return [self.next(timeout) for _ in range(n)]

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        except (OSError, AttributeError):
            pass
        self.conn.close()


class FakeApiServerTest(unittest.TestCase):
    def setUp(self):
        self.proc = subprocess.Popen(
            [sys.executable, SERVER, "--listen", "127.0.0.1:0", "--cert", CERTS + "/server.crt",
             "--key", CERTS + "/server.key", "--token", TOKEN], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.assertTrue(line.startswith("listening on https://127.0.0.1:"), line)
        self.port = int(line.rsplit(":", 1)[1])
        self.ctx = ssl.create_default_context(cafile=CERTS + "/ca.crt")
        self.token = TOKEN
        self.watches = []

    def tearDown(self):
        for w in self.watches:
            w.close()
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def conn(self):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)

    def req(self, method, path, body=None, ctype="application/json", token=None):
        c = self.conn()
        headers = {"Authorization": "Bearer " + (token if token is not None else self.token)}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = ctype
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode()

    def ok(self, method, path, body=None, ctype="application/json"):
        code, out = self.req(method, path, body, ctype)
        self.assertIn(code, (200, 201), out)
        return out

    def watch(self, path):
        w = Watch(self, path)
        self.watches.append(w)
        return w

    def rv(self):
        return int(self.ok("GET", "/api/v1/namespaces")["metadata"]["resourceVersion"])

    # ------------------------------------------------------------ tests

    def test_tls_auth_and_token_rotation(self):
        code, out = self.req("GET", "/api/v1/nodes", token="wrong")
        self.assertEqual(code, 401)
        self.assertEqual((out["kind"], out["reason"], out["code"]), ("Status", "Unauthorized", 401))
        self.assertEqual(self.req("GET", "/version", token="")[0], 200)
        self.assertEqual(self.req("GET", "/healthz", token=""), (200, "ok"))
        self.assertEqual(self.req("GET", "/api/v1/nodes")[0], 200)
        self.ok("POST", "/_test/token", {"token": "new"})
        self.assertEqual(self.req("GET", "/api/v1/nodes")[0], 401)
        self.token = "new"
        self.assertEqual(self.req("GET", "/api/v1/nodes")[0], 200)
        # The certificate is checked: a context without the CA refuses it.
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=ssl.create_default_context(), timeout=5)
        with self.assertRaises(ssl.SSLCertVerificationError):
            c.request("GET", "/version")

    def test_token_request_review_and_rbac_access_review(self):
        sa = "/api/v1/namespaces/kube-system/serviceaccounts"
        self.ok("POST", sa, {"metadata": {"name": "weftd"}})
        self.ok("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "other"}})
        self.ok("POST", "/api/v1/nodes", {"metadata": {"name": "n1"}})
        self.ok("POST", PODS % "kube-system", pod("weftd-a", node="n1"))
        code, out = self.req("POST", sa + "/missing/token", {"spec": {}})
        self.assertEqual((code, out["reason"]), (404, "NotFound"))
        tr = self.ok("POST", sa + "/weftd/token",
                     {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "weftd-a"}}})
        self.assertEqual(tr["kind"], "TokenRequest")
        weftd = tr["status"]["token"]
        other = self.ok("POST", "/api/v1/namespaces/default/serviceaccounts/other/token", {"spec": {}})["status"]["token"]
        rev = self.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": weftd}})
        u = rev["status"]["user"]
        self.assertTrue(rev["status"]["authenticated"])
        self.assertEqual(u["username"], "system:serviceaccount:kube-system:weftd")
        self.assertEqual(u["extra"]["authentication.kubernetes.io/node-name"], ["n1"])
        self.assertIn("system:serviceaccounts:kube-system", u["groups"])
        bad = self.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": "forged"}})
        self.assertNotIn("authenticated", bad["status"])
        self.assertIn("invalid bearer token", bad["status"]["error"])

        def sar(user, groups, sub, name="n1"):
            return self.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                           {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                            "spec": {"user": user, "groups": groups,
                                     "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": sub,
                                                            "name": name, "version": "v1"}}})["status"]
        self.assertEqual(sar(u["username"], u["groups"], "proxy"), {"allowed": False})
        self.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                {"metadata": {"name": "reader"},
                 "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]})
        self.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                {"metadata": {"name": "reader"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                             "kind": "ClusterRole", "name": "reader"},
                 "subjects": [{"kind": "ServiceAccount", "name": "weftd", "namespace": "kube-system"}]})
        yes = sar(u["username"], u["groups"], "proxy")
        self.assertEqual(yes, {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "reader" of '
                                                         'ClusterRole "reader" to ServiceAccount "weftd/kube-system"'})
        self.assertFalse(sar(u["username"], u["groups"], "metrics")["allowed"])
        self.assertFalse(sar("system:serviceaccount:default:other", [], "proxy")["allowed"])
        self.assertTrue(sar("x", ["system:masters"], "anything")["allowed"])
        # Tokens so made are accepted; every write names its writer and the writer's node.
        self.assertEqual(self.req("GET", "/api/v1/nodes", token=other)[0], 200)
        self.assertEqual(self.req("PATCH", "/api/v1/nodes/n1", {"metadata": {"annotations": {"a": "b"}}},
                                  "application/merge-patch+json", token=weftd)[0], 200)
        writes = self.ok("GET", "/_test/writes")
        self.assertIn({"method": "PATCH", "path": "/api/v1/nodes/n1", "code": 200,
                       "user": "system:serviceaccount:kube-system:weftd", "node": "n1"}, writes)
        self.assertIn({"method": "POST", "path": "/api/v1/nodes", "code": 201, "user": "weft-test-admin",
                       "node": ""}, writes)

    def test_create_get_replace_delete_and_conflicts(self):
        start = self.rv()
        p = self.ok("POST", PODS % "default", pod("a", {"app": "x"}))
        m = p["metadata"]
        self.assertEqual((p["kind"], p["apiVersion"], m["namespace"]), ("Pod", "v1", "default"))
        self.assertGreater(int(m["resourceVersion"]), start)
        self.assertTrue(m["uid"] and m["creationTimestamp"].endswith("Z"))
        self.assertEqual(p["status"], {"phase": "Pending", "qosClass": "BestEffort"})
        code, out = self.req("POST", PODS % "default", pod("a"))
        self.assertEqual((code, out["reason"]), (409, "AlreadyExists"))
        code, out = self.req("POST", PODS % "nope", pod("a"))
        self.assertEqual((code, out["reason"], out["message"]), (404, "NotFound", 'namespaces "nope" not found'))
        self.assertEqual(self.req("GET", PODS % "default" + "/zz")[0], 404)
        # Replace with a stale resourceVersion: 409 Conflict; with none: unconditional.
        stale = json.loads(json.dumps(p))
        stale["metadata"]["resourceVersion"] = "1"
        self.assertEqual(self.req("PUT", PODS % "default" + "/a", stale)[1]["reason"], "Conflict")
        p["metadata"]["labels"] = {"app": "y"}
        del p["metadata"]["resourceVersion"]
        q = self.ok("PUT", PODS % "default" + "/a", p)
        self.assertEqual(q["metadata"]["labels"], {"app": "y"})
        self.assertEqual(q["metadata"]["uid"], m["uid"])
        # A no-op write changes nothing.
        again = self.ok("PUT", PODS % "default" + "/a", q)
        self.assertEqual(again["metadata"]["resourceVersion"], q["metadata"]["resourceVersion"])
        # A pod's status is not written through the main resource, only /status.
        q["status"] = {"phase": "Running", "podIP": "10.0.0.5"}
        self.assertEqual(self.ok("PUT", PODS % "default" + "/a", q)["status"]["phase"], "Pending")
        s = self.ok("PUT", PODS % "default" + "/a/status", q)
        self.assertEqual(s["status"]["podIPs"], [{"ip": "10.0.0.5"}])
        # A pod's spec is immutable but for images.
        s["spec"]["nodeName"] = "n1"
        self.assertEqual(self.req("PUT", PODS % "default" + "/a", s)[0], 422)
        s["spec"]["nodeName"] = ""
        del s["spec"]["nodeName"]
        b = self.ok("POST", PODS % "default" + "/a/binding", {"kind": "Binding", "apiVersion": "v1",
                                                              "metadata": {"name": "a"}, "target": {"name": "n1"}})
        self.assertEqual(b["status"], "Success")
        self.assertEqual(self.ok("GET", PODS % "default" + "/a")["spec"]["nodeName"], "n1")
        d = self.ok("DELETE", PODS % "default" + "/a")
        self.assertEqual(d["kind"], "Pod")
        self.assertEqual(self.req("DELETE", PODS % "default" + "/a")[0], 404)
        # Delete answers for kinds that do not return the object.
        self.ok("POST", NP % "default", {"kind": "NetworkPolicy", "apiVersion": "networking.k8s.io/v1",
                                         "metadata": {"name": "np"}, "spec": {}})
        d = self.ok("DELETE", NP % "default" + "/np")
        self.assertEqual((d["kind"], d["status"], d["details"]["name"]), ("Status", "Success", "np"))

    def test_list_shapes(self):
        self.ok("POST", PODS % "default", pod("a"))
        lst = self.ok("GET", "/api/v1/pods")
        self.assertEqual((lst["kind"], lst["apiVersion"]), ("PodList", "v1"))
        self.assertEqual(lst["metadata"]["resourceVersion"], str(self.rv()))
        self.assertNotIn("kind", lst["items"][0])  # list items carry no kind/apiVersion
        self.assertEqual(self.ok("GET", "/apis/networking.k8s.io/v1/networkpolicies")["kind"], "NetworkPolicyList")
        ns = self.ok("GET", "/api/v1/namespaces")
        self.assertEqual(sorted(i["metadata"]["name"] for i in ns["items"]),
                         ["default", "kube-node-lease", "kube-public", "kube-system"])
        self.assertEqual(self.ok("GET", "/api/v1/namespaces/kube-system/pods")["items"], [])

    def test_defaulting_and_raw_objects(self):
        def np(name, spec):
            return self.ok("POST", NP % "default", {"kind": "NetworkPolicy", "apiVersion": "networking.k8s.io/v1",
                                                    "metadata": {"name": name}, "spec": spec})["spec"]
        s = np("a", {"podSelector": {}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 80}]}]})
        self.assertEqual(s["policyTypes"], ["Ingress", "Egress"])
        self.assertEqual(s["egress"][0]["ports"], [{"port": 53, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}])
        s = np("b", {"podSelector": {"matchLabels": {}}, "ingress": [], "egress": []})
        self.assertEqual(s, {"podSelector": {}, "policyTypes": ["Ingress"]})
        s = np("c", {"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{"from": [{"podSelector": {}}]}]})
        self.assertEqual(s["policyTypes"], ["Egress"])
        self.assertEqual(np("d", {"egress": [{}]})["policyTypes"], ["Ingress", "Egress"])
        code, out = self.req("POST", NP % "default", {"kind": "NetworkPolicy", "metadata": {"name": "bad"}, "spec": {
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}]}})
        self.assertEqual((code, out["reason"]), (422, "Invalid"), out)
        ns = self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
        self.assertEqual(ns["metadata"]["labels"], {"kubernetes.io/metadata.name": "team"})
        self.assertEqual(ns["status"], {"phase": "Active"})
        p = self.ok("POST", PODS % "team", pod("web", ports=[{"name": "http", "containerPort": 80}]))
        self.assertEqual(p["spec"]["containers"][0]["ports"], [{"name": "http", "containerPort": 80, "protocol": "TCP"}])
        self.assertEqual(p["spec"]["restartPolicy"], "Always")
        # Defaulting off: stored as sent.
        self.ok("POST", "/_test/defaults", {"enabled": False})
        s = np("raw", {"podSelector": {}, "egress": [{"ports": [{"port": 80}]}], "ingress": []})
        self.assertEqual(s, {"podSelector": {}, "egress": [{"ports": [{"port": 80}]}], "ingress": []})
        p = self.ok("POST", PODS % "team", pod("raw", ports=[{"containerPort": 80}]))
        self.assertEqual(p["spec"]["containers"][0]["ports"], [{"containerPort": 80}])
        ns = self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "bare"}})
        self.assertNotIn("labels", ns["metadata"])

    def test_label_and_field_selectors(self):
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "o"}})
        self.ok("POST", PODS % "default", pod("a", {"app": "web", "tier": "1"}, node="n1"))
        self.ok("POST", PODS % "default", pod("b", {"app": "db", "tier": "2"}, node="n2"))
        self.ok("POST", PODS % "default", pod("c", {"app": "web"}, node="n2"))
        self.ok("POST", PODS % "o", pod("d", {"env": "x"}, node="n1"))

        def names(q):
            code, out = self.req("GET", "/api/v1/pods?" + urllib.parse.urlencode(q))
            self.assertEqual(code, 200, out)
            return sorted(i["metadata"]["name"] for i in out["items"])
        self.assertEqual(names({"labelSelector": "app=web"}), ["a", "c"])
        self.assertEqual(names({"labelSelector": "app==web,tier=1"}), ["a"])
        self.assertEqual(names({"labelSelector": "app!=web"}), ["b", "d"])
        self.assertEqual(names({"labelSelector": "app in (web, db)"}), ["a", "b", "c"])
        self.assertEqual(names({"labelSelector": "app notin (web)"}), ["b", "d"])
        self.assertEqual(names({"labelSelector": "tier"}), ["a", "b"])
        self.assertEqual(names({"labelSelector": "!tier"}), ["c", "d"])
        self.assertEqual(names({"labelSelector": "tier>1"}), ["b"])
        self.assertEqual(names({"fieldSelector": "spec.nodeName=n2"}), ["b", "c"])
        self.assertEqual(names({"fieldSelector": "spec.nodeName==n1,metadata.namespace!=o"}), ["a"])
        self.assertEqual(names({"fieldSelector": "metadata.name=d", "labelSelector": "env=x"}), ["d"])
        self.assertEqual(names({"fieldSelector": "status.phase=Pending"}), ["a", "b", "c", "d"])
        self.assertEqual(self.req("GET", "/api/v1/pods?fieldSelector=spec.bogus%3D1")[0], 400)
        self.assertEqual(self.req("GET", "/api/v1/pods?labelSelector=a%20in%20b")[0], 400)
        ns = self.ok("GET", "/api/v1/namespaces?fieldSelector=metadata.name%3Do")
        self.assertEqual([i["metadata"]["name"] for i in ns["items"]], ["o"])
        self.assertEqual(self.req("GET", "/api/v1/nodes?fieldSelector=metadata.namespace%3Dx")[0], 400)

    def test_short_pages_and_consistent_snapshot(self):
        for i in range(20):
            self.ok("POST", PODS % "default", pod("p%02d" % i, {"even": str(i % 2 == 0).lower()}))
        seen, cont, pages, deleted = [], "", 0, False
        while True:
            out = self.ok("GET", PODS % "default" + "?limit=10" + ("&continue=" + cont if cont else ""))
            pages += 1
            self.assertLessEqual(len(out["items"]), 7)  # fewer than limit, yet more to come
            seen += [i["metadata"]["name"] for i in out["items"]]
            if not deleted:  # a later item deleted mid-list still shows: one snapshot
                self.ok("DELETE", PODS % "default" + "/p19")
                deleted = True
            cont = out["metadata"].get("continue", "")
            if not cont:
                break
            self.assertIn("remainingItemCount", out["metadata"])
        self.assertEqual(seen, ["p%02d" % i for i in range(20)])
        self.assertGreaterEqual(pages, 3)
        # With a selector a page may be short, even empty, and still continue.
        seen, cont, sizes = [], "", []
        while True:
            out = self.ok("GET", PODS % "default" + "?limit=3&labelSelector=even%3Dtrue" +
                          ("&continue=" + cont if cont else ""))
            sizes.append(len(out["items"]))
            seen += [i["metadata"]["name"] for i in out["items"]]
            cont = out["metadata"].get("continue", "")
            if not cont:
                break
        self.assertEqual(seen, ["p%02d" % i for i in range(0, 19, 2)])
        self.assertTrue(any(s < 3 for s in sizes[:-1]), sizes)
        # resourceVersion=0 is served from the cache: limit ignored.
        out = self.ok("GET", PODS % "default" + "?limit=2&resourceVersion=0")
        self.assertEqual((len(out["items"]), out["metadata"].get("continue")), (19, None))

    def test_continue_token_expires(self):
        for i in range(10):
            self.ok("POST", PODS % "default", pod("p%d" % i))
        out = self.ok("GET", PODS % "default" + "?limit=4")
        self.ok("POST", "/_test/expire")
        code, st = self.req("GET", PODS % "default" + "?limit=4&continue=" + out["metadata"]["continue"])
        self.assertEqual((code, st["reason"]), (410, "Expired"))
        self.assertIn("continue", st["metadata"])
        self.assertEqual(self.req("GET", PODS % "default" + "?continue=garbage")[0], 400)
        # expire_after_pages: compaction right after the next page with a token.
        self.ok("POST", "/_test/pages", {"cap": 3, "expire_after_pages": 1})
        out = self.ok("GET", PODS % "default" + "?limit=100")
        self.assertEqual(len(out["items"]), 3)
        code, _ = self.req("GET", PODS % "default" + "?limit=100&continue=" + out["metadata"]["continue"])
        self.assertEqual(code, 410)
        out = self.ok("GET", PODS % "default" + "?limit=100")
        out = self.ok("GET", PODS % "default" + "?limit=100&continue=" + out["metadata"]["continue"])
        self.assertEqual(len(out["items"]), 3)
        # ... of one resource only.
        self.ok("POST", "/_test/pages", {"cap": 2, "expire_after_pages": 1, "resource": "pods"})
        ns = self.ok("GET", "/api/v1/namespaces?limit=100")
        self.ok("GET", "/api/v1/namespaces?limit=100&continue=" + ns["metadata"]["continue"])
        out = self.ok("GET", PODS % "default" + "?limit=100")
        self.assertEqual(self.req("GET", PODS % "default" + "?continue=" + out["metadata"]["continue"])[0], 410)

    def test_watch_from_rv_with_selector_sends_deleted_and_added(self):
        a = self.ok("POST", PODS % "default", pod("a", {"app": "web"}))
        rv = a["metadata"]["resourceVersion"]
        w = self.watch(PODS % "default" + "?watch=1&labelSelector=app%3Dweb&resourceVersion=" + rv)
        self.assertEqual(w.status, 200)
        self.ok("PATCH", PODS % "default" + "/a", {"metadata": {"labels": {"app": "db"}}},
                "application/merge-patch+json")
        ev = w.next()
        self.assertEqual(ev["type"], "DELETED")
        self.assertEqual(ev["object"]["metadata"]["labels"], {"app": "web"})  # the previous state...
        cur = self.ok("GET", PODS % "default" + "/a")
        self.assertEqual(ev["object"]["metadata"]["resourceVersion"], cur["metadata"]["resourceVersion"])  # ...at the event's RV
        self.ok("PATCH", PODS % "default" + "/a", [{"op": "replace", "path": "/metadata/labels/app", "value": "web"}],
                "application/json-patch+json")
        self.assertEqual(w.next()["type"], "ADDED")
        self.ok("PATCH", PODS % "default" + "/a", {"metadata": {"annotations": {"x": "1"}}},
                "application/merge-patch+json")
        self.assertEqual(w.next()["type"], "MODIFIED")
        self.ok("POST", PODS % "default", pod("other", {"app": "db"}))  # never seen
        self.ok("DELETE", PODS % "default" + "/a")
        ev = w.next()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"], ev["object"]["kind"]), ("DELETED", "a", "Pod"))
        # Field selectors too: spec.nodeName (set by a binding).
        self.ok("POST", PODS % "default", pod("b"))
        w2 = self.watch("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1")
        self.ok("POST", PODS % "default" + "/b/binding", {"target": {"name": "n1"}})
        ev = w2.next()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "b"))
        code, _ = self.req("PATCH", PODS % "default" + "/b", {}, "application/strategic-merge-patch+json")
        self.assertEqual(code, 415)

    def test_watch_without_rv_starts_with_current_state(self):
        self.ok("POST", PODS % "default", pod("a"))
        self.ok("POST", PODS % "default", pod("b"))
        w = self.watch(PODS % "default" + "?watch=true")
        evs = w.events(2)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "a"), ("ADDED", "b")])
        self.assertEqual(evs[0]["object"]["kind"], "Pod")
        self.ok("POST", PODS % "default", pod("c"))
        self.assertEqual(w.next()["object"]["metadata"]["name"], "c")
        w0 = self.watch(PODS % "default" + "?watch=1&resourceVersion=0")
        self.assertEqual(len(w0.events(3)), 3)
        # Streaming list: initial ADDEDs, then the initial-events-end bookmark.
        ws = self.watch(PODS % "default" + "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                        "&resourceVersionMatch=NotOlderThan")
        evs = ws.events(4)
        self.assertEqual([e["type"] for e in evs], ["ADDED"] * 3 + ["BOOKMARK"])
        self.assertEqual(evs[3]["object"]["metadata"]["annotations"], {"k8s.io/initial-events-end": "true"})

    def test_restart_keeps_objects_and_resource_versions(self):
        state = tempfile.mktemp(prefix="fakeapi-state-")
        self.addCleanup(lambda: os.path.exists(state) and os.unlink(state))

        def start():
            proc = subprocess.Popen(
                [sys.executable, SERVER, "--listen", "127.0.0.1:%d" % self.port, "--cert", CERTS + "/server.crt",
                 "--key", CERTS + "/server.key", "--token", TOKEN, "--state", state], stdout=subprocess.PIPE,
                text=True)
            self.assertTrue(proc.stdout.readline().startswith("listening on"))
            return proc

        # The setUp server gives way to one with a state file, on the same port.
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc = start()
        p = self.ok("POST", PODS % "default", pod("a", {"app": "x"}))
        before = self.rv()
        self.proc.terminate()  # SIGTERM: the state is written, the exit is clean
        self.assertEqual(self.proc.wait(timeout=10), 0)
        self.proc.stdout.close()
        with self.assertRaises(OSError):  # down: refused
            self.req("GET", "/healthz")
        self.proc = start()
        got = self.ok("GET", PODS % "default" + "/a")
        self.assertEqual((got["metadata"]["uid"], got["metadata"]["resourceVersion"]),
                         (p["metadata"]["uid"], p["metadata"]["resourceVersion"]))
        self.assertEqual(self.rv(), before)
        # A new watch cache: a resume from before the restart is 410, from now it is served.
        ev = self.watch(PODS % "default" + "?watch=1&resourceVersion=" + str(before - 1)).next()
        self.assertEqual((ev["type"], ev["object"]["code"]), ("ERROR", 410))
        w = self.watch(PODS % "default" + "?watch=1&resourceVersion=" + str(before))
        b = self.ok("POST", PODS % "default", pod("b"))
        self.assertGreater(int(b["metadata"]["resourceVersion"]), before)
        ev = w.next()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "b"))

    def test_watch_410_bookmark_partial_timeout(self):
        self.ok("POST", PODS % "default", pod("a"))
        w = self.watch(PODS % "default" + "?watch=1&resourceVersion=1")
        ev = w.next()
        self.assertEqual((ev["type"], ev["object"]["code"], ev["object"]["reason"]), ("ERROR", 410, "Expired"))
        self.assertIsNone(w.next())  # the stream ends cleanly
        rv = str(self.rv())
        wb = self.watch(PODS % "default" + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv)
        wn = self.watch(PODS % "default" + "?watch=1&resourceVersion=" + rv)
        self.ok("POST", "/_test/bookmark")
        self.ok("POST", PODS % "default", pod("b"))
        ev = wb.next()
        self.assertEqual((ev["type"], ev["object"]["kind"], ev["object"]["metadata"]["resourceVersion"]),
                         ("BOOKMARK", "Pod", rv))
        self.assertEqual(wb.next()["type"], "ADDED")
        self.assertEqual(wn.next()["type"], "ADDED")  # no bookmark without allowWatchBookmarks
        # Compaction: open watches get ERROR 410; the old RV is refused, the current one served.
        self.ok("POST", "/_test/expire")
        self.assertEqual(wb.next()["object"]["code"], 410)
        self.assertEqual(self.watch(PODS % "default" + "?watch=1&resourceVersion=" + rv).next()["type"], "ERROR")
        now = str(self.rv())
        wc = self.watch(PODS % "default" + "?watch=1&resourceVersion=" + now)
        self.ok("POST", "/_test/partial")
        item = wc.next()
        self.assertEqual(item[0], "partial")  # half a line, then the connection is cut
        end = wc.next()
        self.assertTrue(end is None or isinstance(end, Exception), end)
        wt = self.watch(PODS % "default" + "?watch=1&timeoutSeconds=1&resourceVersion=" + now)
        t0 = time.monotonic()
        self.assertIsNone(wt.next(timeout=5))  # ends cleanly (terminating chunk)
        self.assertLess(time.monotonic() - t0, 3)

    def test_namespace_delete_cascades_and_graceful_pod_delete(self):
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
        self.ok("POST", PODS % "gone", pod("a"))
        self.ok("POST", NP % "gone", {"metadata": {"name": "np"}, "spec": {}})
        rv = str(self.rv())
        wp = self.watch("/api/v1/pods?watch=1&resourceVersion=" + rv)
        wn = self.watch("/api/v1/namespaces?watch=1&resourceVersion=" + rv)
        d = self.ok("DELETE", "/api/v1/namespaces/gone")
        self.assertEqual(d["status"]["phase"], "Terminating")
        self.assertEqual(wp.next()["type"], "DELETED")
        self.assertEqual([e["type"] for e in wn.events(2)], ["MODIFIED", "DELETED"])
        self.assertEqual(self.ok("GET", NP % "gone")["items"], [])
        self.assertEqual(self.req("POST", PODS % "gone", pod("b"))[0], 404)
        # Graceful: deletionTimestamp first (MODIFIED), gone after the grace period.
        self.ok("POST", PODS % "default", pod("g"))
        out = self.ok("DELETE", PODS % "default" + "/g?gracePeriodSeconds=1")
        self.assertIn("deletionTimestamp", out["metadata"])
        self.assertEqual([e["type"] for e in wp.events(3)], ["ADDED", "MODIFIED", "DELETED"])
        self.assertEqual(self.req("GET", PODS % "default" + "/g")[0], 404)

    def test_services_and_endpointslices(self):
        svc = "/api/v1/namespaces/default/services"
        eps = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        rv = str(self.rv())
        ws = self.watch("/api/v1/services?watch=1&resourceVersion=" + rv)
        we = self.watch("/apis/discovery.k8s.io/v1/endpointslices?watch=1&resourceVersion=" + rv)
        s = self.ok("POST", svc, {"metadata": {"name": "web"}, "spec": {
            "type": "NodePort", "sessionAffinity": "ClientIP", "ports": [{"port": 80, "targetPort": 8080}]}})
        spec = s["spec"]
        self.assertEqual((spec["clusterIPs"], spec["ipFamilies"], spec["ipFamilyPolicy"]),
                         ([spec["clusterIP"]], ["IPv4"], "SingleStack"))
        self.assertEqual(spec["sessionAffinityConfig"], {"clientIP": {"timeoutSeconds": 10800}})
        self.assertEqual((spec["internalTrafficPolicy"], spec["externalTrafficPolicy"]), ("Cluster", "Cluster"))
        self.assertEqual(spec["ports"][0]["protocol"], "TCP")
        self.assertTrue(30000 <= spec["ports"][0]["nodePort"] <= 32767)
        self.assertEqual(self.req("POST", svc, {"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 0}]}})[0], 422)
        self.assertNotIn("healthCheckNodePort", spec)
        # A LoadBalancer with externalTrafficPolicy Local gets a healthCheckNodePort from the NodePort range;
        # any other Service may not have one.
        lb = self.ok("POST", svc, {"metadata": {"name": "lb"}, "spec": {
            "type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}})["spec"]
        self.assertTrue(30000 <= lb["healthCheckNodePort"] <= 32767)
        self.assertNotEqual(lb["healthCheckNodePort"], lb["ports"][0]["nodePort"])
        code, body = self.req("POST", svc, {"metadata": {"name": "bad"}, "spec": {
            "type": "NodePort", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30999,
            "ports": [{"port": 80}]}})
        self.assertEqual(code, 422)
        self.assertIn("spec.healthCheckNodePort: Invalid value: 30999: may only be set when `type` is 'LoadBalancer' "
                      "and `externalTrafficPolicy` is 'Local'", json.dumps(body))
        self.ok("DELETE", svc + "/lb")
        slice_ = {"metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
                  "addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["10.0.0.1"]}]}
        e = self.ok("POST", eps, slice_)
        self.assertEqual((e["kind"], e["ports"][0]["protocol"]), ("EndpointSlice", "TCP"))
        self.assertEqual(e["metadata"]["generation"], 1)  # the real server's, as the fidelity test found
        self.assertEqual(self.req("POST", eps, dict(slice_, metadata={"name": "x"}, addressType="IPX"))[0], 422)
        self.ok("PATCH", eps + "/web-1", {"endpoints": [{"addresses": ["10.0.0.2"]}]}, "application/merge-patch+json")
        self.assertEqual([x["type"] for x in ws.events(1)], ["ADDED"])
        self.assertEqual([x["type"] for x in we.events(2)], ["ADDED", "MODIFIED"])
        lst = self.ok("GET", "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb")
        self.assertEqual([i["endpoints"][0]["addresses"] for i in lst["items"]], [["10.0.0.2"]])
        self.assertEqual(lst["items"][0]["metadata"]["generation"], 2)  # endpoints changed
        self.ok("PATCH", eps + "/web-1", {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json")
        self.assertEqual(self.ok("GET", eps + "/web-1")["metadata"]["generation"], 2)  # a label is no change of it
        self.assertEqual(len(self.ok("GET", "/api/v1/services?fieldSelector=spec.type%3DNodePort")["items"]), 1)
        # A namespace's deletion takes its Services and slices.
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
        self.ok("POST", "/api/v1/namespaces/gone/services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}})
        self.ok("DELETE", "/api/v1/namespaces/gone")
        self.assertEqual(self.ok("GET", "/api/v1/namespaces/gone/services")["items"], [])

    def test_test_controls_nodes_and_log(self):
        n = self.ok("POST", "/_test/nodes", {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"},
                                              "spec": {"podCIDR": "10.1.0.0/24"}})
        self.assertEqual(n["spec"], {"podCIDR": "10.1.0.0/24"})  # as sent
        self.ok("PATCH", "/api/v1/nodes/n1", {"metadata": {"annotations": {"a": "b"}}}, "application/merge-patch+json")
        node = self.ok("GET", "/api/v1/nodes/n1")
        self.assertEqual(node["metadata"]["annotations"], {"a": "b"})
        self.assertEqual(node["spec"]["podCIDRs"], ["10.1.0.0/24"])  # the server's conversion, on update
        w = self.watch("/api/v1/nodes?watch=1&resourceVersion=" + node["metadata"]["resourceVersion"])
        self.ok("DELETE", "/_test/nodes/n1?silent=1")
        self.ok("POST", "/_test/nodes", {"metadata": {"name": "n2"}})
        self.assertEqual(w.next()["object"]["metadata"]["name"], "n2")  # n1's deletion was never sent
        log = self.ok("GET", "/_test/log")
        self.assertIn("PATCH /api/v1/nodes/n1 application/merge-patch+json -> 200", log)
        self.assertTrue(any(l.startswith("GET /api/v1/nodes?watch=1") and l.endswith("-> 200") for l in log))

    def test_cluster_network_policies_follow_their_crd(self):
        cnp_path = "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies"
        cnp = {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "deny-meta"},
               "spec": {"tier": "Admin", "priority": 0, "subject": {"namespaces": {}},
                        "egress": [{"action": "Deny", "to": [{"networks": ["169.254.169.254/32"]}]}]}}
        # No CRD: the path is unknown, as on a real server.
        code, body = self.req("GET", cnp_path)
        self.assertEqual(code, 404)  # in plain text, as the real server's mux answers (fidelity_test)
        groups = [g["name"] for g in self.ok("GET", "/apis")["groups"]]
        self.assertNotIn("policy.networking.k8s.io", groups)
        self.ok("POST", "/_test/crds", {"install": ["clusternetworkpolicies"]})
        groups = [g["name"] for g in self.ok("GET", "/apis")["groups"]]
        self.assertIn("policy.networking.k8s.io", groups)
        lst = self.ok("GET", cnp_path)
        self.assertEqual((lst["kind"], lst["apiVersion"], lst["items"], lst["metadata"]["continue"]),
                         ("ClusterNetworkPolicyList", "policy.networking.k8s.io/v1alpha2", [], ""))
        w = self.watch(cnp_path + "?watch=1&resourceVersion=" + lst["metadata"]["resourceVersion"])
        made = self.ok("POST", cnp_path, cnp)
        self.assertEqual(made["metadata"]["generation"], 1)
        self.assertNotIn("namespace", made["metadata"])
        # The schema's top level is checked.
        bad = json.loads(json.dumps(cnp))
        bad["metadata"]["name"], bad["spec"]["tier"], bad["spec"]["priority"] = "bad", "Middle", 1001
        code, body = self.req("POST", cnp_path, bad)
        self.assertEqual(code, 422)
        self.assertIn('spec.tier: Unsupported value: "Middle"', body["message"])
        self.assertIn("less than or equal to 1000", body["message"])
        # status: a merge patch on /status leaves spec and generation alone; a spec change bumps generation.
        cond = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "m", "observedGeneration": 1,
                "lastTransitionTime": "2026-11-27T06:00:00Z"}
        st = self.ok("PATCH", cnp_path + "/deny-meta/status", {"status": {"conditions": [cond]}},
                     "application/merge-patch+json")
        self.assertEqual(st["status"]["conditions"], [cond])
        self.assertEqual(st["metadata"]["generation"], 1)
        up = self.ok("PATCH", cnp_path + "/deny-meta", {"spec": {"priority": 5}}, "application/merge-patch+json")
        self.assertEqual(up["metadata"]["generation"], 2)
        self.assertEqual(up["status"]["conditions"], [cond])
        self.assertEqual([e["type"] for e in w.events(3)], ["ADDED", "MODIFIED", "MODIFIED"])
        self.assertEqual(self.ok("GET", cnp_path)["items"][0]["kind"], "ClusterNetworkPolicy")  # as stored
        # A strategic merge patch is refused, as for every CRD.
        self.assertEqual(self.req("PATCH", cnp_path + "/deny-meta", {"spec": {}},
                                  "application/strategic-merge-patch+json")[0], 415)
        self.ok("POST", "/_test/crds", {"remove": ["clusternetworkpolicies"]})
        self.assertEqual(self.req("GET", cnp_path)[0], 404)


if __name__ == "__main__":
    unittest.main()
