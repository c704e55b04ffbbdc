#!/usr/bin/env python3
"""A small, faithful stand-in for the Kubernetes API server's Node endpoints.

Serves what weftd uses, with the real API's JSON shapes and watch semantics:
  GET   /api/v1/nodes[?limit=&continue=]            NodeList (paginated)
  GET   /api/v1/nodes?watch=1&resourceVersion=RV[&allowWatchBookmarks=true][&timeoutSeconds=N]
        chunked stream of {"type":ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,"object":...}\n;
        an RV older than the retained history yields an ERROR event with a
        410 Status (as the real server does), then the stream ends.
  GET   /api/v1/nodes/NAME                           Node or 404 Status
  PATCH /api/v1/nodes/NAME  (application/merge-patch+json, RFC 7386)
Bearer-token auth (401 Status otherwise). Test controls under /_test/:
  POST /_test/nodes            create or replace a Node (ADDED / MODIFIED)
  DELETE /_test/nodes/NAME[?silent=1]   delete (silent: no event, history dropped)
  POST /_test/bookmark         send a BOOKMARK at the current RV to every watch
  POST /_test/expire           forget all history; open watches get ERROR 410
  POST /_test/partial          write half an event line to every watch, then cut it
  GET  /_test/log              the requests seen so far (JSON list)
"""
import argparse, json, queue, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"rv": 100, "nodes": {}, "history": [], "oldest": 100, "watchers": [], "log": []}


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def merge(target, patch):
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge(target.get(k), v)
    return target


def emit(kind, obj):
    """Bumps the RV, records the event and fans it out. Caller holds LOCK."""
    STATE["rv"] += 1
    obj["metadata"]["resourceVersion"] = str(STATE["rv"])
    ev = {"type": kind, "object": json.loads(json.dumps(obj))}
    STATE["history"].append((STATE["rv"], ev))
    for q in STATE["watchers"]:
        q.put(("event", ev))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def authorized(self):
        if self.path.startswith("/_test/"):
            return True
        if self.headers.get("Authorization") != "Bearer " + self.server.token:
            self.send_json(401, status(401, "Unauthorized", "Unauthorized"))
            return False
        return True

    def route(self):
        u = urllib.parse.urlparse(self.path)
        return u.path, urllib.parse.parse_qs(u.query)

    def do_GET(self):
        path, q = self.route()
        with LOCK:
            STATE["log"].append("GET " + self.path)
        if path == "/_test/log":
            with LOCK:
                return self.send_json(200, STATE["log"])
        if not self.authorized():
            return
        if path == "/api/v1/nodes" and q.get("watch", ["0"])[0] in ("1", "true"):
            return self.watch(q)
        if path == "/api/v1/nodes":
            return self.list(q)
        if path.startswith("/api/v1/nodes/"):
            name = path.rsplit("/", 1)[1]
            with LOCK:
                node = STATE["nodes"].get(name)
            if node is None:
                return self.send_json(404, status(404, "NotFound", 'nodes "%s" not found' % name))
            return self.send_json(200, node)
        self.send_json(404, status(404, "NotFound", "not found"))

    def list(self, q):
        limit = int(q.get("limit", ["0"])[0] or 0)
        cont = q.get("continue", [""])[0]
        with LOCK:
            items = [STATE["nodes"][k] for k in sorted(STATE["nodes"])]
            rv = STATE["rv"]
            oldest = STATE["oldest"]
        start = 0
        if cont:
            crv, start = (int(x) for x in cont.split(":"))
            if crv < oldest:
                return self.send_json(410, status(410, "Expired", "The provided continue parameter is too old"))
            rv = crv
        meta = {"resourceVersion": str(rv)}
        page = items[start:start + limit] if limit else items[start:]
        if limit and start + limit < len(items):
            meta["continue"] = "%d:%d" % (rv, start + limit)
        self.send_json(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": meta, "items": page})

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, q):
        rv = int(q.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(q.get("timeoutSeconds", ["300"])[0])
        bookmarks = q.get("allowWatchBookmarks", ["false"])[0] == "true"
        mine = queue.Queue()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with LOCK:
            if rv < STATE["oldest"]:
                backlog = [("gone", None)]
            else:
                backlog = [("event", ev) for (r, ev) in STATE["history"] if r > rv]
            STATE["watchers"].append(mine)
        for item in backlog:
            mine.put(item)
        try:
            while True:
                try:
                    kind, ev = mine.get(timeout=timeout)
                except queue.Empty:
                    break
                if kind == "gone":
                    self.chunk((json.dumps({"type": "ERROR", "object": status(
                        410, "Expired", "too old resource version: %d" % rv)}) + "\n").encode())
                    break
                if kind == "partial":
                    self.chunk(b'{"type":"DELETED","object":{"kind":"Node","metadata":{"name":"n2"')
                    self.close_connection = True
                    return
                if kind == "bookmark" and not bookmarks:
                    continue
                self.chunk((json.dumps(ev) + "\n").encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with LOCK:
                if mine in STATE["watchers"]:
                    STATE["watchers"].remove(mine)

    def do_PATCH(self):
        path, _ = self.route()
        raw = self.body()
        with LOCK:
            STATE["log"].append("PATCH " + self.path + " " + self.headers.get("Content-Type", ""))
        if not self.authorized():
            return
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self.send_json(415, status(415, "UnsupportedMediaType", "only merge patch"))
        name = path.rsplit("/", 1)[1]
        with LOCK:
            node = STATE["nodes"].get(name)
            if node is None:
                return self.send_json(404, status(404, "NotFound", 'nodes "%s" not found' % name))
            node = merge(node, json.loads(raw))
            STATE["nodes"][name] = node
            emit("MODIFIED", node)
            out = json.loads(json.dumps(node))
        self.send_json(200, out)

    def do_POST(self):
        path, _ = self.route()
        raw = self.body()
        with LOCK:
            STATE["log"].append("POST " + self.path)
            if path == "/_test/nodes":
                node = json.loads(raw)
                name = node["metadata"]["name"]
                kind = "MODIFIED" if name in STATE["nodes"] else "ADDED"
                STATE["nodes"][name] = node
                emit(kind, node)
            elif path == "/_test/bookmark":
                ev = {"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                      "metadata": {"resourceVersion": str(STATE["rv"])}}}
                for q in STATE["watchers"]:
                    q.put(("bookmark", ev))
            elif path == "/_test/expire":
                STATE["history"] = []
                STATE["oldest"] = STATE["rv"] + 1
                for q in STATE["watchers"]:
                    q.put(("gone", None))
            elif path == "/_test/partial":
                for q in STATE["watchers"]:
                    q.put(("partial", None))
            else:
                return self.send_json(404, status(404, "NotFound", "not found"))
        self.send_json(200, {"ok": True})

    def do_DELETE(self):
        path, q = self.route()
        self.body()
        with LOCK:
            STATE["log"].append("DELETE " + self.path)
            name = path.rsplit("/", 1)[1]
            node = STATE["nodes"].pop(name, None)
            if node is not None and q.get("silent", ["0"])[0] != "1":
                emit("DELETED", node)
            elif node is not None:
                STATE["rv"] += 1
        self.send_json(200, {"ok": node is not None})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--token", default="weft-test-token")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    srv = ThreadingHTTPServer((host, int(port)), Handler)
    srv.daemon_threads = True
    srv.token = a.token
    srv.serve_forever()


if __name__ == "__main__":
    main()
