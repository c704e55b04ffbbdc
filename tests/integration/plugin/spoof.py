#!/usr/bin/python3
"""What a pod with NET_RAW or NET_ADMIN tries against its neighbours (issue 22).

Every network namespace it enters is one the test created; it sends only to
addresses inside them. Modes:

  udp  --recv-ns NS --dst ADDR --send-ns NS --src ADDR [--raw]
       binds a UDP socket on ADDR inside --recv-ns, then, inside --send-ns,
       sends --count datagrams to it from --src: with a socket bound to
       --src (the address must be on the sender's interface: NET_ADMIN), or
       with --raw as a hand-built IP/UDP packet on a raw socket (NET_RAW
       only; --src need not be anywhere). Prints {"sent": n, "received": n,
       "sources": [...]} after --wait seconds of silence.
  garp --send-ns NS --ip ADDR
       broadcasts a gratuitous ARP reply from the sender's eth0 claiming ADDR
       for the sender's MAC (AF_PACKET).
  na   --send-ns NS --ip ADDR
       sends an unsolicited, overriding IPv6 neighbour advertisement to
       ff02::1 claiming ADDR for the sender's MAC.
  ra   --send-ns NS --ip PREFIX
       sends a router advertisement to ff02::1 from the sender's link-local
       address: a default router (lifetime 1800 s) and PREFIX/64 for
       autoconfiguration.
"""
import argparse
import ctypes
import fcntl
import json
import os
import socket
import struct
import sys
import time

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


def cmd_udp(a):
    v6 = ":" in a.dst
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    enter(a.recv_ns)
    r = socket.socket(fam, socket.SOCK_DGRAM)
    r.bind((a.dst, a.port))
    enter(a.send_ns)
    sent = 0
    if a.raw:
        s = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_RAW)
        for i in range(a.count):
            s.sendto(udp_packet(a.src, a.dst, 40000 + i, a.port, b"forged %d" % i), (a.dst, 0))
            sent += 1
    else:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((a.src, 0))
        for i in range(a.count):
            s.sendto(b"bound %d" % i, (a.dst, a.port))
            sent += 1
    sources = []
    r.settimeout(a.wait)
    try:
        while True:
            _, peer = r.recvfrom(2048)
            sources.append(peer[0])
    except socket.timeout:
        pass
    print(json.dumps({"sent": sent, "received": len(sources), "sources": sorted(set(sources))}))


def own_mac(ifname):
    # SIOCGIFHWADDR on a socket of the current netns (/sys shows the netns
    # it was mounted in, not this one).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return fcntl.ioctl(s.fileno(), 0x8927, struct.pack("256s", ifname.encode()))[18:24]


def cmd_garp(a):
    enter(a.send_ns)
    mac = own_mac("eth0")
    ip = socket.inet_aton(a.ip)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("eth0", 0))
    # ARP reply, sender = target = the claimed address, to everyone.
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + mac + ip + b"\xff" * 6 + ip
    for _ in range(a.count):
        s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
        time.sleep(0.05)
    print(json.dumps({"sent": a.count}))


def cmd_na(a):
    enter(a.send_ns)
    mac = own_mac("eth0")
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
    ifindex = socket.if_nametoindex("eth0")
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
    # type 136, code 0, checksum (the kernel's), flags: override; the target;
    # option 2 (target link-layer address), length 1.
    na = struct.pack("!BBHI", 136, 0, 0, 0x20000000) + socket.inet_pton(socket.AF_INET6, a.ip) + b"\x02\x01" + mac
    for _ in range(a.count):
        s.sendto(na, ("ff02::1", 0, 0, ifindex))
        time.sleep(0.05)
    print(json.dumps({"sent": a.count}))


def cmd_ra(a):
    enter(a.send_ns)
    mac = own_mac("eth0")
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    ifindex = socket.if_nametoindex("eth0")
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
    # type 134, code 0, checksum, hop limit 64, flags 0, router lifetime,
    # reachable, retrans; source link-layer option; prefix information
    # (on-link and autonomous, valid/preferred lifetimes).
    ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0) + b"\x01\x01" + mac
    prefix = socket.inet_pton(socket.AF_INET6, a.ip)
    ra += struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + prefix
    for _ in range(a.count):
        s.sendto(ra, ("ff02::1", 0, 0, ifindex))
        time.sleep(0.05)
    print(json.dumps({"sent": a.count}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["udp", "garp", "na", "ra"])
    p.add_argument("--recv-ns")
    p.add_argument("--send-ns", required=True)
    p.add_argument("--dst")
    p.add_argument("--src")
    p.add_argument("--ip")
    p.add_argument("--port", type=int, default=7777)
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument("--raw", action="store_true")
    a = p.parse_args()
    {"udp": cmd_udp, "garp": cmd_garp, "na": cmd_na, "ra": cmd_ra}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
