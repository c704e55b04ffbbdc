#!/usr/bin/env python3
"""A stand-in for kube-apiserver, faithful wherever a client can tell.

Python 3 standard library only. Serves HTTPS (--cert/--key; plain HTTP without
them) with bearer-token auth, for these resources, with the real paths and
JSON shapes:

  nodes            /api/v1/nodes[/NAME[/status]]                       cluster-scoped
  namespaces       /api/v1/namespaces[/NAME[/status]]                  cluster-scoped
  pods             /api/v1/namespaces/NS/pods[/NAME[/status|/binding]], /api/v1/pods
  networkpolicies  /apis/networking.k8s.io/v1/namespaces/NS/networkpolicies[/NAME],
                   /apis/networking.k8s.io/v1/networkpolicies
  services         /api/v1/namespaces/NS/services[/NAME[/status]], /api/v1/services
  endpointslices   /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices[/NAME],
                   /apis/discovery.k8s.io/v1/endpointslices

Verbs: list, watch (?watch=1), get, create (POST to the collection),
replace (PUT), patch (merge-patch+json, json-patch+json), delete,
deletecollection. What the real server does that a client can see:
  * one global resourceVersion bumped by every write; uid, creationTimestamp,
    generation (NetworkPolicy); no-op writes change nothing and send no event;
    PUT with a stale metadata.resourceVersion -> 409 Conflict.
  * strategies: a Pod's status is reset on create and only writable through
    /status (as are Node and Namespace status on update); a Pod's spec is
    immutable but for images, tolerations and activeDeadlineSeconds; a
    scheduler binds with POST .../pods/NAME/binding. Creating in a missing
    namespace -> 404; deleting a namespace deletes its pods and policies
    (Terminating MODIFIED, their DELETEDs, then its DELETED).
  * defaulting: NetworkPolicy spec.policyTypes (when empty: Ingress, plus
    Egress when spec.egress is non-empty), ports' protocol TCP, podSelector
    {}; empty lists (omitempty) dropped; Namespace label
    kubernetes.io/metadata.name; Pod restartPolicy, dnsPolicy, schedulerName,
    serviceAccountName, container ports' protocol TCP (hostPort=containerPort
    with hostNetwork), ...; Node podCIDR<->podCIDRs and Pod podIP<->podIPs.
    POST /_test/defaults {"enabled": false} stores objects as sent instead.
  * labelSelector (=, ==, !=, in, notin, exists, !exists, >, <) and
    fieldSelector (=, ==, != on metadata.name, metadata.namespace and each
    resource's own fields: spec.nodeName, status.phase, ...) on list and
    watch; an unsupported field -> 400.
  * list pagination: limit/continue, a consistent snapshot across pages;
    pages are capped at --page-cap (default 7) items and selectors filter
    after the page is cut, so a page may be short or even empty while a
    continue token says there is more; tokens older than the compacted
    revision -> 410 Expired. resourceVersion=0 lists ignore limit (served
    from the watch cache).
  * watches: chunked, one JSON event per line; resourceVersion unset or "0"
    starts with ADDED for every current object; an RV older than retained
    history -> ERROR 410 event; under a selector an object that stops
    matching is sent as DELETED (its previous state at the event's RV) and
    one that starts matching as ADDED; BOOKMARKs with allowWatchBookmarks;
    sendInitialEvents=true ends the initial ADDEDs with a BOOKMARK annotated
    k8s.io/initial-events-end; timeoutSeconds ends the stream cleanly.
  * a DELETE with ?gracePeriodSeconds=N>0 on a Pod sets deletionTimestamp
    (MODIFIED) and removes it N seconds later (as its kubelet would);
    otherwise deletion is immediate.
Also /version, /healthz, /readyz, /livez (no auth) and discovery (/api, ...).

Identities: the --token is an admin (system:masters); serviceaccounts have the
token subresource (POST .../serviceaccounts/NAME/token, a TokenRequest; bound
to a Pod, the token's user carries the pod's and its node's names in extra, as
kube-apiserver puts them), and every token so made is accepted too (no RBAC on
the stand-in's own API). POST /apis/authentication.k8s.io/v1/tokenreviews
answers for those tokens; /apis/authorization.k8s.io/v1/subjectaccessreviews
evaluates RBAC over the stored clusterroles and clusterrolebindings
(/apis/rbac.authorization.k8s.io/v1; resource attributes, subjects User, Group
and ServiceAccount).

Test controls under /_test/ (no auth):
  POST   /_test/nodes               create or replace a Node as sent (ADDED/MODIFIED)
  DELETE /_test/nodes/NAME[?silent=1]   delete a Node (silent: no watch event)
  POST   /_test/objects             create or replace any object as sent (no strategy)
  POST   /_test/defaults            {"enabled": bool}: defaulting on create/update
  POST   /_test/pages               {"cap": N, "expire_after_pages": K, "resource": R}:
                                    page cap (0 = none); compact right after the
                                    next K pages (of resource R, e.g. "nodes", if
                                    given) that carry a continue token
  POST   /_test/token               {"token": "..."}: the only accepted admin token from now on
  GET    /_test/writes              every write request: {"method", "path", "code", "user", "node"},
                                    node: the node-name in the caller's token ("" for none)
  POST   /_test/bookmark            a BOOKMARK at the current RV to every watch that allows them
  POST   /_test/expire[?watches=0]  compact: history forgotten, older continue tokens
                                    and watch RVs -> 410; open watches get ERROR 410
                                    (unless watches=0)
  POST   /_test/partial             every watch gets half an event line, then is cut
  GET    /_test/log                 requests so far: "METHOD PATH[ CONTENT-TYPE] -> CODE"
  DELETE /_test/log                 clear it

Restarts (--state FILE): SIGTERM writes every object, the resourceVersion
and the settings to FILE and exits; a server started with a FILE that exists
loads them, as a real API server comes back with etcd's data and a new watch
cache: resourceVersions go on from where they were, the event history is
empty, so a watch or continue token older than the current RV gets 410 and
its client re-lists. While it is down, connections are refused.
"""
import argparse
import base64
import copy
import ipaddress
import json
import os
import queue
import random
import re
import signal
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# ---------------------------------------------------------------- resources

class Resource:
    def __init__(self, plural, kind, group, namespaced, fields, status, version="v1", crd=False, top=()):
        self.plural, self.kind, self.group = plural, kind, group
        self.top = set(top)           # top-level fields besides metadata/spec/status (RBAC's rules, ...)
        self.namespaced = namespaced
        self.fields = fields          # selectable fields besides metadata.*
        self.status = status          # has a /status subresource
        self.version = version
        self.crd = crd                # served only while its CRD is installed (/_test/crds)
        self.api_version = group + "/" + version if group else "v1"
        self.prefix = "/apis/%s/%s" % (group, version) if group else "/api/v1"


RESOURCES = {r.plural: r for r in [
    Resource("nodes", "Node", "", False, {"spec.unschedulable"}, True),
    Resource("namespaces", "Namespace", "", False, {"status.phase"}, True),
    Resource("pods", "Pod", "", True, {
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}, True),
    Resource("networkpolicies", "NetworkPolicy", "networking.k8s.io", True, set(), False),
    # The Service proxy's (docs/services.md). Services select on spec.clusterIP and spec.type as the real
    # server's; EndpointSlices have no spec (addressType, endpoints, ports are top-level) and no status.
    Resource("services", "Service", "", True, {"spec.clusterIP", "spec.type"}, True),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io", True, set(), False,
             top=("addressType", "endpoints", "ports")),
    # sigs.k8s.io/network-policy-api v0.3.0's CRD (deploy/crd/clusternetworkpolicies.yaml): cluster-scoped,
    # a status subresource; the stand-in serves its v1alpha2 only (the real CRD serves v1beta1 too).
    Resource("clusternetworkpolicies", "ClusterNetworkPolicy", "policy.networking.k8s.io", False, set(), True,
             version="v1alpha2", crd=True),
    # Identities: a ServiceAccount's token comes from its token subresource (TokenRequest), and
    # RBAC's cluster-wide objects decide SubjectAccessReviews (the stand-in enforces no RBAC on
    # its own API: every accepted token may do everything).
    Resource("serviceaccounts", "ServiceAccount", "", True, set(), False,
             top=("secrets", "imagePullSecrets", "automountServiceAccountToken")),
    Resource("clusterroles", "ClusterRole", "rbac.authorization.k8s.io", False, set(), False,
             top=("rules", "aggregationRule")),
    Resource("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io", False, set(), False,
             top=("roleRef", "subjects")),
]}
# Resources whose generation counts spec changes (the built-in NetworkPolicy, and every CRD), and
# EndpointSlice, whose generation counts changes of its addressType, endpoints and ports (it has no
# spec: the real server's endpointslice strategy).
GENERATION = {"networkpolicies", "clusternetworkpolicies", "endpointslices"}


def generation_fields(res, obj):
    """What a change of bumps the object's generation."""
    if res.plural == "endpointslices":
        return (obj.get("addressType"), obj.get("endpoints"), obj.get("ports"))
    return obj.get("spec")
