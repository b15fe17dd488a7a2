#!/usr/bin/env python3
"""A real client whose SYN is retransmitted while a blind RST flood runs.

blind_rst.py IFACE DST_MAC DST_ADDR DPORT PREFIX LPORT COUNT: connects from
this host's own address (PREFIX's, as its route picks it) and local port
LPORT to DST_ADDR:DPORT, given 5 s; 0.2 s after the connect starts (the
server's path has lost the first SYN, so the client's kernel retransmits
it 1 s after it) sends, out of IFACE through an AF_PACKET socket, COUNT
RSTs from random forged addresses of PREFIX and random ports to
DST_ADDR:DPORT, and among them every forged 4-tuple of PREFIX's first
addresses whose end lands at the same place of rlgate's flow_ends as the
client's own flow (rl_flow_mix() in bpf/rlgate.h), with another
fingerprint: what a flood of about 130,000 RSTs a second does to every
place, sent where it matters.  None belongs to a socket of the server.
Prints one JSON line: connected, forged (RSTs sent), at_place (of them at
the client's place).
"""
import ipaddress
import json
import random
import socket
import struct
import sys
import threading
import time

from syn_flood import ip_packet

M64 = (1 << 64) - 1


def mix(src, dst, sport, dport):
    """rl_flow_mix() of the flow's key (struct rl_flow, ISN left out)."""
    fam = src.version
    b = src.packed.ljust(16, b"\0") + dst.packed.ljust(16, b"\0") + \
        struct.pack("!HH", sport, dport) + b"\0" * 4 + struct.pack("<II", fam, 0)
    w = struct.unpack("<6Q", b)
    ports, = struct.unpack_from("<I", b, 32)
    h = (w[0] * 0x9e3779b97f4a7c15 + w[1] * 0xc2b2ae3d27d4eb4f +
         w[2] * 0x165667b19e3779f9 + w[3] * 0xd6e8feb86659fd93 +
         ports * 0xff51afd7ed558ccd + w[5]) & M64
    h ^= h >> 29
    return (h * 0xbf58476d1ce4e5b9) & M64


def place_fp(h):
    fp = h & 0xffffffff
    return h >> 48, fp if fp not in (0, 0xffffffff) else 1


def rst(src, dst, sport, dport):
    """The IP packet of a RST, checksums filled in."""
    return ip_packet(src, dst, struct.pack("!HHIIBBHHH", sport, dport,
                                           random.getrandbits(32), 0, 5 << 4,
                                           0x04, 0, 0, 0))


def own_address(dst, dport):
    """The source address the route to dst gives this host."""
    s = socket.socket(socket.AF_INET6 if dst.version == 6 else socket.AF_INET,
                      socket.SOCK_DGRAM)
    s.connect((str(dst), dport))
    a = ipaddress.ip_address(s.getsockname()[0])
    s.close()
    return a


def main():
    iface, dst_mac, dst = sys.argv[1], sys.argv[2], ipaddress.ip_address(sys.argv[3])
    dport, net = int(sys.argv[4]), ipaddress.ip_network(sys.argv[5])
    lport, count = int(sys.argv[6]), int(sys.argv[7])
    me = own_address(dst, dport)
    place, fp = place_fp(mix(me, dst, lport, dport))

    hosts = [net[i] for i in range(1, 9) if net[i] != me]
    frames = []
    for a in hosts:
        for port in range(1024, 65536):
            p, f = place_fp(mix(a, dst, port, dport))
            if p == place and f != fp:
                frames.append(rst(a, dst, port, dport))
    at_place = len(frames)
    while len(frames) < count:
        a = net[random.randrange(1, net.num_addresses - 1)]
        if a != me:
            frames.append(rst(a, dst, random.randrange(1024, 65536), dport))
    random.shuffle(frames)

    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    eth = bytes.fromhex(dst_mac.replace(":", "")) + s.getsockname()[4] + \
        struct.pack("!H", 0x0800 if dst.version == 4 else 0x86DD)

    result = {}

    def client():
        c = socket.socket(socket.AF_INET6 if dst.version == 6 else socket.AF_INET,
                          socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        c.settimeout(5)
        try:
            c.bind(("", lport))
            c.connect((str(dst), dport))
            result["connected"] = True
        except OSError:
            result["connected"] = False
        finally:
            c.close()

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.2)
    for f in frames:
        s.send(eth + f)
    t.join()
    print(json.dumps({"connected": result["connected"], "forged": len(frames),
                      "at_place": at_place}))


if __name__ == "__main__":
    main()
