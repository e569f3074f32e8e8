"""A test-served Prometheus exposition endpoint (the fake exporters of the e2e and
integration tests: DCGM, the endpoint picker's queue): `ExpositionHandler` answers every
GET with its server's `exposition()` text, in Prometheus' text format 0.0.4."""
from __future__ import annotations

import http.server


class ExpositionHandler(http.server.BaseHTTPRequestHandler):
    """For an `http.server.HTTPServer` subclass that defines `exposition() -> str`. A subclass
    may override `text()`; None there answers 503, as an exporter that is gone."""

    def text(self) -> str | None:
        return self.server.exposition()

    def do_GET(self):
        text = self.text()
        body = (text if text is not None else "exporter gone\n").encode()
        self.send_response(200 if text is not None else 503)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