KINDS = {r.kind: r for r in RESOURCES.values()}
SYSTEM_NAMESPACES = ["default", "kube-node-lease", "kube-public", "kube-system"]


class ApiError(Exception):
    def __init__(self, code, reason, message, name=None, res=None, meta=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = None
        if name is not None or res is not None:
            self.details = {"name": name or "", "kind": res.plural if res else ""}
            if res is not None and res.group:
                self.details["group"] = res.group
        self.meta = meta or {}

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": self.meta, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            s["details"] = self.details
        return s


def not_found(res, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(res), name), name, res)


CAUSE_REASONS = [("Unsupported value", "FieldValueNotSupported"), ("Invalid value", "FieldValueInvalid"),
                 ("Required value", "FieldValueRequired"), ("Forbidden", "FieldValueForbidden"),
                 ("Duplicate value", "FieldValueDuplicate"), ("Too long", "FieldValueTooLong"),
                 ("Not found", "FieldValueNotFound")]


# The zero-valued spec and status a real BOOKMARK's object carries, per resource
# (seen from kube-apiserver v1.36.3 by tests/k8s/fidelity_test.py).
BOOKMARK_BODIES = {
    "nodes": {"spec": {}, "status": {
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                     "operatingSystem": "", "architecture": ""}}},
    "namespaces": {"spec": {}, "status": {}},
    "pods": {"spec": {"containers": None}, "status": {}},
    "networkpolicies": {"spec": {"podSelector": {}}},
    # Not yet seen from a real server (the fidelity test does not cover them): as the Go types encode their zero
    # values (ServiceStatus.loadBalancer is a struct; EndpointSlice's addressType and endpoints have no omitempty).
    "services": {"spec": {}, "status": {"loadBalancer": {}}},
    "endpointslices": {"addressType": "", "endpoints": None},
}


def invalid(res, name, errors):
    """422 Invalid as the real server words it: the group-qualified kind in the
    message and one details.causes entry per "field: message" error."""
    kind = res.kind + ("." + res.group if res.group else "")
    e = ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, ", ".join(errors)), name, res)
    e.details["kind"] = res.kind
    causes = []
    for err in errors:
        field, _, msg = err.partition(": ")
        reason = next((r for prefix, r in CAUSE_REASONS if msg.startswith(prefix)), "FieldValueInvalid")
        causes.append({"reason": reason, "message": msg, "field": field})
    e.details["causes"] = causes
    return e


def qualified(res):
    return res.plural + ("." + res.group if res.group else "")


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------- identities

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
ADMIN = {"username": "weft-test-admin", "groups": ["system:masters", "system:authenticated"]}


def subject_matches(s, user, groups):
    kind = s.get("kind")
    if kind == "User":
        return s.get("name") == user
    if kind == "Group":
        return s.get("name") in groups
    if kind == "ServiceAccount":
        return user == "system:serviceaccount:%s:%s" % (s.get("namespace", ""), s.get("name", ""))
    return False


def describe(s):
    if s.get("kind") == "ServiceAccount":
        return 'ServiceAccount "%s/%s"' % (s.get("name", ""), s.get("namespace", ""))
    return '%s "%s"' % (s.get("kind"), s.get("name", ""))


def rule_allows(rule, ra):
    def has(lst, v):
        return "*" in (lst or []) or v in (lst or [])
    resource = ra.get("resource", "") + ("/" + ra["subresource"] if ra.get("subresource") else "")
    if not has(rule.get("verbs"), ra.get("verb", "")) or not has(rule.get("apiGroups"), ra.get("group", "")):
        return False
    if not (has(rule.get("resources"), resource) or
            (ra.get("subresource") and (rule.get("resources") or []).count(ra.get("resource", "") + "/*"))):
        return False
    names = rule.get("resourceNames") or []
    return not names or ra.get("name", "") in names


# ---------------------------------------------------------------- selectors

NAME_RE = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
KEY_RE = r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?" + NAME_RE
LABEL_KEY = re.compile("^" + KEY_RE + "$")
LABEL_VALUE = re.compile("^(" + NAME_RE + ")?$")


def valid_label_key(k):
    if not LABEL_KEY.match(k):
        return False
    prefix, _, name = k.rpartition("/")
    return len(name) <= 63 and len(prefix) <= 253


def valid_label_value(v):
    return isinstance(v, str) and len(v) <= 63 and bool(LABEL_VALUE.match(v))


