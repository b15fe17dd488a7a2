#!/usr/bin/env python3
"""A real client: HTTP requests, each on a new connection, at a steady rate.

verify_client.py HOST PORT RATE SECONDS: starts a GET every 1/RATE seconds
for SECONDS, each given 3 s to answer 200, and prints one JSON line:
attempts, ok (a whole answer came back) and failed.
"""
import http.client
import json
import sys
import threading

from paced import run_paced


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    rate, seconds = float(sys.argv[3]), float(sys.argv[4])
    results = []
    lock = threading.Lock()

    def one():
        ok = False
        try:
            c = http.client.HTTPConnection(host, port, timeout=3)
            c.request("GET", "/", headers={"Connection": "close"})
            r = c.getresponse()
            ok = r.status == 200 and r.read() == b"ok\n"
            c.close()
        except OSError:
            pass
        with lock:
            results.append(ok)

    n = int(rate * seconds)
    run_paced(one, rate, n)
    print(json.dumps({"attempts": n, "ok": sum(results),
                      "failed": n - sum(results)}))


if __name__ == "__main__":
    main()
