#!/usr/bin/python3
"""hostile_client.py: opens TCP connections to a server the way a hostile
client would - SYNs cut into fragments, behind extension-header chains, or
replayed after a reset - and completes every handshake the server answers,
so that each SYN-ACK it sees is a connection the server accepts.

Used by tests/e2e/hostile.bats.  Runs in the attacker's network namespace
and sends from addresses of that host's subnet which are NOT assigned to its
interface: its own kernel then ignores the server's SYN-ACKs (rather than
answering them with a RST) and this program answers them instead, reading
frames at layer 2.  The server needs a permanent neighbour entry for each
such address, pointing at the attacker's MAC address.

    hostile_client.py --iface eth0 --dst-mac MAC --dst4 A.B.C.D --dst6 X::Y
        [--rate N] [--duration S] [--count N] SHAPE:SRC:DPORT...

Each SHAPE runs from its own SRC to DPORT on the server (dst4 or dst6 by
SRC's family), all of them interleaved, each making at most N attempts per
second, COUNT in all, for at most S seconds.  Shapes:

  plain         an ordinary SYN (IPv4 or IPv6)
  tiny4         IPv4: the first fragment carries 8 bytes of TCP (ports and
                sequence number), the second the rest (flags included)
  overlap4      IPv4: a first fragment whose TCP header says ACK, then a
                fragment at offset 8 that rewrites the flags to SYN
  overlap4-rev  the same two fragments, the second one sent first
  dstopts-N     IPv6: SYN behind N destination-options headers
  mix           IPv6: hop-by-hop, routing (type 0, no segments left) and
                five destination-options headers, then the SYN
  atomic        IPv6: hop-by-hop, two destination options, an atomic
                fragment header (offset 0, no more fragments), three more
                destination options, then the SYN
  frag6-notcp   IPv6: the first fragment holds a destination-options header
                only; the TCP header is in the second fragment (offset 8)
  frag6-tiny    IPv6: the first fragment carries 8 bytes of TCP, the second
                the rest
  replay        the same SYNs (FLOWS 4-tuples, each with a fixed ISN) sent
                again and again: each answered one is acknowledged, then
                reset by this program, then replayed

Prints one JSON object: "elapsed" (seconds from the first attempt to the
last), "window" (seconds from the first attempt to the last attempt or the
last SYN-ACK received, whichever came later: the server answered only SYNs
that its limiter judged within it, however long the machine stalled
between making an attempt and sending it) and per shape "attempts"
(connection attempts: datagrams carrying a SYN), "frames" (frames sent for
them) and "synacks" (distinct SYN-ACKs received: connections the server
opened).
"""

import argparse
import ipaddress
import json
import math
import random
import re
import socket
import sys
import threading
import time

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import (IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment,
                                IPv6ExtHdrHopByHop, IPv6ExtHdrRouting)
from scapy.layers.l2 import Ether
from scapy.packet import Raw

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
REPLAY_FLOWS = 16
REPLAY_WAIT = 0.3	# seconds for a SYN-ACK, then for the server's FIN
TAIL = 0.5		# seconds to answer SYN-ACKs after the last attempt
SYN_OPTS = [("MSS", 1460)]
V4_SHAPES = ("tiny4", "overlap4", "overlap4-rev")
V6_SHAPES = ("mix", "atomic", "frag6-notcp", "frag6-tiny")


def tcp_bytes(src, dst, sport, dport, seq, flags):
    """A TCP header with the checksum of the pseudo-header src -> dst."""
    l3 = IP(src=src, dst=dst) if ":" not in src else IPv6(src=src, dst=dst)
    raw = bytes(l3 / TCP(sport=sport, dport=dport, seq=seq, flags=flags,
                         window=64240, options=SYN_OPTS))
    return raw[20:] if ":" not in src else raw[40:]


def ip4_frag(src, dst, ipid, off8, more, payload):
    return IP(src=src, dst=dst, id=ipid, proto=6, frag=off8,
              flags="MF" if more else 0) / Raw(payload)


def ip6_frag(src, dst, fid, off8, more, nh, payload):
    return (IPv6(src=src, dst=dst) /
            IPv6ExtHdrFragment(nh=nh, offset=off8, m=int(more), id=fid) /
            Raw(payload))


CHAINS = {}


def syn_behind(src, dst, sport, dport, seq, shape, headers):
    """An IPv6 SYN behind HEADERS (built once per SHAPE: scapy is slow
    at long chains)."""
    if shape not in CHAINS:
        pkt = IPv6()
        for h in headers():
            pkt = pkt / h
        raw = bytes(pkt / TCP(options=SYN_OPTS))
        CHAINS[shape] = (raw[6], raw[40:-24])
    nh, chain = CHAINS[shape]
    return [IPv6(src=src, dst=dst, nh=nh) /
            Raw(chain + tcp_bytes(src, dst, sport, dport, seq, "S"))]


