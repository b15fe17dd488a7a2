#!/usr/bin/env python3
"""An HTTP server that records what every connection negotiated.

verify_server.py PORT LOG: answers GET with 200 on [::]:PORT (IPv4 too, as
mapped addresses) until SIGTERM.  For every connection it accepts it appends
one JSON line to LOG: the client's address and, from TCP_INFO, whether
timestamps, SACK and window scaling are on, both window scales and the MSS
the server sends with.  Prints 'listening' on stderr when ready.
"""
import http.server
import json
import signal
import socket
import struct
import sys
import threading

TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4


def tcp_info(sock):
    """The options, window scales and send MSS from struct tcp_info."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    # state, ca_state, retransmits, probes, backoff, options, wscales, flags
    _, _, _, _, _, options, wscales, _ = struct.unpack_from("8B", raw, 0)
    snd_mss, = struct.unpack_from("I", raw, 16)
    return {"ts": bool(options & TCPI_OPT_TIMESTAMPS),
            "sack": bool(options & TCPI_OPT_SACK),
            "wscale": bool(options & TCPI_OPT_WSCALE),
            "snd_wscale": wscales & 0xf, "rcv_wscale": wscales >> 4,
            "snd_mss": snd_mss}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def setup(self):
        super().setup()
        entry = tcp_info(self.connection)
        entry["client"] = self.client_address[0]
        with self.server.lock:
            self.server.log.write(json.dumps(entry) + "\n")
            self.server.log.flush()

    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    request_queue_size = 4096

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    srv = Server(("::", port), Handler)
    srv.lock = threading.Lock()
    srv.log = open(path, "a")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(
        target=srv.shutdown).start())
    print("listening", file=sys.stderr, flush=True)
    srv.serve_forever()
    srv.log.close()


if __name__ == "__main__":
    main()
