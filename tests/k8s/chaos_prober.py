#!/usr/bin/env python3
"""One prober of tests/k8s/cluster_chaos_test.sh, run inside a pod's network namespace.

  chaos_prober.py connect HOST PORT OUT TIMEOUT   a new TCP connection every 200 ms
  chaos_prober.py keepalive HOST PORT OUT         one keep-alive HTTP connection, GET /hostname every 200 ms;
                                                  when it breaks, the break is logged and a new one made

Every attempt is one JSON line appended to OUT: {"t": wall-clock seconds, "ok": bool, ...}; the
keep-alive prober also logs {"conn": N} with each line, N counting the connections made. Runs until
OUT.stop exists (or for 4 hours at most).
"""
import json
import os
import socket
import sys
import time

PERIOD_S = 0.2


def main():
    mode, host, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    log_file = open(out, "a", buffering=1)
    stop = out + ".stop"
    deadline = time.monotonic() + 4 * 3600

    def log(**fields):
        fields["t"] = round(time.time(), 3)
        log_file.write(json.dumps(fields) + "\n")

    def running():
        return not os.path.exists(stop) and time.monotonic() < deadline

    if mode == "connect":
        timeout = float(sys.argv[5])
        while running():
            start = time.monotonic()
            try:
                socket.create_connection((host, port), timeout=timeout).close()
                log(ok=True)
            except OSError as e:
                log(ok=False, err=type(e).__name__)
            time.sleep(max(0.0, PERIOD_S - (time.monotonic() - start)))
        return
    if mode != "keepalive":
        sys.exit("chaos_prober: unknown mode " + mode)
    request = ("GET /hostname HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n" % host).encode()
    sock, conn = None, 0
    while running():
        try:
            if sock is None:
                sock = socket.create_connection((host, port), timeout=10)
                conn += 1
            sock.sendall(request)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(4096)
                if not chunk:
                    raise OSError("connection closed by the peer")
                buf += chunk
            head, body = buf.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(body) < length:
                chunk = sock.recv(4096)
                if not chunk:
                    raise OSError("connection closed by the peer")
                body += chunk
            log(ok=True, conn=conn)
        except OSError as e:
            log(ok=False, conn=conn, err=str(e) or type(e).__name__)
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(PERIOD_S)


if __name__ == "__main__":
    main()
