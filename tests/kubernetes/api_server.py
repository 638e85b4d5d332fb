"""A loopback HTTP server standing in for the Kubernetes API: the official client's requests answered
from recorded objects (the Kueue source and enforcer tests)."""
from __future__ import annotations

import http.server
import json
import threading
from urllib.parse import parse_qs, urlsplit


class RecordedApiServer:
    """A loopback HTTP server answering the official client's requests from recorded objects.

    `routes` maps (method, path) to a function (query, body) -> (status, JSON document); every request
    is kept in `requests` as (method, path, query, headers, body)."""

    def __init__(self, routes: dict):
        recorded = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                recorded.append((self.command, url.path, query, dict(self.headers), body))
                route = routes.get((self.command, url.path))
                status, doc = (
                    route(query, body)
                    if route
                    else (404, {"kind": "Status", "code": 404, "message": f"{url.path} not found"})
                )
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_POST = _serve

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
