#!/usr/bin/env python3
"""A/B of weft plugin binaries on one node, for a machine others also use.

  sudo bench/add_ab.py seq [--samples N] [--fill N] BIN...   # ADD+DEL pairs, binaries alternating
  sudo bench/add_ab.py par [--pods N] [--workers N] BIN      # N-way parallel ADD on a fresh node

seq: one node netns (uplink and default route, as bench/run.sh builds it)
and one database, filled with --fill pods by the first binary; then, per
sample, each binary (in alternating order) ADDs one pod, which it then
DELs. Every binary sees the same node, database and load. Per binary:
wall p50/p90/p99 of the ADD and of the DEL, and the plugin process's own CPU time
(user+sys from wait4) and minor page faults.

par: the parallel phase of bench/run.sh (a fresh node, 240 pods, 8
workers), plus where the machine's CPUs went meanwhile: the plugin
processes' CPU per ADD and their share of all CPUs, and idle/iowait from
/proc/stat. When idle is ~0, ADD/s = share x CPUs / CPU per ADD: the
throughput is what the plugin is given, not what a lock leaves.

Run under `chrt -f 50` to take the CPUs from other (CFS) work and get the
idle-machine numbers on a loaded one (docs/performance.md, issue 15).
Namespaces are named add-ab<pid>-*, all removed at the end; the root netns
is never changed.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time

PREFIX = f"add-ab{os.getpid()}"
CLONE_NEWNET = 0x40000000


def sh(cmd):
    subprocess.run(cmd, shell=True, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cleanup(data):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0]
        if name.startswith(PREFIX + "-"):
            sh(f"ip netns del {name}")
    sh(f"rm -rf --one-file-system {data}")


def make_node(data):
    n = f"{PREFIX}-node"
    sh(f"ip netns add {n}; ip -n {n} link set lo up; ip -n {n} link add up0 type veth peer name up1; "
       f"ip -n {n} addr add 192.0.2.1/24 dev up0; ip -n {n} link set up0 up; ip -n {n} link set up1 up; "
       f"ip -n {n} route add default via 192.0.2.254")
    os.makedirs(data, exist_ok=True)
    # This process (and so every plugin it starts) moves into the node.
    fd = os.open(f"/run/netns/{n}", os.O_RDONLY)
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        sys.exit("setns into the node failed")


def conf(data):
    return json.dumps({"cniVersion": "1.0.0", "name": "wbnet", "type": "weft", "mode": "routed",
                       "ranges": ["10.244.0.0/16"], "masquerade": True, "masqueradeBackend": "nftables",
                       "clusterCIDRs": ["10.244.0.0/16"], "dataDir": data}).encode()


def run(binary, cmd, cid, config):
    """Execs the plugin like a runtime; returns (wall ms, CPU ms, minor faults, exit status)."""
    env = {"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/run/netns/{PREFIX}-{cid}",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent",
           "CNI_ARGS": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid}"}
    r, w = os.pipe()
    o_r, o_w = os.pipe()
    t0 = time.perf_counter()
    pid = os.posix_spawn(binary, [binary], env, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0),
                                                             (os.POSIX_SPAWN_DUP2, o_w, 1),
                                                             (os.POSIX_SPAWN_DUP2, o_w, 2)])
    os.close(r)
    os.close(o_w)
    try:
        os.write(w, config)
    except BrokenPipeError:
        pass
    os.close(w)
    out = b""
    while chunk := os.read(o_r, 65536):
        out += chunk
    os.close(o_r)
    _, status, ru = os.wait4(pid, 0)
    if status != 0:
        print(f"{binary} {cmd} {cid} failed: {out[:300]!r}", file=sys.stderr)
    return (time.perf_counter() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_minflt, status


def seq(args, data):
    config = conf(data)
    for i in range(args.fill):
        sh(f"ip netns add {PREFIX}-f{i}")
        run(args.bins[0], "ADD", f"f{i}", config)
    for i in range(args.samples):
        for b in range(len(args.bins)):
            sh(f"ip netns add {PREFIX}-s{i}b{b}")
    time.sleep(1)
    res = {(verb, b): [] for verb in ("ADD", "DEL") for b in args.bins}
    for i in range(args.samples):
        order = list(enumerate(args.bins))
        for b, binary in (order if i % 2 == 0 else order[::-1]):
            res[("ADD", binary)].append(run(binary, "ADD", f"s{i}b{b}", config))
            res[("DEL", binary)].append(run(binary, "DEL", f"s{i}b{b}", config))
    for (verb, binary), rows in res.items():
        wall = sorted(r[0] for r in rows)
        pct = lambda q: wall[min(len(wall) - 1, int(len(wall) * q))]
        print(json.dumps({"verb": verb, "binary": binary, "n": len(wall), "p50_ms": round(statistics.median(wall), 2),
                          "p90_ms": round(pct(0.9), 2), "p99_ms": round(pct(0.99), 2),
                          "cpu_ms_mean": round(statistics.mean(r[1] for r in rows), 2),
                          "minflt_p50": statistics.median(r[2] for r in rows),
                          "failed": sum(1 for r in rows if r[3] != 0)}))


def par(args, data):
    config = conf(data)
    binary = args.bins[0]
    for i in range(args.pods):
        sh(f"ip netns add {PREFIX}-p{i}")
    time.sleep(1)
    res = [None] * args.pods
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= args.pods:
                return
            res[i] = run(binary, "ADD", f"p{i}", config)

    stat = lambda: [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    s0, t0 = stat(), time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    d = [b - a for a, b in zip(s0, stat())]
    total = sum(d)
    lat = sorted(r[0] for r in res)
    cpu = [r[1] for r in res]
    ncpu = os.cpu_count()
    print(json.dumps({"binary": binary, "add_per_s": round(args.pods / wall, 1), "p50_ms": round(statistics.median(lat), 2),
                      "p99_ms": round(lat[int(len(lat) * 0.99)], 2),
                      "plugin_cpu_ms_per_add": round(statistics.mean(cpu), 2),
                      "plugin_cpu_share": round(sum(cpu) / 1e3 / (wall * ncpu), 3),
                      "idle": round(d[3] / total, 3), "iowait": round(d[4] / total, 3),
                      "failed": sum(1 for r in res if r[3] != 0),
                      "loadavg": open("/proc/loadavg").read().split()[0]}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["seq", "par"])
    p.add_argument("bins", nargs="+")
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--fill", type=int, default=10)
    p.add_argument("--pods", type=int, default=240)
    p.add_argument("--workers", type=int, default=8)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/add_ab.py: run as root (it creates network namespaces)")
    args.bins = [os.path.abspath(b) for b in args.bins]
    data = f"/tmp/{PREFIX}-data"
    try:
        make_node(data)
        (seq if args.mode == "seq" else par)(args, data)
    finally:
        cleanup(data)


if __name__ == "__main__":
    main()
