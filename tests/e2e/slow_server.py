#!/usr/bin/env python3
"""A deliberately slow server for the shedding e2e: listens on ADDR:PORT
with a small backlog and accepts one connection every DELAY seconds, until
SIGTERM; then prints, as JSON, how many it accepted from each source
address.  Prints 'listening' on stderr once it listens."""
import json
import signal
import socket
import sys
import time

addr, port, backlog, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
by_source = {}
running = True


def stop(_sig, _frame):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(backlog)
s.settimeout(0.1)
print("listening", file=sys.stderr, flush=True)
while running:
    try:
        c, peer = s.accept()
    except (socket.timeout, InterruptedError):
        continue
    by_source[peer[0]] = by_source.get(peer[0], 0) + 1
    c.close()
    time.sleep(delay)
print(json.dumps(by_source), flush=True)
