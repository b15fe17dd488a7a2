#!/usr/bin/python3
"""preload_server.py: a blocking accept loop, as plain as servers get, that
answers each connection's HTTP/1.0 request in a thread or a forked child.

  preload_server.py thread|fork HOST PORT

Prints one line per connection served on stdout ("served ADDR"), and any
exception on stderr.
"""
import os
import signal
import socket
import sys
import threading

mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def serve(c, addr):
    with c:
        f = c.makefile("rb")
        while f.readline() not in (b"\r\n", b"\n", b""):
            pass
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
    print("served", addr[0], flush=True)


signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked children reap themselves
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen(128)
print("listening", flush=True)
while True:
    c, addr = s.accept()
    if mode == "thread":
        threading.Thread(target=serve, args=(c, addr), daemon=True).start()
    elif os.fork() == 0:
        s.close()
        serve(c, addr)
        os._exit(0)
    else:
        c.close()
