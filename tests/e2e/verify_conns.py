#!/usr/bin/env python3
"""Connections that look like handshakes to a cookie check, for verify.

verify_conns.py echo PORT LOG: an echo server on [::]:PORT (IPv4 too):
every connection it accepts is a line in LOG, and gets back each read as it
came, until the client closes.  Prints 'listening' on stderr when ready;
runs until killed.

verify_conns.py reuse HOST PORT LPORT N: N connections to an echo server,
one after the other, each from local port LPORT (the server closes first,
so each new SYN meets the last one's TIME_WAIT socket): sends 'hello',
waits for it back, sends nothing more; the server's close ends it.  Prints
one JSON line: attempts, ok.

verify_conns.py exchange HOST PORT LEN N: one connection that sends N
requests of LEN bytes and reads each answer of LEN bytes back before the
next, so that after every exchange the client's acknowledgement number
less its sequence number is what it was at the handshake.  Prints one
JSON line: exchanges (answered whole), reset (the connection was reset).
"""
import json
import socket
import sys
import threading


def echo(port, path):
    log = open(path, "a")
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", port))
    srv.listen(64)
    print("listening", file=sys.stderr, flush=True)

    def serve(c):
        with c:
            c.settimeout(10)
            try:
                data = c.recv(4096)
                while data:
                    c.sendall(data)
                    # 'hello' is answered once, then the server closes
                    if data == b"hello":
                        break
                    data = c.recv(4096)
            except OSError:
                pass

    while True:
        c, peer = srv.accept()
        log.write(peer[0] + "\n")
        log.flush()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def reuse(host, port, lport, n):
    ok = 0
    for _ in range(n):
        s = socket.socket(family(host), socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.settimeout(3)
        try:
            s.bind(("", lport))
            s.connect((host, port))
            s.sendall(b"hello")
            got = b""
            while len(got) < 5:
                chunk = s.recv(5 - len(got))
                if not chunk:
                    break
                got += chunk
            # the server closes first: wait for its FIN
            if got == b"hello" and s.recv(1) == b"":
                ok += 1
        except OSError:
            pass
        finally:
            s.close()
    print(json.dumps({"attempts": n, "ok": ok}))


def exchange(host, port, length, n):
    done, reset = 0, False
    s = socket.create_connection((host, port), timeout=3)
    try:
        for i in range(n):
            msg = bytes([0x41 + i % 26]) * length
            s.sendall(msg)
            got = b""
            while len(got) < length:
                chunk = s.recv(length - len(got))
                if not chunk:
                    break
                got += chunk
            if got != msg:
                break
            done += 1
    except ConnectionResetError:
        reset = True
    except OSError:
        pass
    finally:
        s.close()
    print(json.dumps({"exchanges": done, "reset": reset}))


def main():
    mode = sys.argv[1]
    if mode == "echo":
        echo(int(sys.argv[2]), sys.argv[3])
    elif mode == "reuse":
        reuse(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "exchange":
        exchange(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit("usage: verify_conns.py echo|reuse|exchange ...")


if __name__ == "__main__":
    main()
