#!/usr/bin/python3
"""preload_hold.py: long-lived connections, for connection caps.

  preload_hold.py serve thread|fork|dupfork HOST PORT
      socketserver (ThreadingTCPServer, or ForkingTCPServer: the parent
      closes its copy, the child serves; dupfork: the child also holds an
      os.dup() of the connection and closes it last).  Each connection is
      greeted with "hi\\n" and held until the client closes it.
  preload_hold.py hold HOST PORT N
      opens N connections one after the other, reads each greeting, prints
      {"ok": greeted, "reset": reset, "other": anything else} on one line,
      then holds every greeted connection until stdin closes.
"""
import json
import os
import socket
import socketserver
import sys


class Hold(socketserver.BaseRequestHandler):
    def handle(self):
        extra = os.dup(self.request.fileno()) if MODE == "dupfork" else -1
        self.request.sendall(b"hi\n")
        while self.request.recv(4096):
            pass
        if extra >= 0:
            os.close(extra)


class Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class Forking(socketserver.ForkingTCPServer):
    allow_reuse_address = True


def serve(host, port):
    cls = Threaded if MODE == "thread" else Forking
    if ":" in host:
        cls.address_family = socket.AF_INET6
    with cls((host, port), Hold) as srv:
        print("listening", flush=True)
        srv.serve_forever()


def hold(host, port, n):
    got, counts = [], {"ok": 0, "reset": 0, "other": 0, "timed_out": 0}
    for _ in range(n):
        try:
            # the reset may come before connect returns, or answer the
            # SYN itself (XDP's rst action: refused)
            s = socket.create_connection((host, port), timeout=5)
        except (ConnectionResetError, ConnectionRefusedError):
            counts["reset"] += 1
            continue
        except TimeoutError:
            # every SYN dropped (the drop action): refused, not an error
            counts["timed_out"] += 1
            continue
        try:
            if s.recv(3) == b"hi\n":
                counts["ok"] += 1
                got.append(s)
                continue
            counts["other"] += 1
        except ConnectionResetError:
            counts["reset"] += 1
        except OSError:
            counts["other"] += 1
        s.close()
    print(json.dumps(counts), flush=True)
    sys.stdin.read()
    for s in got:
        s.close()


if sys.argv[1] == "serve":
    MODE = sys.argv[2]
    serve(sys.argv[3], int(sys.argv[4]))
else:
    hold(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
