#!/usr/bin/env python3
"""Holds long-lived TCP connections for the connection-cap tests.

conn_client.py HOST PORT CONTROL: reads commands from the fifo CONTROL, one
a line, and answers each with a JSON line on stdout:
  open N [MS] tries N new connections one after the other (0.5 s
              timeout each, MS milliseconds apart), keeps those that
              connect, and reports how many connected, were refused (RST)
              or timed out
  close N     closes N of the connections held (a FIN each), oldest first
  count       how many are held
  quit        closes everything and exits
"""
import json
import socket
import sys
import time

# Half the kernel's initial SYN timeout (1 s, when it sends the SYN again):
# a SYN the limiter dropped is judged, and counted, again when it comes
# back, so a client that waited the full second raced its own kernel and,
# woken late on a busy machine, had its one attempt refused twice.  Closing
# the socket at 0.5 s cancels the retransmission with half a second to
# spare; a handshake the limiter lets through completes in the kernel,
# long before, whether or not this process is running.
CONNECT_TIMEOUT_S = 0.5


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
