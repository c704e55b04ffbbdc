#!/usr/bin/env python3
"""netpol_flip: NetworkPolicy API write -> enforced on the real cluster, as a
pod sees it (bench/k8s_netpol.sh; docs/performance.md, "NetworkPolicy on the
real cluster").

One process, one clock (CLOCK_MONOTONIC). It writes NetworkPolicies through
the real API server (HTTPS with the run's admin certificate, from the control
plane's network namespace) and probes from a client pod's network namespace
(setns(2) between the two: each socket lives in the namespace it was made in)
a server pod's TCP port: a new non-blocking connect every --period, each given
--timeout to complete (below the kernel's 1 s SYN retransmission, so a probe
refused before a write can never be answered after it by a retransmitted SYN).

The writes cycle through four, each flipping what the probe sees:
  create   a policy selecting the server, Ingress, no rule  -> refused
  allow    the same policy updated (merge patch): ingress from the client's label -> allowed
  deny     updated back to no ingress rule                   -> refused
  delete   the policy deleted                                -> allowed
('create' and 'delete' once per cycle, 'allow'/'deny' --updates times.)

Enforced at = the send time of the first probe after the write that shows the
new state and, for "refused", is followed only by refused probes for --settle
(a machine stall can time one connect out while it is still allowed; a
refused probe can never be answered). A write is judged only after the state
before it was stable, so every latency is that write's alone. For "allowed"
the first answered probe is the flip (nothing answers while refused); probes
timing out after it are counted as blips.

Prints one JSON object per write (kind, expect, write_ms: the API's round
trip, enforced_ms: from the request's send to the first probe showing the
new state, probes, blips) and a last line "done N".
"""
import argparse
import ctypes
import errno
import http.client
import json
import os
import selectors
import socket
import ssl
import sys
import time

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


def now():
    return time.monotonic_ns()


class Api:
    """Requests to the API server, made from the control plane's netns."""

    def __init__(self, host, port, ca, cert, key, cp_fd, home_fd):
        self.host, self.port = host, port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)
        self.cp_fd, self.home_fd = cp_fd, home_fd
        self.conn = None

    def request(self, method, path, body=None, ctype="application/json"):
        """Returns (t_sent, t_answered, status, body); the connection is made
        (TLS included) before t_sent is taken."""
        setns(self.cp_fd)
        try:
            for attempt in (0, 1):
                try:
                    if self.conn is None:
                        self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
                    if self.conn.sock is None:
                        self.conn.connect()
                    data = json.dumps(body).encode() if body is not None else None
                    t0 = now()
                    self.conn.request(method, path, body=data, headers={"Content-Type": ctype})
                    r = self.conn.getresponse()
                    out = r.read()
                    return t0, now(), r.status, out
                except (http.client.HTTPException, OSError):
                    if self.conn:
                        self.conn.close()
                    self.conn = None
                    if attempt:
                        raise
        finally:
            setns(self.home_fd)