def split_top(text, sep=","):
    """Splits on `sep` outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


LABEL_REQ = [
    ("notexists", re.compile(r"^\s*!\s*(\S+?)\s*$")),
    ("set", re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")),
    ("cmp", re.compile(r"^\s*([^\s=!<>]+?)\s*(==|=|!=|>|<)\s*([^\s=!<>]*)\s*$")),
    ("exists", re.compile(r"^\s*([^\s=!<>(),]+)\s*$")),
]


def parse_label_selector(text):
    """A list of predicates over a labels dict (all must hold), as
    k8s.io/apimachinery/pkg/labels.Parse accepts them. ApiError 400 on bad
    syntax."""
    reqs = []
    if not text.strip():
        return reqs
    for part in split_top(text):
        for kind, rx in LABEL_REQ:
            m = rx.match(part)
            if m:
                break
        else:
            raise ApiError(400, "BadRequest", "unable to parse requirement: %r" % part.strip())
        key = m.group(1)
        if not valid_label_key(key):
            raise ApiError(400, "BadRequest", "unable to parse requirement: invalid label key %r" % key)
        if kind == "notexists":
            reqs.append(lambda l, k=key: k not in l)
        elif kind == "exists":
            reqs.append(lambda l, k=key: k in l)
        elif kind == "set":
            vals = {v.strip() for v in m.group(3).split(",")} if m.group(3).strip() else set()
            if not vals or not all(valid_label_value(v) for v in vals):
                raise ApiError(400, "BadRequest", "unable to parse requirement: bad values in %r" % part.strip())
            if m.group(2) == "in":
                reqs.append(lambda l, k=key, vs=vals: k in l and l[k] in vs)
            else:
                reqs.append(lambda l, k=key, vs=vals: k not in l or l[k] not in vs)
        else:
            op, val = m.group(2), m.group(3)
            if op in (">", "<"):
                if not re.match(r"^-?\d+$", val):
                    raise ApiError(400, "BadRequest", "unable to parse requirement: %r is not an integer" % val)
                n = int(val)

                def cmp(l, k=key, n=n, gt=(op == ">")):
                    try:
                        v = int(l[k])
                    except (KeyError, ValueError):
                        return False
                    return v > n if gt else v < n
                reqs.append(cmp)
                continue
            if not valid_label_value(val):
                raise ApiError(400, "BadRequest", "unable to parse requirement: invalid label value %r" % val)
            if op == "!=":
                reqs.append(lambda l, k=key, v=val: l.get(k) != v)
            else:
                reqs.append(lambda l, k=key, v=val: k in l and l[k] == v)
    return reqs


def parse_field_selector(text, res):
    """[(field, equal?, value)] as fields.ParseSelector accepts them, checked
    against the fields `res` supports (400 otherwise)."""
    out = []
    if not text.strip():
        return out
    allowed = {"metadata.name"} | res.fields | ({"metadata.namespace"} if res.namespaced else set())
    for part in re.split(r"(?<!\\),", text):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise ApiError(400, "BadRequest", "invalid selector: %r; can't understand %r" % (text, part))
        field, op, val = m.groups()
        if field not in allowed:
            raise ApiError(400, "BadRequest", 'field label not supported: %s' % field)
        out.append((field, op != "!=", val.replace("\\,", ",").replace("\\=", "=").replace("\\\\", "\\")))
    return out


def field_values(res, obj):
    meta = obj.get("metadata") or {}
    f = {"metadata.name": meta.get("name", "")}
    if res.namespaced:
        f["metadata.namespace"] = meta.get("namespace", "")
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    if res.plural == "pods":
        ips = st.get("podIPs") or []
        f.update({
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.restartPolicy": spec.get("restartPolicy", ""),
            "spec.schedulerName": spec.get("schedulerName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": st.get("phase", ""),
            "status.podIP": ips[0].get("ip", "") if ips else st.get("podIP", ""),
            "status.nominatedNodeName": st.get("nominatedNodeName", ""),
        })
    elif res.plural == "nodes":
        f["spec.unschedulable"] = "true" if spec.get("unschedulable") else "false"
    elif res.plural == "namespaces":
        f["status.phase"] = st.get("phase", "")
    elif res.plural == "services":
        f["spec.clusterIP"] = spec.get("clusterIP", "")
        f["spec.type"] = spec.get("type", "")
    return f


class Filter:
    """Which objects a list or watch sees: namespace, labels, fields."""

    def __init__(self, res, ns, q):
        self.res, self.ns = res, ns
        self.labels = parse_label_selector(q.get("labelSelector", ""))
        self.fields = parse_field_selector(q.get("fieldSelector", ""), res)
        self.has_selector = bool(self.labels or self.fields)

    def matches(self, obj):
        meta = obj.get("metadata") or {}
        if self.ns is not None and meta.get("namespace") != self.ns:
            return False
        labels = meta.get("labels") or {}
        if not all(r(labels) for r in self.labels):
            return False
        if self.fields:
            vals = field_values(self.res, obj)
            return all((vals.get(f) == v) == eq for f, eq, v in self.fields)
        return True


# ---------------------------------------------------------------- defaulting, validation

def prune_empty(d, keys):
    for k in keys:
        if k in d and (d[k] is None or d[k] == [] or d[k] == {}):
            del d[k]


def prune_selector(sel):
    if isinstance(sel, dict):
        prune_empty(sel, ["matchLabels", "matchExpressions"])
        for e in sel.get("matchExpressions") or []:
            if isinstance(e, dict):
                prune_empty(e, ["values"])


def default_object(res, obj):
    """The real server's defaulting (and the omitempty encoding that drops
    empty lists and maps), applied on every create and update."""
    meta = obj["metadata"]
    prune_empty(meta, ["labels", "annotations", "finalizers", "ownerReferences"])
    spec = obj.get("spec")
    if res.plural == "namespaces":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    elif res.plural == "nodes":
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            if spec.get("podCIDR") and not spec.get("podCIDRs"):
                spec["podCIDRs"] = [spec["podCIDR"]]
            elif spec.get("podCIDRs") and not spec.get("podCIDR"):
                spec["podCIDR"] = spec["podCIDRs"][0]
            prune_empty(spec, ["podCIDRs", "taints"])
        # NodeStatus' daemonEndpoints and nodeInfo are structs without
        # omitempty: the real server always sends them, zero-valued.
        st = obj.setdefault("status", {})
        if isinstance(st, dict):
            st.setdefault("daemonEndpoints", {}).setdefault("kubeletEndpoint", {}).setdefault("Port", 0)
            info = st.setdefault("nodeInfo", {})
            for f in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                      "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"):
                info.setdefault(f, "")
    elif res.plural == "pods":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("serviceAccountName", "default")  # ServiceAccount admission
        spec["serviceAccount"] = spec["serviceAccountName"]
        spec.setdefault("priority", 0)                    # Priority admission
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if not isinstance(c, dict):
                continue
            image = c.get("image", "")
            last = image.rsplit("/", 1)[-1]
            untagged = "@" not in last and (":" not in last or last.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if untagged else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for p in c.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
                    if spec.get("hostNetwork") and not p.get("hostPort"):
                        p["hostPort"] = p.get("containerPort")
            prune_empty(c, ["ports", "env", "command", "args", "volumeMounts"])
        prune_empty(spec, ["initContainers", "volumes", "tolerations", "nodeSelector"])
        st = obj.get("status")
        if isinstance(st, dict):
            if st.get("podIP") and not st.get("podIPs"):
                st["podIPs"] = [{"ip": st["podIP"]}]
            elif st.get("podIPs") and not st.get("podIP"):
                st["podIP"] = st["podIPs"][0].get("ip", "")
            if st.get("hostIP") and not st.get("hostIPs"):
                st["hostIPs"] = [{"ip": st["hostIP"]}]
    elif res.plural == "services":
        default_service(obj)
    elif res.plural == "endpointslices":
        for p in obj.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
        for e in obj.get("endpoints") or []:
            if isinstance(e, dict):
                e.setdefault("conditions", {})
    elif res.plural == "networkpolicies":
        spec = obj.setdefault("spec", {})
        if not isinstance(spec.get("podSelector"), dict):
            spec["podSelector"] = {}
        prune_selector(spec["podSelector"])
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for rule in spec.get(direction) or []:
                if not isinstance(rule, dict):
                    continue
                for p in rule.get("ports") or []:
                    if isinstance(p, dict) and p.get("protocol") is None:
                        p["protocol"] = "TCP"
                for peer in rule.get(peers) or []:
                    if isinstance(peer, dict):
                        prune_selector(peer.get("podSelector"))
                        prune_selector(peer.get("namespaceSelector"))
                        if isinstance(peer.get("ipBlock"), dict):
                            prune_empty(peer["ipBlock"], ["except"])
                prune_empty(rule, ["ports", peers])
        prune_empty(spec, ["ingress", "egress", "policyTypes"])
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])


class Allocator:
    """ClusterIPs and NodePorts for Services created without them (called
    with the store's lock held)."""

    def __init__(self):
        self.next_ip, self.next_port = 1, 30000

    def cluster_ip(self):
        ip = "10.96.%d.%d" % (self.next_ip // 256, self.next_ip % 256)
        self.next_ip += 1
        return ip

    def node_port(self):
        self.next_port += 1
        return self.next_port - 1


ALLOCATOR = Allocator()


def default_service(obj):
    """A Service's defaults as the real server's (registry/core/service and
    the v1 defaulter): type ClusterIP, sessionAffinity None (ClientIP gets its
    3-hour timeout), ports' protocol TCP and targetPort = port, the traffic
    policies, a single-stack IPv4 family; clusterIP/clusterIPs copied into
    each other (allocated when absent, from 10.96.0.0/16; the stand-in's
    allocator is sequential, the real one random) and NodePorts allocated for
    NodePort and LoadBalancer types (from 30000), and a healthCheckNodePort
    from the same range for a LoadBalancer with externalTrafficPolicy Local
    (registry/core/service/storage's needsHCNodePort: the real server keeps
    an update's old one when the update omits it; the stand-in allocates
    another)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {}).setdefault("clientIP", {}).setdefault("timeoutSeconds", 10800)
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    if spec["type"] == "ExternalName":
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec.get("clusterIP") and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]
    elif spec.get("clusterIPs") and not spec.get("clusterIP"):
        spec["clusterIP"] = spec["clusterIPs"][0]
    elif not spec.get("clusterIP"):
        ip = ALLOCATOR.cluster_ip()
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
    if spec["clusterIP"] != "None":
        fams = ["IPv6" if ":" in ip else "IPv4" for ip in spec["clusterIPs"]]
        spec.setdefault("ipFamilies", fams)
        spec.setdefault("ipFamilyPolicy", "SingleStack" if len(fams) == 1 else "RequireDualStack")
    else:
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and not p.get("nodePort"):
                p["nodePort"] = ALLOCATOR.node_port()
    if spec["type"] == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local" \
            and not spec.get("healthCheckNodePort"):
        spec["healthCheckNodePort"] = ALLOCATOR.node_port()
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def valid_port_name(n):
    return isinstance(n, str) and 1 <= len(n) <= 15 and bool(SVC_NAME.match(n)) and "--" not in n \
        and bool(re.search(r"[a-z]", n))


def validate_selector(sel, path, errs):
    if sel is None:
        return
    if not isinstance(sel, dict):
        errs.append("%s: Invalid value: must be an object" % path)
        return
    for k, v in (sel.get("matchLabels") or {}).items():
        if not valid_label_key(k) or not valid_label_value(v):
            errs.append("%s.matchLabels: Invalid value: %r" % (path, k))
    for i, e in enumerate(sel.get("matchExpressions") or []):
        op, vals = e.get("operator"), e.get("values") or []
        p = "%s.matchExpressions[%d]" % (path, i)
        if not valid_label_key(e.get("key") or ""):
            errs.append("%s.key: Invalid value: %r" % (p, e.get("key")))
        if op in ("In", "NotIn"):
            if not vals:
                errs.append("%s.values: Required value: must be specified when `operator` is 'In' or 'NotIn'" % p)
        elif op in ("Exists", "DoesNotExist"):
            if vals:
                errs.append("%s.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'" % p)
        else:
            errs.append('%s.operator: Invalid value: "%s": not a valid selector operator' % (p, op))


def validate_np(spec, errs):
    validate_selector(spec.get("podSelector"), "spec.podSelector", errs)
    types = spec.get("policyTypes") or []
    for i, t in enumerate(types):
        if t not in ("Ingress", "Egress"):
            errs.append('spec.policyTypes[%d]: Unsupported value: "%s": supported values: "Ingress", "Egress"' % (i, t))
    if len(types) > 2 or len(set(types)) != len(types):
        errs.append("spec.policyTypes: Invalid value: %s: may not have more than 2 or duplicate policyTypes" % types)
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            base = "spec.%s[%d]" % (direction, i)
            if not isinstance(rule, dict):
                errs.append("%s: Invalid value: must be an object" % base)
                continue
            for j, p in enumerate(rule.get("ports") or []):
                pp = "%s.ports[%d]" % (base, j)
                if p.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
                    errs.append('%s.protocol: Unsupported value: "%s"' % (pp, p.get("protocol")))
                port, end = p.get("port"), p.get("endPort")
                if isinstance(port, int):
                    if not 1 <= port <= 65535:
                        errs.append("%s.port: Invalid value: %d: must be between 1 and 65535, inclusive" % (pp, port))
                elif port is not None and not valid_port_name(port):
                    errs.append('%s.port: Invalid value: "%s": must be a valid port name' % (pp, port))
                if end is not None:
                    if not isinstance(port, int):
                        errs.append("%s.endPort: Forbidden: may not be specified when port is non-numeric" % pp)
                    elif not isinstance(end, int) or end < port or end > 65535:
                        errs.append("%s.endPort: Invalid value: %s: must be greater than or equal to port" % (pp, end))
            for j, peer in enumerate(rule.get(peers) or []):
                pp = "%s.%s[%d]" % (base, peers, j)
                set_fields = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
                if not set_fields:
                    errs.append("%s: Required value: must specify a peer" % pp)
                if "ipBlock" in set_fields and len(set_fields) > 1:
                    errs.append("%s: Forbidden: may not specify both ipBlock and another peer" % pp)
                validate_selector(peer.get("podSelector"), pp + ".podSelector", errs)
                validate_selector(peer.get("namespaceSelector"), pp + ".namespaceSelector", errs)
                blk = peer.get("ipBlock")
                if blk is not None:
                    try:
                        net = ipaddress.ip_network(blk.get("cidr", ""), strict=False)
                    except ValueError:
                        errs.append('%s.ipBlock.cidr: Invalid value: "%s": must be a valid CIDR value, '
                                    '(e.g. 10.9.8.0/24 or 2001:db8::/64)' % (pp, blk.get("cidr")))
                        continue
                    for k, ex in enumerate(blk.get("except") or []):
                        try:
                            exn = ipaddress.ip_network(ex, strict=False)
                            ok = exn.version == net.version and exn.subnet_of(net) and exn.prefixlen > net.prefixlen
                        except ValueError:
                            ok = False
                        if not ok:
                            errs.append('%s.ipBlock.except[%d]: Invalid value: "%s": must be a strict subset of '
                                        '`cidr`' % (pp, k, ex))


def validate_cnp(spec, errs):
    """The CRD's structural schema, its top level only (tier, priority,
    subject); rules are stored as sent."""
    tier = spec.get("tier")
    if tier is None:
        errs.append("spec.tier: Required value")
    elif tier not in ("Admin", "Baseline"):
        errs.append('spec.tier: Unsupported value: "%s": supported values: "Admin", "Baseline"' % tier)
    prio = spec.get("priority")
    if prio is None:
        errs.append("spec.priority: Required value")
    elif not isinstance(prio, int) or isinstance(prio, bool):
        errs.append('spec.priority: Invalid value: "%s": spec.priority in body must be of type integer' % type(prio).__name__)
    elif prio < 0:
        errs.append("spec.priority: Invalid value: %d: spec.priority in body should be greater than or equal to 0" % prio)
    elif prio > 1000:
        errs.append("spec.priority: Invalid value: %d: spec.priority in body should be less than or equal to 1000" % prio)
    subject = spec.get("subject")
    if subject is None:
        errs.append("spec.subject: Required value")
    elif isinstance(subject, dict) and len(subject) < 1:
        errs.append("spec.subject: Invalid value: 0: spec.subject in body should have at least 1 properties")
    elif isinstance(subject, dict) and len(subject) > 1:
        errs.append("spec.subject: Invalid value: %d: spec.subject in body should have at most 1 properties" % len(subject))


def validate_object(res, obj):
    meta = obj["metadata"]
    name = meta.get("name", "")
    errs = []
    rx = DNS_LABEL if res.plural == "namespaces" else DNS_SUBDOMAIN
    if not rx.match(name) or len(name) > (63 if res.plural == "namespaces" else 253):
        errs.append('metadata.name: Invalid value: "%s": a lowercase RFC 1123 %s must consist of lower case '
                    "alphanumeric characters, '-' or '.'" % (name, "label" if res.plural == "namespaces" else "subdomain"))
    for k, v in (meta.get("labels") or {}).items():
        if not valid_label_key(k):
            errs.append('metadata.labels: Invalid value: "%s": name part must consist of alphanumeric characters' % k)
        if not valid_label_value(v):
            errs.append('metadata.labels: Invalid value: "%s": a valid label must be an empty string or consist '
                        "of alphanumeric characters" % v)
    spec = obj.get("spec") or {}
    if res.plural == "networkpolicies":
        validate_np(spec, errs)
    if res.plural == "clusternetworkpolicies":
        validate_cnp(spec, errs)
    if res.plural == "services":
        validate_service(spec, errs)
    if res.plural == "endpointslices":
        validate_endpointslice(obj, errs)
    elif res.plural == "pods":
        containers = spec.get("containers") or []
        if not containers:
            errs.append("spec.containers: Required value")
        for kind in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(kind) or []):
                base = "spec.%s[%d]" % (kind, i)
                if not c.get("name"):
                    errs.append("%s.name: Required value" % base)
                if not c.get("image"):
                    errs.append("%s.image: Required value" % base)
                for j, p in enumerate(c.get("ports") or []):
                    cp = p.get("containerPort")
                    if not isinstance(cp, int) or not 1 <= cp <= 65535:
                        errs.append("%s.ports[%d].containerPort: Invalid value: %s" % (base, j, cp))
                    if p.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
                        errs.append('%s.ports[%d].protocol: Unsupported value: "%s"' % (base, j, p.get("protocol")))
                    if "name" in p and not valid_port_name(p["name"]):
                        errs.append('%s.ports[%d].name: Invalid value: "%s"' % (base, j, p["name"]))
    if errs:
        raise invalid(res, name, errs)


def validate_service(spec, errs):
    """The checks of the real server's Service validation a client of ours
    can meet (a subset: ports, protocols, types, affinity)."""
    if spec.get("type") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errs.append('spec.type: Unsupported value: "%s": supported values: "ClusterIP", "ExternalName", '
                    '"LoadBalancer", "NodePort"' % spec.get("type"))
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName":
        errs.append("spec.ports: Required value")
    for i, p in enumerate(ports):
        port = p.get("port")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            errs.append("spec.ports[%d].port: Invalid value: %s: must be between 1 and 65535, inclusive" % (i, port))
        if p.get("protocol") not in ("TCP", "UDP", "SCTP"):
            errs.append('spec.ports[%d].protocol: Unsupported value: "%s": supported values: "SCTP", "TCP", "UDP"'
                        % (i, p.get("protocol")))
        if len(ports) > 1 and not p.get("name"):
            errs.append("spec.ports[%d].name: Required value" % i)
        np_ = p.get("nodePort")
        if np_ is not None and (not isinstance(np_, int) or not 0 <= np_ <= 65535):
            errs.append("spec.ports[%d].nodePort: Invalid value: %s: must be between 1 and 65535, inclusive" % (i, np_))
    hc = spec.get("healthCheckNodePort")
    if hc:
        # apis/core/validation's validateServiceExternalTrafficPolicy.
        if spec.get("type") != "LoadBalancer" or spec.get("externalTrafficPolicy") != "Local":
            errs.append("spec.healthCheckNodePort: Invalid value: %s: may only be set when `type` is "
                        "'LoadBalancer' and `externalTrafficPolicy` is 'Local'" % hc)
        elif not isinstance(hc, int) or not 1 <= hc <= 65535:
            errs.append("spec.healthCheckNodePort: Invalid value: %s: must be between 1 and 65535, inclusive" % hc)
    if spec.get("sessionAffinity") not in (None, "None", "ClientIP"):
        errs.append('spec.sessionAffinity: Unsupported value: "%s": supported values: "ClientIP", "None"'
                    % spec.get("sessionAffinity"))


def validate_endpointslice(obj, errs):
    if obj.get("addressType") not in ("IPv4", "IPv6", "FQDN"):
        errs.append('addressType: Unsupported value: "%s": supported values: "FQDN", "IPv4", "IPv6"'
                    % obj.get("addressType"))
    for i, p in enumerate(obj.get("ports") or []):
        port = p.get("port")
        if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
            errs.append("ports[%d].port: Invalid value: %s: must be between 1 and 65535, inclusive" % (i, port))
    for i, e in enumerate(obj.get("endpoints") or []):
        if not e.get("addresses"):
            errs.append("endpoints[%d].addresses: Required value: must contain at least 1 address" % i)


POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


def check_pod_update(old, new, name):
    def frozen(spec):
        s = copy.deepcopy(spec or {})
        for k in POD_MUTABLE:
            s.pop(k, None)
        for kind in ("containers", "initContainers"):
            for c in s.get(kind) or []:
                c.pop("image", None)
        return s
    if frozen(old.get("spec")) != frozen(new.get("spec")):
        raise invalid(RESOURCES["pods"], name, [
            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
            "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
            "previously negative)"])


def qos_class(spec):
    cs = spec.get("containers") or []
    res = [c.get("resources") or {} for c in cs]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    if all((r.get("limits") or {}).get(k) and (r.get("requests") or r.get("limits")).get(k) == r["limits"][k]
           for r in res for k in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


# ---------------------------------------------------------------- patches

def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


def json_patch(doc, ops):
    """RFC 6902."""
    def parts(ptr):
        if ptr == "":
            return []
        if not ptr.startswith("/"):
            raise ValueError("bad pointer %r" % ptr)
        return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]

    def walk(d, ps):
        for p in ps:
            d = d[int(p)] if isinstance(d, list) else d[p]
        return d

    def get(d, ptr):
        ps = parts(ptr)
        return walk(d, ps)

    def put(d, ptr, val, replace):
        ps = parts(ptr)
        if not ps:
            return val
        parent = walk(d, ps[:-1])
        last = ps[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(val)
            elif replace:
                parent[int(last)] = val
            else:
                parent.insert(int(last), val)
        else:
            if replace and last not in parent:
                raise KeyError(last)
            parent[last] = val
        return d

    def remove(d, ptr):
        ps = parts(ptr)
        parent = walk(d, ps[:-1])
        if isinstance(parent, list):
            return parent.pop(int(ps[-1]))
        return parent.pop(ps[-1])

    if not isinstance(ops, list):
        raise ValueError("a JSON patch is a list of operations")
    for op in ops:
        o = op.get("op")
        if o == "add":
            doc = put(doc, op["path"], copy.deepcopy(op["value"]), False)
        elif o == "remove":
            remove(doc, op["path"])
        elif o == "replace":
            doc = put(doc, op["path"], copy.deepcopy(op["value"]), True)
        elif o == "move":
            doc = put(doc, op["path"], remove(doc, op["from"]), False)
        elif o == "copy":
            doc = put(doc, op["path"], copy.deepcopy(get(doc, op["from"])), False)
        elif o == "test":
            if get(doc, op["path"]) != op["value"]:
                raise ValueError("test failed at %s" % op["path"])
        else:
            raise ValueError("unknown op %r" % o)
    return doc


# ---------------------------------------------------------------- the store

class Event:
    __slots__ = ("rv", "res", "key", "obj", "prev", "silent")

    def __init__(self, rv, res, key, obj, prev, silent=False):
        self.rv, self.res, self.key, self.obj, self.prev, self.silent = rv, res, key, obj, prev, silent


def key_of(res, ns, name):
    return "%s/%s" % (ns, name) if res.namespaced else name


def strip_type(obj):
    o = dict(obj)
    o.pop("kind", None)
    o.pop("apiVersion", None)
    return o


class Store:
    """Every object and the event history. All methods take self.lock.
    Stored objects are never mutated after they are committed (writers
    deep-copy), so events and snapshots share them."""

    def __init__(self, token, page_cap, history_max):
        self.lock = threading.RLock()
        self.rv = 100
        self.oldest = 100        # reads and watches at RV >= oldest are served
        self.objects = {p: {} for p in RESOURCES}
        self.history = []
        self.history_max = history_max
        self.watchers = []
        self.log = []
        self.token = token
        self.defaults = True
        self.page_cap = page_cap
        self.expire_after_pages = 0
        self.expire_resource = ""
        self.crds = set()        # installed CRDs (plural names), /_test/crds
        self.sa_tokens = {}      # token -> UserInfo, from TokenRequests
        self.writes = []         # every write: {"method", "path", "code", "user", "node"}
        for ns in SYSTEM_NAMESPACES:
            self.create(RESOURCES["namespaces"], None, {"metadata": {"name": ns}})

    # -- plumbing
    def commit(self, res, key, new, silent=False):
        """Stores `new` (None: deletes) at a new RV and fans the event out."""
        prev = self.objects[res.plural].get(key)
        self.rv += 1
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[res.plural][key] = new
        else:
            del self.objects[res.plural][key]
        ev = Event(self.rv, res, key, new, prev, silent)
        self.history.append(ev)
        if len(self.history) > self.history_max:
            dropped = self.history.pop(0)
            self.oldest = dropped.rv
        for w in self.watchers:
            if w.res is res:
                w.q.put(("event", ev))
        return new

    def snapshot(self, res, rv):
        """{key: obj} as of `rv` (REQUIRES: rv >= self.oldest)."""
        objs = dict(self.objects[res.plural])
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            if ev.res is not res:
                continue
            if ev.prev is None:
                objs.pop(ev.key, None)
            else:
                objs[ev.key] = ev.prev
        return objs

    def get(self, res, ns, name):
        with self.lock:
            obj = self.objects[res.plural].get(key_of(res, ns, name))
            if obj is None:
                raise not_found(res, name)
            return obj

    def check_namespace(self, ns):
        nsobj = self.objects["namespaces"].get(ns)
        if nsobj is None:
            raise not_found(RESOURCES["namespaces"], ns)
        if (nsobj.get("status") or {}).get("phase") == "Terminating":
            raise ApiError(403, "Forbidden", "unable to create new content in namespace %s because it is being "
                           "terminated" % ns, ns, RESOURCES["namespaces"])

    def typed(self, res, obj, prune=False):
        """Checks kind/apiVersion in a request body and fills them in;
        `prune` drops unknown top-level fields, as the real decoder does."""
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        if obj.get("apiVersion") not in (None, res.api_version):
            raise ApiError(400, "BadRequest", "the API version in the data (%s) does not match the expected API "
                           "version (%s)" % (obj.get("apiVersion"), res.api_version))
        if obj.get("kind") not in (None, res.kind):
            raise ApiError(400, "BadRequest", "the kind in the data (%s) does not match the expected kind (%s)"
                           % (obj.get("kind"), res.kind))
        out = {"kind": res.kind, "apiVersion": res.api_version}
        out.update(copy.deepcopy(obj))
        out["kind"], out["apiVersion"] = res.kind, res.api_version
        if not isinstance(out.get("metadata"), dict):
            out["metadata"] = {}
        if prune:
            known = {"kind", "apiVersion", "metadata", "spec"} | ({"status"} if res.status else set()) | res.top
            for k in [k for k in out if k not in known]:
                del out[k]
        return out

    # -- identities: TokenRequest, TokenReview, SubjectAccessReview (RBAC)
    def token_request(self, ns, name, body):
        """A ServiceAccount token (opaque here; a JWT on the real server). Bound to
        a Pod, it carries the pod's and its node's name in the user's extra, as
        kube-apiserver >= 1.32 puts them (ServiceAccountTokenPodNodeInfo)."""
        with self.lock:
            sa = self.objects["serviceaccounts"].get(key_of(RESOURCES["serviceaccounts"], ns, name))
            if sa is None:
                raise ApiError(404, "NotFound", 'serviceaccounts "%s" not found' % name, name=name,
                               res=RESOURCES["serviceaccounts"])
            spec = dict((body or {}).get("spec") or {})
            spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
            spec.setdefault("expirationSeconds", 3600)
            spec.setdefault("boundObjectRef", None)
            token = "sa." + uuid.uuid4().hex
            jti = str(uuid.uuid4())
            user = {"username": "system:serviceaccount:%s:%s" % (ns, name), "uid": sa["metadata"]["uid"],
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/credential-id": ["JTI=" + jti]}}
            ref = spec.get("boundObjectRef") or {}
            if ref.get("kind") == "Pod":
                pod = self.objects["pods"].get(key_of(RESOURCES["pods"], ns, ref.get("name", "")))
                if pod is None:
                    raise ApiError(404, "NotFound", 'pods "%s" not found' % ref.get("name", ""),
                                   name=ref.get("name", ""), res=RESOURCES["pods"])
                user["extra"]["authentication.kubernetes.io/pod-name"] = [pod["metadata"]["name"]]
                user["extra"]["authentication.kubernetes.io/pod-uid"] = [pod["metadata"]["uid"]]
                node_name = (pod.get("spec") or {}).get("nodeName")
                node = self.objects["nodes"].get(key_of(RESOURCES["nodes"], None, node_name or ""))
                if node is not None:
                    user["extra"][NODE_NAME_KEY] = [node_name]
                    user["extra"]["authentication.kubernetes.io/node-uid"] = [node["metadata"]["uid"]]
            self.sa_tokens[token] = user
            exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + spec["expirationSeconds"]))
            return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                                 "creationTimestamp": now()},
                    "spec": spec, "status": {"token": token, "expirationTimestamp": exp}}

    def token_review(self, body):
        if not isinstance(body, dict) or body.get("kind") not in (None, "TokenReview"):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        out = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {}, "spec": spec}
        with self.lock:
            user = self.sa_tokens.get(token)
        if user is None:
            # The real server's wording for a token no authenticator accepts.
            out["status"] = {"user": {}, "error": "[invalid bearer token, service account token has been "
                                                  "invalidated]"}
        else:
            out["status"] = {"authenticated": True, "user": copy.deepcopy(user),
                             "audiences": ["https://kubernetes.default.svc.cluster.local"]}
        return out

    def access_review(self, body):
        """RBAC over the stored ClusterRoles and ClusterRoleBindings (resource
        attributes only), and system:masters allowed everything."""
        if not isinstance(body, dict) or body.get("kind") not in (None, "SubjectAccessReview"):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        spec = body.get("spec") or {}
        ra = spec.get("resourceAttributes")
        if not ra or not (spec.get("user") or spec.get("groups")):
            raise ApiError(422, "Invalid", "SubjectAccessReview.authorization.k8s.io \"\" is invalid: "
                           "spec.resourceAttributes: Invalid value: ...: exactly one of nonResourceAttributes or "
                           "resourceAttributes must be specified")
        user, groups = spec.get("user", ""), spec.get("groups") or []
        status = {"allowed": False}
        if "system:masters" in groups:
            status = {"allowed": True}
        else:
            with self.lock:
                roles = {o["metadata"]["name"]: o for o in self.objects["clusterroles"].values()}
                bindings = sorted(self.objects["clusterrolebindings"].values(), key=lambda o: o["metadata"]["name"])
            for b in bindings:
                subj = next((x for x in b.get("subjects") or [] if subject_matches(x, user, groups)), None)
                ref = b.get("roleRef") or {}
                role = roles.get(ref.get("name", "")) if ref.get("kind") == "ClusterRole" else None
                if subj is None or role is None:
                    continue
                if any(rule_allows(r, ra) for r in role.get("rules") or []):
                    status = {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "%s" of ClusterRole '
                              '"%s" to %s' % (b["metadata"]["name"], role["metadata"]["name"], describe(subj))}
                    break
        return {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {}, "spec": spec, "status": status}

    # -- verbs
    def create(self, res, ns, body, raw=False):
        with self.lock:
            obj = self.typed(res, body, prune=not raw)
            meta = obj["metadata"]
            if res.namespaced:
                if meta.get("namespace") and ns is not None and meta["namespace"] != ns:
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                   "namespace sent on the request")
                ns = ns or meta.get("namespace") or "default"
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                              for _ in range(5))
            name = meta.get("name")
            if not name:
                raise invalid(res, "", ["metadata.name: Required value: name or generateName is required"])
            key = key_of(res, ns, name)
            if not raw:
                if meta.get("resourceVersion"):
                    raise ApiError(500, "InternalError", "Internal error occurred: resourceVersion should not be "
                                   "set on objects to be created")
                if res.namespaced:
                    self.check_namespace(ns)
                for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                    meta.pop(k, None)
                if res.plural == "pods":
                    obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
                elif res.plural == "namespaces":
                    obj["spec"] = {"finalizers": ["kubernetes"]}
                    obj["status"] = {"phase": "Active"}
                elif res.plural == "nodes":
                    # The TaintNodesByCondition admission plugin: a new Node is not ready.
                    spec = obj.setdefault("spec", {})
                    taints = spec.setdefault("taints", [])
                    if not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints if isinstance(t, dict)):
                        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
                if self.defaults:
                    default_object(res, obj)
                validate_object(res, obj)
            if key in self.objects[res.plural]:
                if raw:
                    return self.replace_raw(res, key, obj)
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(res), name), name, res)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if res.plural in GENERATION or (raw and "generation" in meta):
                meta["generation"] = 1
            return self.commit(res, key, obj)

    def replace_raw(self, res, key, obj):
        old = self.objects[res.plural][key]
        for k in ("uid", "creationTimestamp"):
            obj["metadata"][k] = old["metadata"].get(k)
        return self.commit(res, key, obj)

    def update(self, res, ns, name, body, subresource=None, patcher=None):
        """PUT (body) or PATCH (patcher(old) -> new body) of the object or
        its /status."""
        with self.lock:
            old = self.get(res, ns, name)
            key = key_of(res, ns, name)
            if patcher is not None:
                body = patcher(copy.deepcopy(old))
            obj = self.typed(res, body, prune=True)
            meta = obj["metadata"]
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL "
                               "(%s)" % (meta.get("name"), name))
            if res.namespaced and meta.get("namespace", ns) != ns:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                               "namespace sent on the request")
            want_rv = meta.get("resourceVersion")
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and try again"
                               % (qualified(res), name), name, res)
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = obj.get("status") or {}
            else:
                new = obj
                nm = new["metadata"]
                nm["name"] = name
                if res.namespaced:
                    nm["namespace"] = ns
                for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation"):
                    if k in old["metadata"]:
                        nm[k] = old["metadata"][k]
                    else:
                        nm.pop(k, None)
                if res.status:
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                if res.plural == "namespaces":
                    new["spec"] = copy.deepcopy(old.get("spec") or {})
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if self.defaults:
                default_object(res, new)
            if subresource is None:
                validate_object(res, new)
                if res.plural == "pods":
                    check_pod_update(old, new, name)
            if res.plural in GENERATION and generation_fields(res, new) != generation_fields(res, old):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if new == old:
                return old  # a no-op write: no new RV, no event
            return self.commit(res, key, new)

    def bind(self, ns, name, body):
        with self.lock:
            res = RESOURCES["pods"]
            old = self.get(res, ns, name)
            target = (body or {}).get("target") or {}
            if not target.get("name"):
                raise invalid(res, name, ["target.name: Required value"])
            if (old.get("spec") or {}).get("nodeName"):
                raise ApiError(409, "Conflict", "Operation cannot be fulfilled on pods/binding \"%s\": pod %s is "
                               "already assigned to node \"%s\"" % (name, name, old["spec"]["nodeName"]), name, res)
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["nodeName"] = target["name"]
            self.commit(res, key_of(res, ns, name), new)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def delete(self, res, ns, name, opts, grace=None):
        with self.lock:
            old = self.get(res, ns, name)
            pre = (opts or {}).get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object meta: "
                               "%s" % (pre["uid"], old["metadata"].get("uid")), name, res)
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "Precondition failed: ResourceVersion in precondition: %s, "
                               "ResourceVersion in object meta: %s" % (pre["resourceVersion"],
                                                                       old["metadata"]["resourceVersion"]), name, res)
            key = key_of(res, ns, name)
            if res.plural == "namespaces":
                term = copy.deepcopy(old)
                term["metadata"]["deletionTimestamp"] = now()
                term["metadata"]["deletionGracePeriodSeconds"] = 0
                term.setdefault("status", {})["phase"] = "Terminating"
                self.commit(res, key, term)
                for plural in ("pods", "networkpolicies", "services", "endpointslices"):
                    r = RESOURCES[plural]
                    for k in sorted(self.objects[plural]):
                        if k.startswith(name + "/"):
                            self.commit(r, k, None)
                self.commit(res, key, None)
                return copy.deepcopy(term)
            if res.plural == "pods" and grace:
                if old["metadata"].get("deletionTimestamp"):
                    return old
                term = copy.deepcopy(old)
                term["metadata"]["deletionTimestamp"] = time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + grace))
                term["metadata"]["deletionGracePeriodSeconds"] = grace
                uid = old["metadata"].get("uid")
                term = self.commit(res, key, term)

                def finish():
                    with self.lock:
                        cur = self.objects[res.plural].get(key)
                        if cur is not None and cur["metadata"].get("uid") == uid:
                            self.commit(res, key, None)
                t = threading.Timer(grace, finish)
                t.daemon = True
                t.start()
                return term
            self.commit(res, key, None)
            if res.plural == "pods":
                return old
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "kind": res.plural, "uid": old["metadata"].get("uid"),
                                **({"group": res.group} if res.group else {})}}

    def list(self, res, ns, q):
        flt = Filter(res, ns, q)
        limit = q.get("limit", "")
        try:
            limit = int(limit) if limit else 0
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid limit %r" % limit)
        cont = q.get("continue", "")
        rvq = q.get("resourceVersion", "")
        match = q.get("resourceVersionMatch", "")
        with self.lock:
            start_after = None
            if cont:
                if rvq:
                    raise ApiError(400, "BadRequest", "specifying resource version is not allowed when using "
                                   "continue")
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont + "=" * (-len(cont) % 4)))
                    snap_rv, start_after = int(tok["rv"]), tok["start"]
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid")
                if snap_rv < self.oldest:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                   "consistent list result. You can start a new list without the continue "
                                   "parameter, or use the continue token in this response to retrieve the "
                                   "remainder of the results. Continuing with the provided token results in an "
                                   "inconsistent list - objects that were created, modified, or deleted between "
                                   "the time the first chunk was returned and now may show up in the list.",
                                   meta={"continue": self.token_for(self.rv, start_after)})
                objs = self.snapshot(res, snap_rv)
            elif match == "Exact" and rvq:
                snap_rv = int(rvq)
                if snap_rv < self.oldest:
                    raise ApiError(410, "Expired", "The resourceVersion for the provided list is too old.")
                objs = self.snapshot(res, snap_rv)
            else:
                snap_rv = self.rv
                objs = self.objects[res.plural]
                if rvq == "0":
                    limit = 0  # served from the watch cache: no pagination
            keys = sorted(k for k in objs if start_after is None or k > start_after)
            if ns is not None:
                keys = [k for k in keys if k.startswith(ns + "/")]
            page = keys
            if limit > 0:
                size = min(limit, self.page_cap) if self.page_cap else limit
                page = keys[:size]
            # A custom resource's list items keep their kind and apiVersion (the
            # real server stores them as sent); built-in ones do not.
            items = [objs[k] if res.crd else strip_type(objs[k]) for k in page if flt.matches(objs[k])]
            meta = {"resourceVersion": str(snap_rv)}
            if res.crd:
                meta["continue"] = ""  # the real server's CR lists carry it, empty on the last page
            if len(page) < len(keys):
                meta["continue"] = self.token_for(snap_rv, page[-1])
                if not flt.has_selector:
                    meta["remainingItemCount"] = len(keys) - len(page)
                if self.expire_after_pages > 0 and self.expire_resource in ("", res.plural):
                    self.expire_after_pages -= 1
                    if self.expire_after_pages == 0:
                        self.expire(cut_watches=False)
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    @staticmethod
    def token_for(rv, key):
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": key}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def expire(self, cut_watches=True):
        """Compaction: a write elsewhere (as a real cluster always has), then
        everything before it forgotten."""
        with self.lock:
            self.rv += 1
            self.history = []
            self.oldest = self.rv
            if cut_watches:
                for w in self.watchers:
                    w.q.put(("gone", None))


# ---------------------------------------------------------------- HTTP

class Watcher:
    def __init__(self, res, flt):
        self.res, self.flt, self.q = res, flt, queue.Queue()

    def convert(self, ev):
        """The event this watcher sees for a stored change (None: nothing),
        as the watch cache's cacheWatcher.convertToWatchEvent does."""
        if ev.silent:
            return None
        cur = ev.obj is not None and self.flt.matches(ev.obj)
        old = ev.prev is not None and self.flt.matches(ev.prev)
        if cur and not old:
            return {"type": "ADDED", "object": ev.obj}
        if cur and old:
            return {"type": "MODIFIED", "object": ev.obj}
        if old:
            gone = copy.deepcopy(ev.prev)
            gone["metadata"]["resourceVersion"] = str(ev.rv)
            return {"type": "DELETED", "object": gone}
        return None


def parse_api_path(path):
    """(Resource, namespace or None, name or None, subresource or None), or
    None when the path names no resource we serve."""
    for group, prefix in (("", "/api/v1/"), ("networking.k8s.io", "/apis/networking.k8s.io/v1/"),
                          ("discovery.k8s.io", "/apis/discovery.k8s.io/v1/"),
                          ("policy.networking.k8s.io", "/apis/policy.networking.k8s.io/v1alpha2/"),
                          ("rbac.authorization.k8s.io", "/apis/rbac.authorization.k8s.io/v1/")):
        if path.startswith(prefix):
            break
    else:
        return None
    parts = [urllib.parse.unquote(p) for p in path[len(prefix):].split("/")]
    if parts and parts[-1] == "":
        parts.pop()
    ns = None
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] in RESOURCES and RESOURCES[parts[2]].namespaced:
        ns, parts = parts[1], parts[2:]
    if not parts or parts[0] not in RESOURCES or len(parts) > 3:
        return None
    res = RESOURCES[parts[0]]
    if res.group != group:
        return None
    name = parts[1] if len(parts) > 1 else None
    sub = parts[2] if len(parts) > 2 else None
    if name is not None and res.namespaced and ns is None:
        return None
    return res, ns, name, sub