def frames(shape, src, dst, sport, dport, seq, fid):
    """The IP packets of one connection attempt of SHAPE, in sending order."""
    if shape in ("plain", "replay"):
        l3 = IP(src=src, dst=dst) if ":" not in src else IPv6(src=src, dst=dst)
        return [l3 / TCP(sport=sport, dport=dport, seq=seq, flags="S",
                         window=64240, options=SYN_OPTS)]
    syn = tcp_bytes(src, dst, sport, dport, seq, "S")
    if shape == "tiny4":
        return [ip4_frag(src, dst, fid, 0, True, syn[:8]),
                ip4_frag(src, dst, fid, 1, False, syn[8:])]
    if shape in ("overlap4", "overlap4-rev"):
        ack = tcp_bytes(src, dst, sport, dport, seq, "A")
        pair = [ip4_frag(src, dst, fid, 0, True, ack),
                ip4_frag(src, dst, fid, 1, False, syn[8:])]
        return pair if shape == "overlap4" else pair[::-1]
    if shape.startswith("dstopts-"):
        n = int(shape.split("-", 1)[1])
        return syn_behind(src, dst, sport, dport, seq, shape,
                          lambda: [IPv6ExtHdrDestOpt() for _ in range(n)])
    if shape == "mix":
        return syn_behind(src, dst, sport, dport, seq, shape,
                          lambda: [IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt(),
                                   IPv6ExtHdrRouting(type=0, segleft=0)] +
                          [IPv6ExtHdrDestOpt() for _ in range(4)])
    if shape == "atomic":
        return syn_behind(src, dst, sport, dport, seq, shape,
                          lambda: [IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt(),
                                   IPv6ExtHdrDestOpt(),
                                   IPv6ExtHdrFragment(offset=0, m=0, id=fid)] +
                          [IPv6ExtHdrDestOpt() for _ in range(3)])
    if shape == "frag6-notcp":
        opts = bytes(IPv6ExtHdrDestOpt(nh=6))
        return [ip6_frag(src, dst, fid, 0, True, 60, opts),
                ip6_frag(src, dst, fid, 1, False, 60, syn)]
    if shape == "frag6-tiny":
        return [ip6_frag(src, dst, fid, 0, True, 6, syn[:8]),
                ip6_frag(src, dst, fid, 1, False, 6, syn[8:])]
    raise ValueError(shape)


class Attack:
    """One SHAPE from one source address to one port."""

    def __init__(self, spec, dst4, dst6):
        try:
            self.shape, rest = spec.split(":", 1)
            self.src, port = rest.rsplit(":", 1)
            self.dport = int(port)
            v6 = ipaddress.ip_address(self.src).version == 6
        except ValueError:
            sys.exit(f"Error: bad attack '{spec}': expected SHAPE:SRC:DPORT")
        if self.shape not in ("plain", "replay") and \
                self.shape not in (V6_SHAPES if v6 else V4_SHAPES) and \
                not (v6 and re.fullmatch(r"dstopts-([1-9]|[1-3][0-9])", self.shape)):
            sys.exit(f"Error: bad attack '{spec}': no shape '{self.shape}' "
                     f"for IPv{6 if v6 else 4}")
        self.dst = dst6 if v6 else dst4
        self.attempts = 0
        self.frames = 0
        self.synacks = set()
        # replay: sport -> [isn, state, since]; state idle, syn or acked
        self.flows = {}
        if self.shape == "replay":
            for sport in random.sample(range(20000, 60000), REPLAY_FLOWS):
                self.flows[sport] = [random.getrandbits(32), "idle", 0.0]


