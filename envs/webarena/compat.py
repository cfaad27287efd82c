"""Restore checks of the WebArena env's applications (see bunshin_gym.compat), run in a restored clone.

Owns the two in-workspace check methods, which the handlers register next to ``webarena.*`` (the suite that
names them is `WebArenaAdapter.restore_checks()`):

- ``webarena.check_chromium()``: on the Chromium the env's ``webarena.reset`` launched before the snapshot,
  open a new page on the site, a popup from it (``window.open``), and in a fresh context navigate from the
  site to a second origin on another loopback address (127.0.0.2, served by a server started in the clone),
  which site isolation must give a new renderer process: each step is a new renderer forked by the restored
  zygote, the path Chromium 156 broke.
- ``webarena.check_site()``: POST a review (the site writes SQLite), read it back over HTTP and from the
  database file.

Each returns ``{"ok": bool, "detail": str}``.
"""
from __future__ import annotations

import http.server
import os
import sqlite3
import threading
import time
import urllib.parse
import urllib.request
import uuid

SECOND_ORIGIN_HOST = "127.0.0.2"  #: another loopback address: another site, so another renderer process
STEP_TIMEOUT_MS = 30_000  #: each step may take this long (a PKU qemu guest under TCG is slow)


def renderer_pids() -> set[int]:
    """PIDs of the Chromium renderer processes this process can see (the workspace's, inside one)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"--type=renderer" in f.read():
                        out.add(int(entry))
            except OSError:
                continue
    return out


def _serve_second_origin() -> tuple[http.server.ThreadingHTTPServer, str]:
    body = b"<html><head><title>second origin</title></head><body>second origin</body></html>"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer((SECOND_ORIGIN_HOST, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{SECOND_ORIGIN_HOST}:{server.server_address[1]}/"


def check_chromium(session) -> dict:
    """The checks of ``webarena.check_chromium`` on a started `BrowserSession`."""
    if session is None:
        return {"ok": False, "detail": "no browser: the suite's prepare call (webarena.reset) did not start one"}
    site = session.base_url + "/"
    done: list[str] = []
    pages, crashed = [], []

    def watch(page) -> None:
        pages.append(page)
        page.on("crash", lambda p: crashed.append(p.url))

    session.context.on("page", watch)
    server = ctx = None
    try:
        before = renderer_pids()
        page = session.context.new_page()
        page.goto(site, wait_until="load")
        done.append(f"new page {page.title()!r} (renderers {len(before)} -> {len(renderer_pids())})")
        with page.expect_popup(timeout=STEP_TIMEOUT_MS) as popup_info:
            page.evaluate("() => { window.open('/', '_blank'); }")
        popup = popup_info.value
        popup.wait_for_load_state("load", timeout=STEP_TIMEOUT_MS)
        done.append(f"popup {popup.title()!r}")
        server, url = _serve_second_origin()
        ctx = session.context.browser.new_context()  # the env's context aborts other origins
        ctx.on("page", watch)
        other = ctx.new_page()
        other.goto(site, wait_until="load")
        on_site = renderer_pids()
        other.goto(url, wait_until="load")
        text = other.evaluate("() => document.body.textContent")
        fresh = renderer_pids() - on_site
        if text != "second origin":
            return {"ok": False, "detail": "; ".join(done + [f"second origin page shows {text!r}"])}
        if not fresh:
            return {"ok": False, "detail": "; ".join(done + [f"navigation to {url} made no new renderer process"])}
        done.append(f"{SECOND_ORIGIN_HOST} in new renderer pid {sorted(fresh)[0]}")
        return {"ok": True, "detail": "; ".join(done)}
    except Exception as e:  # noqa: BLE001 - "Target crashed" is what this looks for
        msg = str(e).strip().splitlines()
        why = [f"{type(e).__name__}: {msg[0] if msg else ''}"]
        if crashed:
            why.append(f"renderer crashed for {len(crashed)} page(s)")
        return {"ok": False, "detail": "; ".join(done + why)}
    finally:
        session.context.remove_listener("page", watch)
        for p in pages:
            try:
                p.close()
            except Exception:  # noqa: BLE001 - a crashed page may not close
                pass
        if ctx is not None:
            try:
                ctx.close()
            except Exception:  # noqa: BLE001
                pass
        if server is not None:
            server.shutdown()
            server.server_close()


def check_site(base_url: str, db_path: str) -> dict:
    """The checks of ``webarena.check_site``: a review POSTed, then read back over HTTP and from SQLite."""
    title = f"restore check {uuid.uuid4().hex[:8]}"
    form = urllib.parse.urlencode({"nickname": "bunshin", "title": title, "body": "written in a clone",
                                   "rating": "5"}).encode()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **kw):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    t0 = time.monotonic()
    try:
        status = opener.open(urllib.request.Request(f"{base_url}/product/1/review", data=form), timeout=20).status
    except urllib.error.HTTPError as e:  # the redirect after a successful POST lands here
        status = e.code
    if status != 302:
        return {"ok": False, "detail": f"POST /product/1/review answered HTTP {status}, expected a 302 redirect"}
    with urllib.request.urlopen(f"{base_url}/product/1", timeout=20) as r:
        shown = title in r.read().decode(errors="replace")
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        stored = db.execute("SELECT COUNT(*) FROM reviews WHERE title = ?", (title,)).fetchone()[0]
    ok = shown and stored == 1
    return {"ok": ok, "detail": f"review POSTed (302), shown on the product page: {shown}, rows in "
                                f"{db_path}: {stored} ({time.monotonic() - t0:.2f} s)"}
