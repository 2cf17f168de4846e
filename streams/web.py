"""The worker's HTTP endpoints: ``/metrics`` (Prometheus), ``/ready`` and ``/healthz``.

Served on a thread of the standard library's HTTP server: it answers even while the event
loop is busy, and imports in milliseconds (a restart is ready sooner). With a
``--web-config`` (streams/webconfig.py) every path needs its credentials, over TLS.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from banditflow.streams.metrics import CONTENT_TYPE
from banditflow.streams.webconfig import WebConfig

log = logging.getLogger("banditflow.worker")


def serve_http(
    host: str,
    port: int,
    web: WebConfig | None,
    metrics: Callable[[], bytes],
    ready: Callable[[], tuple[bool, str]],
) -> ThreadingHTTPServer:
    """Serve the endpoints on ``host:port`` until the returned server's ``shutdown()``.

    ``metrics`` gives the exposition text and ``ready`` whether the worker serves (and why
    not); both are called on the server's threads, so they must read only what the event
    loop replaces whole.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, content_type, body = 200, "text/plain; charset=utf-8", b"ok"
            if web is not None and not web.authorized(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="banditflow"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/metrics":
                content_type, body = CONTENT_TYPE, metrics()
            elif self.path == "/ready":
                ok, text = ready()
                status, body = (200 if ok else 503), text.encode()
            elif self.path != "/healthz":
                status, body = 404, b"not found: /metrics, /ready, /healthz"
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client hung up (a probe that timed out): nobody to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape is noise

    server = ThreadingHTTPServer((host, port), Handler)
    context = web.ssl_context() if web is not None else None
    if context is not None:
        # The handshake on the request's thread, not in accept(): a client that stalls
        # it must not hold up the others.
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
        # A client that fails the handshake (no certificate, plain HTTP) is its own
        # problem: no traceback on stderr per attempt.
        server.handle_error = lambda *_: log.debug("HTTPS request failed", exc_info=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
