"""The executor: the workspace-side end of the host's RPC (JSON lines over a unix socket).

Runs inside a workspace as its last service. Envs add methods by naming modules in
`WorkspaceSpec.handlers`; each module's `register(executor)` calls `executor.register(name, fn)`.
A request is one line `{"id": N, "method": "...", "params": {...}}`; the answer is one line
`{"id": N, "result": ...}` or `{"id": N, "error": {"type", "message", "traceback"}}`.
Built-in methods: ping, methods, exec, read_file, write_file. Runs under the workspace's seccomp filter
(forkcore.seccomp), installed before any handler module loads.
All handlers run one at a time on one worker thread, whichever connection the request came from.
"""
from __future__ import annotations

import argparse
import base64
import importlib
import json
import os
import queue
import socketserver
import subprocess
import sys
import threading
import traceback
from typing import Any, Callable


class Executor:
    """Registry of RPC methods; handlers get the request's params as keyword arguments."""

    def __init__(self) -> None:
        self._methods: dict[str, Callable[..., Any]] = {}
        self._queue: queue.Queue = queue.Queue()
        for name, fn in (("ping", lambda: "pong"), ("methods", lambda: sorted(self._methods)),
                         ("exec", _exec), ("read_file", _read_file), ("write_file", _write_file)):
            self.register(name, fn)

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        if name in self._methods and name not in ("ping",):
            raise ValueError(f"executor method {name!r} registered twice")
        self._methods[name] = fn

    def dispatch(self, request: dict) -> dict:
        """Run one request on the executor's single worker thread (Playwright's sync API and most GUI
        toolkits must stay on the thread that created them; connections come and go across snapshots)."""
        done = threading.Event()
        box: dict = {}
        self._queue.put((request, box, done))
        done.wait()
        return box["reply"]

    def _run(self, request: dict) -> dict:
        rid = request.get("id")
        method = request.get("method")
        fn = self._methods.get(method)
        if fn is None:
            return {"id": rid, "error": {"type": "UnknownMethod", "traceback": "",
                                         "message": f"no method {method!r}; known: {sorted(self._methods)}"}}
        try:
            return {"id": rid, "result": fn(**(request.get("params") or {}))}
        except Exception as e:  # the host re-raises it as ExecutorError
            return {"id": rid, "error": {"type": type(e).__name__, "message": str(e),
                                         "traceback": traceback.format_exc()}}

    def worker(self) -> None:
        while True:
            request, box, done = self._queue.get()
            box["reply"] = self._run(request)
            done.set()


def _exec(argv: list[str], timeout_s: float = 60, input: str | None = None, env: dict | None = None,
          cwd: str = "/") -> dict:
    r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                       env={**os.environ, **(env or {})})
    return {"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def _read_file(path: str) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def _write_file(path: str, data_b64: str, mode: int = 0o644) -> int:
    data = base64.b64decode(data_b64)
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return len(data)


def serve(socket_path: str, handler_modules: list[str]) -> None:
    executor = Executor()
    threading.Thread(target=executor.worker, name="executor-worker", daemon=True).start()
    for mod in handler_modules:
        importlib.import_module(mod).register(executor)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                try:
                    request = json.loads(line)
                except json.JSONDecodeError as e:
                    reply = {"id": None, "error": {"type": "BadRequest", "message": str(e), "traceback": ""}}
                else:
                    reply = executor.dispatch(request)
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True

    if os.path.exists(socket_path):
        os.unlink(socket_path)
    with Server(socket_path, Handler) as server:
        print(f"executor: serving {sorted(executor._methods)} on {socket_path}", flush=True)
        server.serve_forever()


def main() -> None:
    from forkcore.seccomp import install_workspace_filter

    install_workspace_filter()  # normally inherited from the workspace's init; before any handler loads
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--handlers", action="append", default=[])
    a = ap.parse_args()
    sys.setrecursionlimit(10000)
    serve(a.socket, a.handlers)


if __name__ == "__main__":
    main()
