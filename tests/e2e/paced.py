"""Starts calls at a steady rate, each in a thread of its own, for the e2e
clients: run_paced(fn, rate, count) calls fn() count times, 1/rate seconds
apart, and returns once every call has returned."""
import threading
import time


def run_paced(fn, rate, count):
    threads = []
    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=fn)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
