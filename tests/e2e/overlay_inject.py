#!/usr/bin/python3
"""What a host on the underlay tries against the overlay (issue 22 §2).

Every network namespace it enters is one the test created; it sends only to
addresses inside them. One mode:

  vxlan --recv-ns NS --dst ADDR --send-ns NS --to NODE --mac MAC --src ADDR
        [--outer-src ADDR] [--vxlan-port 8472] [--vni 1]
        binds a UDP socket on ADDR (a pod's address) inside --recv-ns, then,
        inside --send-ns, wraps --count UDP datagrams from --src to it in
        VXLAN (inner Ethernet to MAC, the receiving node's VTEP) and sends
        them to NODE's VXLAN port: from an ordinary UDP socket (the outer
        source is the sender's own address: no privilege needed), or with
        --outer-src from a raw socket with that outer source (NET_RAW).
        Prints {"sent": n, "received": n, "sources": [...]} after --wait
        seconds of silence.

What a pod tries against its node (§4):

  localhost --recv-ns NODE --send-ns POD --src ADDR --mac MAC
        binds a UDP socket on 127.0.0.1 inside NODE, then, inside POD, sends
        --count IPv4/UDP frames from ADDR to 127.0.0.1 out of eth0 to MAC
        (the node's side of the pod's veth) on an AF_PACKET socket (NET_RAW).
        Prints the same JSON.
"""
import argparse
import ctypes
import fcntl
import json
import os
import random
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "setns " + path + ": " + os.strerror(err))
    finally:
        os.close(fd)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def udp_packet(src, dst, sport, dport, payload):
    """An IPv4 or IPv6 header and a UDP datagram with valid checksums."""
    v6 = ":" in dst
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    s, d = socket.inet_pton(fam, src), socket.inet_pton(fam, dst)
    length = 8 + len(payload)
    if v6:
        pseudo = s + d + struct.pack("!IxxxB", length, socket.IPPROTO_UDP)
    else:
        pseudo = s + d + struct.pack("!xBH", socket.IPPROTO_UDP, length)
    udp = struct.pack("!HHHH", sport, dport, length, 0) + payload
    c = checksum(pseudo + udp) or 0xFFFF
    udp = struct.pack("!HHHH", sport, dport, length, c) + payload
    if v6:
        return struct.pack("!IHBB", 6 << 28, length, socket.IPPROTO_UDP, 64) + s + d + udp
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0x1234, 0, 64, socket.IPPROTO_UDP, 0, s, d)
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return hdr + udp


def vxlan_payload(a, i):
    """VXLAN header and inner Ethernet frame carrying one forged datagram."""
    inner = udp_packet(a.src, a.dst, 40000 + i, a.port, b"vxlan %d" % i)
    ethertype = 0x86DD if ":" in a.dst else 0x0800
    dst_mac = bytes(int(x, 16) for x in a.mac.split(":"))
    src_mac = b"\x02" + bytes(random.randrange(256) for _ in range(5))  # any MAC the sender likes
    vxlan = struct.pack("!II", 0x08000000, a.vni << 8)
    return vxlan + dst_mac + src_mac + struct.pack("!H", ethertype) + inner


def cmd_vxlan(a):
    v6 = ":" in a.dst
    enter(a.recv_ns)
    r = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    r.bind((a.dst, a.port))
    enter(a.send_ns)
    outer6 = ":" in a.to
    ofam = socket.AF_INET6 if outer6 else socket.AF_INET
    sent = 0
    if a.outer_src:
        s = socket.socket(ofam, socket.SOCK_RAW, socket.IPPROTO_RAW)
        for i in range(a.count):
            s.sendto(udp_packet(a.outer_src, a.to, 50000 + i, a.vxlan_port, vxlan_payload(a, i)), (a.to, 0))
            sent += 1
    else:
        s = socket.socket(ofam, socket.SOCK_DGRAM)
        for i in range(a.count):
            s.sendto(vxlan_payload(a, i), (a.to, a.vxlan_port))
            sent += 1
    sources = receive(r, a)
    print(json.dumps({"sent": sent, "received": len(sources), "sources": sorted(set(sources))}))


def receive(r, a):
    sources = []
    r.settimeout(a.wait)
    try:
        while True:
            _, peer = r.recvfrom(2048)
            sources.append(peer[0])
    except socket.timeout:
        pass
    return sources


def cmd_localhost(a):
    enter(a.recv_ns)
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.bind(("127.0.0.1", a.port))
    enter(a.send_ns)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as q:
        own = fcntl.ioctl(q.fileno(), 0x8927, struct.pack("256s", b"eth0"))[18:24]
    dst_mac = bytes(int(x, 16) for x in a.mac.split(":"))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("eth0", 0))
    sent = 0
    for i in range(a.count):
        s.send(dst_mac + own + b"\x08\x00" + udp_packet(a.src, "127.0.0.1", 40000 + i, a.port, b"lo %d" % i))
        sent += 1
    sources = receive(r, a)
    print(json.dumps({"sent": sent, "received": len(sources), "sources": sorted(set(sources))}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["vxlan", "localhost"])
    p.add_argument("--recv-ns", required=True)
    p.add_argument("--send-ns", required=True)
    p.add_argument("--dst")
    p.add_argument("--src", required=True)
    p.add_argument("--to")
    p.add_argument("--mac", required=True)
    p.add_argument("--outer-src")
    p.add_argument("--port", type=int, default=7777)
    p.add_argument("--vxlan-port", type=int, default=8472)
    p.add_argument("--vni", type=int, default=1)
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--wait", type=float, default=1.0)
    a = p.parse_args()
    {"vxlan": cmd_vxlan, "localhost": cmd_localhost}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
