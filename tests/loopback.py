"""A loopback HTTP server for tests: serves `files[path] = bytes`; `fail[path] = n` answers 503 n times first;
`hits[path]` counts requests. Stands in for the internet, which tests never reach."""
from __future__ import annotations

import http.server
import threading


class LoopbackFiles:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.fail: dict[str, int] = {}
        self.hits: dict[str, int] = {}
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                if owner.fail.get(self.path, 0) > 0:
                    owner.fail[self.path] -= 1
                    self.send_error(503)
                elif self.path not in owner.files:
                    self.send_error(404)
                else:
                    body = owner.files[self.path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
