#!/usr/bin/env python3
"""Holds long-lived TCP connections for the connection-cap tests.

conn_client.py HOST PORT CONTROL: reads commands from the fifo CONTROL, one
a line, and answers each with a JSON line on stdout:
  open N [MS] tries N new connections one after the other (0.5 s
              timeout each, MS milliseconds apart), keeps those that
              connect, and reports how many connected, were refused (RST)
              or timed out
  close N     closes N of the connections held (a FIN each), oldest first
  abort N     closes N of the connections held with a RST each (SO_LINGER
              0: the kernel's RST, at the sequence number the server
              expects), oldest first
  forge N     sends, for each of the first N connections held, the segments
              a hostile client forges on its own 4-tuple (scapy, raw IP):
              a SYN with a new ISN (a challenge ACK), then RSTs the server
              ignores (one past the sequence number it
              expects: inside the window, a challenge ACK; 2^30 past it;
              one before it) and a FIN|ACK 1000 bytes ahead (out of order);
              reports "forged"
  forgesyn N  the SYN with a new ISN alone, for each of the first N
  spoof N     sends N SYNs (scapy, raw IP) from the other addresses of the
              client's /28, which no host holds: the server's SYN-ACKs go
              nowhere, and it keeps a request socket of each for a minute;
              reports "forged"
  ask         sends a request on every connection held and counts the
              answers ("answered"): the server still holds them
  count       how many are held
  quit        closes everything and exits
"""
import json
import socket
import struct
import sys
import time

TCP_REPAIR = 19
TCP_REPAIR_QUEUE = 20
TCP_QUEUE_SEQ = 21
TCP_SEND_QUEUE = 2
TCP_REPAIR_OFF_NO_WP = -1

# Half the kernel's initial SYN timeout (1 s, when it sends the SYN again):
# a SYN the limiter dropped is judged, and counted, again when it comes
# back, so a client that waited the full second raced its own kernel and,
# woken late on a busy machine, had its one attempt refused twice.  Closing
# the socket at 0.5 s cancels the retransmission with half a second to
# spare; a handshake the limiter lets through completes in the kernel,
# long before, whether or not this process is running.
CONNECT_TIMEOUT_S = 0.5


def snd_nxt(s):
    """The next sequence number socket s sends (what the server expects),
    read in repair mode (root)."""
    s.setsockopt(socket.SOL_TCP, TCP_REPAIR, 1)
    try:
        s.setsockopt(socket.SOL_TCP, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE)
        return s.getsockopt(socket.SOL_TCP, TCP_QUEUE_SEQ) & 0xffffffff
    finally:
        s.setsockopt(socket.SOL_TCP, TCP_REPAIR, TCP_REPAIR_OFF_NO_WP)


def forge(held, syn_only=False):
    """The forged segments of each connection in held (the SYN alone if
    syn_only); how many were sent."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.sendrecv import send

    n = 0
    for s in held:
        src, sport = s.getsockname()[:2]
        dst, dport = s.getpeername()[:2]
        seq = snd_nxt(s)
        l3 = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)
        # the SYN first: a limiter that let it take a new place would
        # otherwise have it stand in for a place a later RST freed
        segs = [TCP(sport=sport, dport=dport, flags="S",
                    seq=(seq + 12345678) & 0xffffffff, window=64240)]
        if not syn_only:
            segs += [TCP(sport=sport, dport=dport, flags="R",
                         seq=(seq + off) & 0xffffffff)
                     for off in (1, 1 << 30, -1)]
            segs.append(TCP(sport=sport, dport=dport, flags="FA",
                            seq=(seq + 1000) & 0xffffffff, ack=1))
        for t in segs:
            send(l3 / t, verbose=False)
            n += 1
    return n


def spoof(host, port, n):
    """N SYNs to host:port from the addresses of this client's /28 (IPv4)
    other than its own, from random ports; how many were sent."""
    import ipaddress
    import random
    from scapy.layers.inet import IP, TCP
    from scapy.sendrecv import send

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((host, port))
    own = ipaddress.ip_address(probe.getsockname()[0])
    probe.close()
    net = ipaddress.ip_network(f"{own}/28", strict=False)
    srcs = [str(a) for a in net.hosts() if a != own]
    segs = [IP(src=srcs[i % len(srcs)], dst=host) /
            TCP(sport=random.randint(20000, 60000), dport=port, flags="S",
                seq=random.getrandbits(32), window=64240)
            for i in range(n)]
    send(segs, verbose=False)
    return len(segs)


def ask(held):
    """How many connections in held answer a request."""
    answered = 0
    for s in held:
        try:
            s.settimeout(2)
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            if s.recv(4096).startswith(b"HTTP/1.1 200"):
                answered += 1
        except OSError:
            pass
    return answered


def main():
    host, port, control = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held = []
    with open(control) as ctl:
        for line in ctl:
            words = line.split()
            if not words:
                continue
            cmd, n = words[0], int(words[1]) if len(words) > 1 else 0
            gap = int(words[2]) / 1000 if len(words) > 2 else 0
            out = {"cmd": cmd}
            if cmd == "open":
                out.update(connected=0, refused=0, timed_out=0, failed=0)
                for i in range(n):
                    if i and gap:
                        time.sleep(gap)
                    s = socket.socket(family, socket.SOCK_STREAM)
                    s.settimeout(CONNECT_TIMEOUT_S)
                    try:
                        s.connect((host, port))
                        held.append(s)
                        out["connected"] += 1
                    except ConnectionRefusedError:
                        out["refused"] += 1
                        s.close()
                    except socket.timeout:
                        out["timed_out"] += 1
                        s.close()
                    except OSError:
                        out["failed"] += 1
                        s.close()
            elif cmd == "close":
                for s in held[:n]:
                    s.close()
                held = held[n:]
            elif cmd == "abort":
                for s in held[:n]:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
                    s.close()
                held = held[n:]
            elif cmd in ("forge", "forgesyn"):
                out["forged"] = forge(held[:n], cmd == "forgesyn")
            elif cmd == "spoof":
                out["forged"] = spoof(host, port, n)
            elif cmd == "ask":
                out["answered"] = ask(held)
            elif cmd == "quit":
                for s in held:
                    s.close()
                print(json.dumps(out), flush=True)
                return 0
            out["held"] = len(held)
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
