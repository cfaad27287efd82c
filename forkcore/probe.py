"""A probe workload for testing and benchmarking the fork mechanism itself (not an env).

`probe_spec()` describes a workspace with the stateful pieces a fork must carry over: an HTTP server
holding a counter in memory, a TCP echo server with a connection held open by the executor, a file being
appended to, a process holding N MiB of anonymous memory, and (optionally) headless Chromium driven by
Playwright from the executor. `register(executor)` adds the `probe.*` RPC methods.
Run the servers with `python -m forkcore.probe counter|echo|append|hold ...`.
"""
from __future__ import annotations

import ctypes
import hashlib
import http.server
import mmap
import socket
import socketserver
import sys
import time

from .spec import ServiceSpec, WorkspaceSpec

COUNTER_PORT, ECHO_PORT, HOLD_PORT = 8101, 8102, 8103
APPEND_FILE = "/var/log/probe-append.log"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-breakpad", "--disable-dev-shm-usage"]


def probe_spec(name: str = "probe", hold_mb: int = 0, **kw) -> WorkspaceSpec:
    py = sys.executable
    services = [
        ServiceSpec.make("counter", [py, "-m", "forkcore.probe", "counter", str(COUNTER_PORT)], ready=f"tcp:{COUNTER_PORT}"),
        ServiceSpec.make("echo", [py, "-m", "forkcore.probe", "echo", str(ECHO_PORT)], ready=f"tcp:{ECHO_PORT}"),
        ServiceSpec.make("append", [py, "-m", "forkcore.probe", "append", APPEND_FILE], ready=f"file:{APPEND_FILE}"),
    ]
    if hold_mb:
        services.append(ServiceSpec.make("hold", [py, "-m", "forkcore.probe", "hold", str(hold_mb), str(HOLD_PORT)],
                                         ready=f"tcp:{HOLD_PORT}", ready_timeout_s=120))
    return WorkspaceSpec(name=name, services=tuple(services), handlers=("forkcore.probe",), **kw)


# ---- servers (run as workspace services) -------------------------------------------------------------
class _Counter(http.server.BaseHTTPRequestHandler):
    count = 0

    def do_GET(self):
        if self.path == "/inc":
            _Counter.count += 1
        body = str(_Counter.count).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class _Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)
            self.wfile.flush()


def _hold(mb: int, port: int) -> None:
    """Hold `mb` MiB of distinct, non-zero anonymous pages; serve their sha256 on `port`."""
    block = bytearray(mb * 2**20)
    for off in range(0, len(block), 4096):  # distinct per page, so KSM cannot merge within one copy
        block[off:off + 8] = off.to_bytes(8, "little")
        block[off + 8] = 0xA5
    digest = hashlib.sha256(block).hexdigest().encode()

    class H(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(hashlib.sha256(block).hexdigest().encode() + b"\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", port), H) as srv:
        assert digest
        srv.serve_forever()


def main(argv: list[str]) -> None:
    kind = argv[0]
    socketserver.TCPServer.allow_reuse_address = True
    if kind == "counter":
        http.server.ThreadingHTTPServer(("127.0.0.1", int(argv[1])), _Counter).serve_forever()
    elif kind == "echo":
        socketserver.ThreadingTCPServer(("127.0.0.1", int(argv[1])), _Echo).serve_forever()
    elif kind == "append":
        i = 0
        with open(argv[1], "a", buffering=1) as f:
            while True:
                f.write(f"line {i}\n")
                i += 1
                time.sleep(0.1)
    elif kind == "hold":
        _hold(int(argv[1]), int(argv[2]))
    else:
        raise SystemExit(f"unknown probe server {kind!r}")


# ---- executor handlers ---------------------------------------------------------------------------------
class _State:
    tcp: socket.socket | None = None
    tcp_file = None
    pw = None
    browser = None
    page = None
    region: mmap.mmap | None = None


def _http_get(port: int, path: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1].decode()


def counter(inc: bool = False) -> int:
    return int(_http_get(COUNTER_PORT, "/inc" if inc else "/"))


def tcp_open() -> None:
    _State.tcp = socket.create_connection(("127.0.0.1", ECHO_PORT), timeout=10)
    _State.tcp_file = _State.tcp.makefile("rb")


def tcp_roundtrip(message: str) -> str:
    if _State.tcp is None:
        raise RuntimeError("no TCP connection: call probe.tcp_open first")
    _State.tcp.sendall(message.encode() + b"\n")
    return _State.tcp_file.readline().decode().rstrip("\n")


def hold_digest() -> str:
    with socket.create_connection(("127.0.0.1", HOLD_PORT), timeout=60) as s:
        return s.makefile("rb").readline().decode().strip()


def read_append() -> list[str]:
    with open(APPEND_FILE) as f:
        return f.read().splitlines()


def browser_start(html: str) -> None:
    from playwright.sync_api import sync_playwright

    _State.pw = sync_playwright().start()
    _State.browser = _State.pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
    _State.page = _State.browser.new_page()
    _State.page.set_content(html)


def browser_eval(expression: str):
    return _State.page.evaluate(expression)


def browser_new_page(html: str) -> str:
    """Open a new page (a new renderer process), load `html`, return its body text and close it."""
    page = _State.browser.new_page()
    try:
        page.set_content(html)
        return page.evaluate("document.body.textContent")
    finally:
        page.close()


def region_fill(mb: int, byte: int) -> None:
    """Map `mb` MiB of anonymous memory in the executor and fill it with `byte`."""
    _State.region = mmap.mmap(-1, mb * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    _State.region.write(bytes([byte]) * (mb * 2**20))


def region_dontneed_then_read() -> int:
    """madvise(MADV_DONTNEED) the region, then return its first byte (0 on Linux's anonymous-memory contract)."""
    r = _State.region
    libc = ctypes.CDLL(None, use_errno=True)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(r))
    if libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(len(r)), 4) != 0:  # MADV_DONTNEED
        raise OSError(ctypes.get_errno(), "madvise(MADV_DONTNEED) failed")
    return r[0]


def hostname() -> str:
    return socket.gethostname()


def register(executor) -> None:
    for fn in (counter, tcp_open, tcp_roundtrip, hold_digest, read_append, browser_start, browser_eval,
               browser_new_page, region_fill, region_dontneed_then_read, hostname):
        executor.register(f"probe.{fn.__name__}", fn)


if __name__ == "__main__":
    main(sys.argv[1:])