class Prober:
    """A new TCP connect to dst:port every period; each probe ends answered
    (True), refused/reset/unreachable (False) or timed out (False)."""

    def __init__(self, dst, port, period_ns, timeout_ns):
        self.dst, self.port = dst, port
        self.period, self.timeout = period_ns, timeout_ns
        self.sel = selectors.DefaultSelector()
        self.probes = []          # [send_ns, state]: state None while pending
        self.pending = {}         # socket -> index in probes
        self.next_send = now()

    def _launch(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        # Closed with a RST: no TIME_WAIT pile-up at 100 probes/s.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        t = now()
        err = s.connect_ex((self.dst, self.port))
        self.probes.append([t, None])
        i = len(self.probes) - 1
        if err == 0:
            self.probes[i][1] = True
            s.close()
        elif err in (errno.EINPROGRESS, errno.EAGAIN):
            self.sel.register(s, selectors.EVENT_WRITE)
            self.pending[s] = i
        else:
            self.probes[i][1] = False
            s.close()

    def run_until(self, t_end):
        """Sends probes on schedule and collects results until t_end."""
        while True:
            t = now()
            if t >= t_end:
                return
            if t >= self.next_send:
                self._launch()
                self.next_send += self.period
                if self.next_send < t:          # the process was stalled: no burst
                    self.next_send = t + self.period
                continue
            wait = (min(self.next_send, t_end) - t) / 1e9
            for key, _ in self.sel.select(timeout=max(wait, 0)):
                s = key.fileobj
                i = self.pending.pop(s)
                self.sel.unregister(s)
                self.probes[i][1] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                s.close()
            # Completions first (above), then the expired ones.
            t = now()
            for s, i in list(self.pending.items()):
                if t - self.probes[i][0] >= self.timeout:
                    self.pending.pop(s)
                    self.sel.unregister(s)
                    s.close()
                    self.probes[i][1] = False


def flip_index(probes, start, t_write, expect, settle_ns):
    """Index of the first probe sent at or after t_write showing `expect` and,
    for refused, followed only by refused probes for settle_ns (all of them
    resolved); None when not decided yet."""
    j = start
    while j < len(probes) and probes[j][0] < t_write:
        j += 1
    for k in range(j, len(probes)):
        st = probes[k][1]
        if st is None:
            return None
        if st != expect:
            continue
        if expect:
            return k
        # refused: every probe of the next settle_ns resolved and refused
        t_k = probes[k][0]
        ok, m = True, k
        while m < len(probes) and probes[m][0] - t_k < settle_ns:
            if probes[m][1] is None:
                return None
            if probes[m][1]:
                ok = False
                break
            m += 1
        if not ok:
            continue
        if m == len(probes):            # the window is not over yet
            return None
        return k
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True, help="host:port of the API server")
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--api-netns", required=True, help="netns file the API server is reachable from")
    ap.add_argument("--probe-netns", required=True, help="netns file of the client pod")
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--server", required=True, help="the server pod's IP")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--server-label", default="app=npb-srv")
    ap.add_argument("--client-label", default="app=npb-cli")
    ap.add_argument("--writes", type=int, default=60)
    ap.add_argument("--updates", type=int, default=1, help="allow/deny update pairs per cycle")
    ap.add_argument("--period-ms", type=float, default=10)
    ap.add_argument("--timeout-ms", type=float, default=800)
    ap.add_argument("--settle-ms", type=float, default=1000)
    ap.add_argument("--max-wait-s", type=float, default=60)
    a = ap.parse_args()

    home_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    cp_fd = os.open(a.api_netns, os.O_RDONLY)
    pod_fd = os.open(a.probe_netns, os.O_RDONLY)
    setns(pod_fd)                        # probes are made here; the API calls switch and back
    host, port = a.api.rsplit(":", 1)
    api = Api(host, int(port), a.ca, a.cert, a.key, cp_fd, pod_fd)
    prober = Prober(a.server, a.port, int(a.period_ms * 1e6), int(a.timeout_ms * 1e6))
    settle = int(a.settle_ms * 1e6)

    sk, sv = a.server_label.split("=", 1)
    ck, cv = a.client_label.split("=", 1)
    base = f"/apis/networking.k8s.io/v1/namespaces/{a.namespace}/networkpolicies"
    name = "npbench"
    deny_spec = {"podSelector": {"matchLabels": {sk: sv}}, "policyTypes": ["Ingress"]}
    allow_rule = [{"from": [{"podSelector": {"matchLabels": {ck: cv}}}]}]
    cycle = ["create"] + ["allow", "deny"] * a.updates + ["delete"]
    expect_of = {"create": False, "allow": True, "deny": False, "delete": True}

    # A policy left by an interrupted run goes first.
    api.request("DELETE", f"{base}/{name}")

    def wait_state(want, label):
        """Probes until the state has been `want` for settle (no write pending)."""
        deadline = now() + int(a.max_wait_s * 1e9)
        start = len(prober.probes)
        while now() < deadline:
            prober.run_until(now() + int(50e6))
            k = flip_index(prober.probes, start, 0, want, settle)
            if k is not None and prober.probes[-1][0] - prober.probes[k][0] >= settle:
                rest = [p[1] for p in prober.probes[k:] if p[1] is not None]
                if all(s == want for s in rest):
                    return
                start = k + 1
        sys.exit(f"netpol_flip: the probe never settled {'allowed' if want else 'refused'} ({label})")

    wait_state(True, "before the first write: no policy")
    done = 0
    i = 0
    while done < a.writes:
        kind = cycle[i % len(cycle)]
        i += 1
        expect = expect_of[kind]
        start = len(prober.probes)
        if kind == "create":
            t0, t1, st, body = api.request("POST", base, {
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name}, "spec": deny_spec})
        elif kind == "delete":
            t0, t1, st, body = api.request("DELETE", f"{base}/{name}")
        else:
            t0, t1, st, body = api.request("PATCH", f"{base}/{name}",
                                           {"spec": {"ingress": allow_rule if kind == "allow" else None}},
                                           "application/merge-patch+json")
        if st >= 300:
            sys.exit(f"netpol_flip: {kind}: HTTP {st}: {body[:300]!r}")
        deadline = t0 + int(a.max_wait_s * 1e9)
        k = None
        while k is None and now() < deadline:
            prober.run_until(now() + int(20e6))
            k = flip_index(prober.probes, start, t0, expect, settle)
        if k is None:
            sys.exit(f"netpol_flip: {kind}: not {'allowed' if expect else 'refused'} within {a.max_wait_s} s")
        # For "allowed", keep probing for settle and count the timeouts after the flip.
        if expect:
            prober.run_until(prober.probes[k][0] + settle + int(a.timeout_ms * 1e6))
        after = [p[1] for p in prober.probes[k:] if p[1] is not None]
        blips = sum(1 for s in after if s != expect)
        print(json.dumps({"kind": kind, "expect": "allowed" if expect else "refused",
                          "write_ms": round((t1 - t0) / 1e6, 2),
                          "enforced_ms": round((prober.probes[k][0] - t0) / 1e6, 2),
                          "probes": len(prober.probes) - start, "blips": blips}), flush=True)
        done += 1
        if expect:
            wait_state(True, f"after {kind}")
        # (refused: flip_index already saw settle of refused probes)
        # Let the pending ones of this state end before the next write.
        prober.run_until(now() + int(a.timeout_ms * 1e6))
    if i % len(cycle):
        api.request("DELETE", f"{base}/{name}")
    print(f"done {done}", flush=True)


if __name__ == "__main__":
    main()