class Attacker:
    def __init__(self, args):
        self.iface = args.iface
        self.dst_mac = args.dst_mac
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                  socket.htons(ETH_P_ALL))
        # room for every reply of a run while frames are being built
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.sock.bind((args.iface, 0))
        self.mac = ":".join(f"{b:02x}" for b in self.sock.getsockname()[4][:6])
        self.attacks = [Attack(s, args.dst4, args.dst6) for s in args.attack]
        self.by_src = {a.src: a for a in self.attacks}
        self.dst_bytes = {ipaddress.ip_address(a.src).packed
                          for a in self.attacks}
        self.lock = threading.Lock()
        self.stop = False
        self.last_synack = None
        self.ports = iter(random.sample(range(1024, 65536), 64511))

    def send(self, pkt):
        self.sock.send(bytes(Ether(src=self.mac, dst=self.dst_mac) / pkt))

    def reply(self, a, sport, flags, seq, ack):
        l3 = IP(src=a.src, dst=a.dst) if ":" not in a.src else \
            IPv6(src=a.src, dst=a.dst)
        self.send(l3 / TCP(sport=sport, dport=a.dport, flags=flags, seq=seq,
                           ack=ack, window=64240))

    def ours(self, frame):
        """Whether FRAME is IPv4 or IPv6 TCP to one of the attack sources."""
        if frame[12:14] == b"\x08\x00":
            return frame[23] == 6 and frame[30:34] in self.dst_bytes
        if frame[12:14] == b"\x86\xdd":
            return frame[20] == 6 and frame[38:54] in self.dst_bytes
        return False

    def listen(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            if addr[2] == PACKET_OUTGOING or not self.ours(data):
                continue
            eth = Ether(data)
            l3 = eth.getlayer(IP) or eth.getlayer(IPv6)
            tcp = eth.getlayer(TCP)
            if l3 is None or tcp is None:
                continue
            a = self.by_src.get(l3.dst)
            if a is None or tcp.sport != a.dport:
                continue
            with self.lock:
                self.answer(a, tcp)

    def answer(self, a, tcp):
        f = int(tcp.flags)
        flow = a.flows.get(tcp.dport)
        if f & 0x12 == 0x12:	# SYN-ACK: complete the handshake
            a.synacks.add((tcp.dport, tcp.seq))
            self.last_synack = time.monotonic()
            self.reply(a, tcp.dport, "A", tcp.ack, tcp.seq + 1)
            if flow is not None and flow[1] == "syn":
                flow[1], flow[2] = "acked", time.monotonic()
        elif f & 0x01 and flow is not None and flow[1] == "acked":
            # the server accepted and closed: reset, then replay
            self.reset(a, tcp.dport, flow)

    def reset(self, a, sport, flow):
        self.reply(a, sport, "R", (flow[0] + 1) & 0xffffffff, 0)
        flow[1] = "idle"

    def attempt(self, a, now):
        """Sends one connection attempt of A, if it has one to make now."""
        if a.shape == "replay":
            with self.lock:
                for sport, flow in a.flows.items():
                    if flow[1] != "idle" and now - flow[2] > REPLAY_WAIT:
                        self.reset(a, sport, flow)
                idle = [p for p, f in a.flows.items() if f[1] == "idle"]
                if not idle:
                    return False
                sport = idle[a.attempts % len(idle)]
                flow = a.flows[sport]
                flow[1], flow[2] = "syn", now
                pkts = frames("replay", a.src, a.dst, sport, a.dport, flow[0], 0)
        else:
            pkts = frames(a.shape, a.src, a.dst, next(self.ports), a.dport,
                          random.getrandbits(32), random.getrandbits(16))
        for p in pkts:
            self.send(p)
        a.attempts += 1
        a.frames += len(pkts)
        return True

    def run(self, rate, duration, count):
        listener = threading.Thread(target=self.listen, daemon=True)
        listener.start()
        start = time.monotonic()
        first = last = None
        n = 0
        # a replay with no idle flow at its turn makes its attempt later
        while any(a.attempts < count for a in self.attacks):
            due = start + n / rate
            now = time.monotonic()
            if max(due, now) - start > duration:
                break
            if due > now:
                time.sleep(due - now)
                now = time.monotonic()
            for a in self.attacks:
                if a.attempts < count and self.attempt(a, now):
                    first = first if first is not None else now
                    last = now
            n += 1
        time.sleep(TAIL)
        with self.lock:
            for a in self.attacks:
                for sport, flow in a.flows.items():
                    if flow[1] == "acked":
                        self.reset(a, sport, flow)
        self.stop = True
        listener.join()
        if first is not None and self.last_synack is not None:
            last_seen = max(last, self.last_synack)
        else:
            last_seen = last
        return {
            "elapsed": round(last - first, 3) if first is not None else 0,
            # rounded up: a bound computed from it never falls short
            "window": math.ceil((last_seen - first) * 1000) / 1000
                      if first is not None else 0,
            "attacks": [{"shape": a.shape, "src": a.src, "dport": a.dport,
                         "attempts": a.attempts, "frames": a.frames,
                         "synacks": len(a.synacks)} for a in self.attacks],
        }


def main():
    p = argparse.ArgumentParser(
        description="Crafted TCP connection attempts; see the file's header.")
    p.add_argument("--iface", required=True)
    p.add_argument("--dst-mac", required=True)
    p.add_argument("--dst4", required=True)
    p.add_argument("--dst6", required=True)
    p.add_argument("--rate", type=float, default=50,
                   help="attempts per second per shape (default 50)")
    p.add_argument("--duration", type=float, default=2,
                   help="seconds to attack for (default 2)")
    p.add_argument("--count", type=int, default=100,
                   help="attempts per shape at most (default 100)")
    p.add_argument("attack", nargs="+", metavar="SHAPE:SRC:DPORT")
    args = p.parse_args()
    if args.rate <= 0 or args.duration <= 0 or args.count <= 0:
        sys.exit("Error: --rate, --duration and --count must be > 0")
    print(json.dumps(Attacker(args).run(args.rate, args.duration, args.count)))


if __name__ == "__main__":
    main()