DISCOVERY_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def discovery(group):
    res = [{"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
            "verbs": DISCOVERY_VERBS} for r in RESOURCES.values() if r.group == group]
    res += [{"name": r.plural + "/status", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
             "verbs": ["get", "patch", "update"]} for r in RESOURCES.values() if r.group == group and r.status]
    version = next((r.version for r in RESOURCES.values() if r.group == group), "v1")
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": group + "/" + version if group else "v1", "resources": res}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stalls
    store = None  # set in Server()

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.entry = None
        self.write = None

    def send_response(self, code, message=None):
        if self.entry is not None:
            with self.store.lock:
                self.store.log.append("%s -> %d" % (self.entry, code))
                if self.write is not None:
                    self.store.writes.append(dict(self.write, code=code))
            self.entry = None
        super().send_response(code, message)

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def authenticate(self):
        """The caller's UserInfo, or None: the --token (an admin, as the real
        server's system:masters) or a token from a TokenRequest."""
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return None
        token = auth[len("Bearer "):]
        if token == self.store.token:
            return ADMIN
        with self.store.lock:
            return self.store.sa_tokens.get(token)

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (OSError, ValueError):
            self.close_connection = True

    def dispatch(self, method):
        u = urllib.parse.urlsplit(self.path)
        path = u.path
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(u.query, keep_blank_values=True).items()}
        raw = self.read_body()
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        self.write = None
        if path != "/_test/log":
            self.entry = "%s %s" % (method, self.path) + (" " + ctype if method == "PATCH" else "")
        try:
            if path.startswith("/_test/"):
                return self.test_control(method, path, q, raw)
            if path in ("/healthz", "/readyz", "/livez"):
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", "2")
                self.end_headers()
                return self.wfile.write(body)
            if path == "/version":
                return self.send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-weft-stand-in",
                                            "platform": "linux/amd64"})
            user = self.authenticate()
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if method not in ("GET", "HEAD"):
                self.write = {"method": method, "path": path, "user": user["username"],
                              "node": (user.get("extra", {}).get(NODE_NAME_KEY) or [""])[0]}
            if method == "POST" and path == "/apis/authentication.k8s.io/v1/tokenreviews":
                return self.send_json(201, self.store.token_review(self.read_json(raw)))
            if method == "POST" and path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                return self.send_json(201, self.store.access_review(self.read_json(raw)))
            if method == "GET" and path in ("/api", "/api/"):
                return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": []})
            if method == "GET" and path in ("/apis", "/apis/"):
                groups = [{"name": g, "versions": [{"groupVersion": g + "/v1", "version": "v1"}],
                           "preferredVersion": {"groupVersion": g + "/v1", "version": "v1"}}
                          for g in ("networking.k8s.io", "discovery.k8s.io")]
                for r in RESOURCES.values():
                    if r.crd and r.plural in self.store.crds:
                        gv = {"groupVersion": r.api_version, "version": r.version}
                        groups.append({"name": r.group, "versions": [gv], "preferredVersion": gv})
                return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            if method == "GET" and path.rstrip("/") in ("/api/v1", "/apis/networking.k8s.io/v1",
                                                        "/apis/discovery.k8s.io/v1"):
                return self.send_json(200, discovery("" if path.startswith("/api/") else path.split("/")[2]))
            if (method == "GET" and path.rstrip("/") == RESOURCES["clusternetworkpolicies"].prefix
                    and "clusternetworkpolicies" in self.store.crds):
                return self.send_json(200, discovery("policy.networking.k8s.io"))
            target = parse_api_path(path)
            if target is not None and target[0].crd and target[0].plural not in self.store.crds:
                # Its CRD is not installed: the real server does not know the group at all and
                # answers as its mux does, in plain text, not with a Status.
                body = b"404 page not found\n"
                self.send_response(404)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            if target is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self.api(method, target, q, raw, ctype)
        except ApiError as e:
            return self.send_json(e.code, e.status())

    @staticmethod
    def read_json(raw):
        try:
            return json.loads(raw or b"null")
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding request body: %s" % e)

    def api(self, method, target, q, raw, ctype):
        res, ns, name, sub = target
        st = self.store
        if res.plural == "serviceaccounts" and sub == "token" and name is not None:
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            return self.send_json(201, st.token_request(ns, name, self.read_json(raw)))
        cluster_wide_namespaced = res.namespaced and ns is None

        def body():
            try:
                return json.loads(raw or b"null")
            except ValueError as e:
                raise ApiError(400, "BadRequest", "error decoding request body: %s" % e)

        if sub is not None and not (sub == "status" and res.status) and not (sub == "binding" and res.plural == "pods"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            if method == "GET":
                if q.get("watch") in ("1", "t", "T", "true", "True", "TRUE"):  # Go's ParseBool
                    return self.watch(res, ns, q)
                return self.send_json(200, st.list(res, ns, q))
            if method == "POST" and not cluster_wide_namespaced:
                return self.send_json(201, st.create(res, ns, body()))
            if method == "DELETE" and not cluster_wide_namespaced:
                flt = Filter(res, ns, q)
                with st.lock:
                    keys = sorted(k for k, o in st.objects[res.plural].items() if flt.matches(o))
                    out = []
                    for k in keys:
                        o = st.objects[res.plural][k]
                        m = o["metadata"]
                        st.delete(res, m.get("namespace"), m["name"], None)
                        out.append(strip_type(o))
                return self.send_json(200, {"kind": res.kind + "List", "apiVersion": res.api_version,
                                            "metadata": {"resourceVersion": str(st.rv)}, "items": out})
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if sub == "binding":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            return self.send_json(201, st.bind(ns, name, body()))
        if method == "GET":
            return self.send_json(200, st.get(res, ns, name))
        if method == "PUT":
            return self.send_json(200, st.update(res, ns, name, body(), sub))
        if method == "PATCH":
            patch = body()
            if ctype == "application/merge-patch+json":
                patcher = (lambda old: merge_patch(old, patch))
            elif ctype == "application/json-patch+json":
                def patcher(old):
                    try:
                        return json_patch(old, patch)
                    except (ValueError, KeyError, IndexError, TypeError) as e:
                        raise ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                                       "request: %s" % e)
            else:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               "accepted media types include: application/json-patch+json, "
                               "application/merge-patch+json (the stand-in has no strategic merge or apply patch)")
            return self.send_json(200, st.update(res, ns, name, None, sub, patcher))
        if method == "DELETE" and sub is None:
            opts = body() if raw else {}
            grace = q.get("gracePeriodSeconds", (opts or {}).get("gracePeriodSeconds", 0))
            try:
                grace = int(grace or 0)
            except ValueError:
                raise ApiError(400, "BadRequest", "invalid gracePeriodSeconds")
            return self.send_json(200, st.delete(res, ns, name, opts, grace))
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # -- watch
    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def send_event(self, ev):
        self.chunk((json.dumps(ev, separators=(",", ":")) + "\n").encode())

    def watch(self, res, ns, q):
        st = self.store
        flt = Filter(res, ns, q)  # 400 before the stream starts
        rvq = q.get("resourceVersion", "")
        try:
            timeout = float(q.get("timeoutSeconds") or 0) or 1800.0
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid timeoutSeconds")
        bookmarks = q.get("allowWatchBookmarks") == "true"
        initial_events = q.get("sendInitialEvents") == "true"
        if initial_events and (not bookmarks or q.get("resourceVersionMatch") != "NotOlderThan"):
            raise ApiError(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                           "sendInitialEvents requires setting allowWatchBookmarks=true and "
                           "resourceVersionMatch=NotOlderThan")
        w = Watcher(res, flt)
        backlog = []
        with st.lock:
            if rvq in ("", "0") or initial_events:
                objs = st.objects[res.plural]
                backlog = [{"type": "ADDED", "object": objs[k]} for k in sorted(objs) if flt.matches(objs[k])]
                if initial_events:
                    backlog.append({"type": "BOOKMARK", "object": self.bookmark_object(
                        res, st.rv, {"k8s.io/initial-events-end": "true"})})
            else:
                try:
                    rv = int(rvq)
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % rvq)
                if rv < st.oldest:
                    backlog = [{"type": "ERROR", "object": ApiError(
                        410, "Expired", "too old resource version: %d (%d)" % (rv, st.oldest)).status()}]
                else:
                    for ev in st.history:
                        if ev.rv > rv and ev.res is res:
                            e = w.convert(ev)
                            if e:
                                backlog.append(e)
            if not backlog or backlog[-1]["type"] != "ERROR":
                st.watchers.append(w)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        try:
            for ev in backlog:
                self.send_event(ev)
            while not backlog or backlog[-1]["type"] != "ERROR":
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    kind, item = w.q.get(timeout=left)
                except queue.Empty:
                    break
                if kind == "event":
                    ev = w.convert(item)
                    if ev:
                        self.send_event(ev)
                elif kind == "bookmark":
                    if bookmarks:
                        self.send_event({"type": "BOOKMARK", "object": self.bookmark_object(res, item)})
                elif kind == "gone":
                    self.send_event({"type": "ERROR", "object": ApiError(
                        410, "Expired", "too old resource version: %s (%d)" % (rvq, st.oldest)).status()})
                    break
                elif kind == "partial":
                    with st.lock:
                        objs = st.objects[res.plural]
                        last = [objs[k] for k in sorted(objs) if flt.matches(objs[k])][-1:]
                    line = json.dumps({"type": "DELETED", "object": last[0] if last else
                                       {"kind": res.kind, "apiVersion": res.api_version,
                                        "metadata": {"name": "cut"}}}, separators=(",", ":"))
                    self.chunk(line[:len(line) // 2].encode())
                    self.close_connection = True
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, ValueError):
            self.close_connection = True
        finally:
            with st.lock:
                if w in st.watchers:
                    st.watchers.remove(w)

    @staticmethod
    def bookmark_object(res, rv, annotations=None):
        # As kube-apiserver v1.36 encodes a BOOKMARK's empty object: no
        # creationTimestamp, and each kind's zero-valued spec and status
        # (the struct fields without omitempty); tests/k8s/fidelity_test.py.
        meta = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        obj = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
        obj.update(copy.deepcopy(BOOKMARK_BODIES.get(res.plural, {})))
        return obj

    # -- test controls
    def test_control(self, method, path, q, raw):
        st = self.store
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            raise ApiError(400, "BadRequest", "bad JSON")
        with st.lock:
            if path == "/_test/log" and method == "GET":
                return self.send_json(200, list(st.log))
            if path == "/_test/writes" and method == "GET":
                with st.lock:
                    return self.send_json(200, list(st.writes))
            if path == "/_test/log" and method == "DELETE":
                st.log = []
            elif path == "/_test/nodes" and method == "POST":
                return self.send_json(200, st.create(RESOURCES["nodes"], None, body, raw=True))
            elif path.startswith("/_test/nodes/") and method == "DELETE":
                name = path.rsplit("/", 1)[1]
                res = RESOURCES["nodes"]
                if name not in st.objects["nodes"]:
                    return self.send_json(200, {"ok": False})
                st.commit(res, name, None, silent=q.get("silent") == "1")
            elif path == "/_test/objects" and method == "POST":
                res = KINDS.get(body.get("kind"))
                if res is None:
                    raise ApiError(400, "BadRequest", "unknown kind %r" % body.get("kind"))
                return self.send_json(200, st.create(res, (body.get("metadata") or {}).get("namespace"),
                                                     body, raw=True))
            elif path == "/_test/crds" and method == "POST":
                # {"install": ["clusternetworkpolicies"]} / {"remove": [...]}: as creating or deleting the
                # CRD on a real server (removing it deletes its objects, silently for the stand-in's watchers).
                for plural in body.get("install", []):
                    if plural not in RESOURCES or not RESOURCES[plural].crd:
                        raise ApiError(400, "BadRequest", "no CRD %r" % plural)
                    st.crds.add(plural)
                for plural in body.get("remove", []):
                    st.crds.discard(plural)
                    st.objects.get(plural, {}).clear()
            elif path == "/_test/defaults" and method == "POST":
                st.defaults = bool(body.get("enabled", True))
            elif path == "/_test/pages" and method == "POST":
                st.page_cap = int(body.get("cap", st.page_cap))
                st.expire_after_pages = int(body.get("expire_after_pages", 0))
                st.expire_resource = body.get("resource", "")
            elif path == "/_test/token" and method == "POST":
                st.token = body["token"]
            elif path == "/_test/bookmark" and method == "POST":
                for w in st.watchers:
                    w.q.put(("bookmark", st.rv))
            elif path == "/_test/expire" and method == "POST":
                st.expire(cut_watches=q.get("watches") != "0")
            elif path == "/_test/partial" and method == "POST":
                for w in st.watchers:
                    w.q.put(("partial", None))
            else:
                raise ApiError(404, "NotFound", "no such test control")
        return self.send_json(200, {"ok": True})

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, store, tls=None):
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        handler = type("BoundHandler", (Handler,), {"store": store})
        super().__init__(addr, handler)
        self.tls = tls
        if tls is not None:
            # The handshake runs on the connection's own thread (finish_request),
            # so a slow client never blocks accept().
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def finish_request(self, request, client_address):
        if self.tls is not None:
            request.settimeout(10)
            request.do_handshake()
            request.settimeout(None)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        pass  # clients that hang up or fail the handshake are not our errors


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def save_state(store, path):
    with store.lock:
        state = {"rv": store.rv, "objects": store.objects, "token": store.token, "defaults": store.defaults,
                 "page_cap": store.page_cap, "crds": sorted(store.crds)}
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)


