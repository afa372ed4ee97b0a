"""A test host for the egress proxy: `python -m tests.runner.egress_host CERT KEY` serves HTTP on
8080 and HTTPS on 8443 (the given certificate) on every address of the network namespace it runs
in, which the test made for it. GET /hello answers a line; GET /bytes/N answers N bytes;
GET /redirect?to=URL answers 302 to URL."""

from __future__ import annotations

import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/redirect?"):
            self.send_response(302)
            self.send_header("Location", urllib.parse.parse_qs(self.path.split("?", 1)[1])["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/bytes/"):
            body = b"x" * int(self.path.removeprefix("/bytes/"))
        else:
            body = f"hello from the test host, {self.headers.get('Host')} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main(cert: str, key: str) -> None:
    plain = ThreadingHTTPServer(("0.0.0.0", 8080), Handler)  # noqa: S104 - in the test's own namespace
    secure = ThreadingHTTPServer(("0.0.0.0", 8443), Handler)  # noqa: S104
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    print("ready", flush=True)
    plain.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
