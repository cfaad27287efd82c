"""Host side of the executor RPC: one connection per client, closed before every snapshot."""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from .errors import ExecutorError, ExecutorUnreachable


class ExecutorClient:
    """Calls methods of a workspace's executor. Thread-safe (one request at a time per client)."""

    def __init__(self, socket_path: str, label: str = "") -> None:
        self.socket_path = socket_path
        self.label = label or socket_path
        self._sock: socket.socket | None = None
        self._file = None
        self._next_id = 0
        self._lock = threading.Lock()

    def _connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket_path)
                self._sock, self._file = s, s.makefile("rb")
                return
            except OSError as e:
                s.close()
                if time.monotonic() > deadline:
                    raise ExecutorUnreachable(
                        f"cannot connect to the executor of {self.label} at {self.socket_path}: {e}. "
                        "The workspace may have died; see its logs (Workspace.logs()).") from e
                time.sleep(0.02)

    def call(self, method: str, timeout: float = 120.0, **params: Any) -> Any:
        with self._lock:
            if self._sock is None:
                self._connect(timeout=min(timeout, 10.0))
            self._next_id += 1
            rid = self._next_id
            try:
                self._sock.settimeout(timeout)
                self._sock.sendall(json.dumps({"id": rid, "method": method, "params": params}).encode() + b"\n")
                line = self._file.readline()
            except (OSError, socket.timeout) as e:
                self._close_locked()
                raise ExecutorUnreachable(f"{method} on {self.label}: {e}") from e
            if not line:
                self._close_locked()
                raise ExecutorUnreachable(f"{method} on {self.label}: the executor closed the connection "
                                          "(the workspace may have died; see Workspace.logs())")
            reply = json.loads(line)
        if "error" in reply:
            err = reply["error"]
            raise ExecutorError(method, err.get("type", "Error"), err.get("message", ""), err.get("traceback", ""))
        return reply.get("result")

    def _close_locked(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