def load_state(store, path):
    with open(path) as f:
        state = json.load(f)
    with store.lock:
        store.rv = store.oldest = state["rv"]
        for plural, objs in state["objects"].items():
            store.objects[plural] = objs
        store.history = []
        store.token, store.defaults, store.page_cap = state["token"], state["defaults"], state["page_cap"]
        store.crds = set(state.get("crds", []))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True,
                    help="HOST:PORT, an IPv6 HOST bare or in brackets (PORT 0: any; the address is printed)")
    ap.add_argument("--token", default="weft-test-token")
    ap.add_argument("--cert", help="server certificate (PEM); with --key serves HTTPS")
    ap.add_argument("--key", help="server key (PEM)")
    ap.add_argument("--page-cap", type=int, default=7, help="most items in one list page (0: limit only)")
    ap.add_argument("--history", type=int, default=100000, help="watch events kept before the oldest are compacted")
    ap.add_argument("--state", help="FILE: loaded at start when it exists, written on SIGTERM (a restart)")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    host = host.strip("[]")
    tls = tls_context(a.cert, a.key) if a.cert else None
    store = Store(a.token, a.page_cap, a.history)
    if a.state:
        if os.path.exists(a.state):
            load_state(store, a.state)

        def on_term(signum, frame):
            save_state(store, a.state)
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
    srv = Server((host, int(port)), store, tls)
    print("listening on %s://%s:%d" % ("https" if tls else "http", host, srv.server_address[1]), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
