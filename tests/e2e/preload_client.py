#!/usr/bin/python3
"""preload_client.py: opens connections to a server at a steady rate, each
sending one small request and reading the answer to its end, and prints a
JSON report: how many got an answer (ok), were reset (reset), refused at
connect (refused), timed out or failed otherwise, and the seconds the run
took.

  preload_client.py HOST PORT RATE COUNT [REQUEST]

REQUEST (default an HTTP/1.0 GET) is sent as is; "PING" sends a Redis PING.
"""
import json
import socket
import sys
import threading
import time

from paced import run_paced

host, port, rate, count = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
req = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else "GET / HTTP/1.0\r\nHost: x\r\n\r\n"
if req == "PING":
    req = "*1\r\n$4\r\nPING\r\n"
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
res = {"ok": 0, "reset": 0, "refused": 0, "timeout": 0, "error": 0, "empty": 0}
errors = []
lock = threading.Lock()


def one():
    kind = "error"
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(req.encode())
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
            if req.startswith("*") and got.endswith(b"\r\n"):
                break
        kind = "ok" if got else "empty"
    except (ConnectionResetError, BrokenPipeError):
        kind = "reset"
    except ConnectionRefusedError:
        kind = "refused"
    except socket.timeout:
        kind = "timeout"
    except OSError as e:
        errors.append(str(e))
    finally:
        s.close()
    with lock:
        res[kind] += 1


start = time.monotonic()
run_paced(one, rate, count)
res["seconds"] = round(time.monotonic() - start, 3)
res["errors"] = errors[:5]
print(json.dumps(res))
