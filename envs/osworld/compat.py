"""Restore checks of the OSWorld desktop's applications (see bunshin_gym.compat), run in a restored clone.

Owns the in-workspace methods the handlers register (the suite naming them is
`OSWorldAdapter.restore_checks()`); each takes the attached `DesktopSession` and returns
``{"ok": bool, "detail": str}``:

- ``osworld.check_prepare()`` (in the source, before the snapshot): starts headful Chromium with its DevTools
  port, Calc, Writer, Mousepad and an xterm, and waits for their windows.
- ``osworld.check_chromium()``: a new tab over CDP whose page runs script.
- ``osworld.check_libreoffice(kind)``: the running LibreOffice opens a new document (a blank file handed to
  ``soffice``, which passes it to the restored instance), text is typed and saved, and the saved file is read
  back with openpyxl / python-docx.
- ``osworld.check_mousepad()``: a new Mousepad window (asked of the restored primary instance over D-Bus).
- ``osworld.check_xterm()``: the restored terminal's shell runs a subprocess whose output lands in a file.
- ``osworld.check_atspi()``: an app started in the clone (PCManFM) appears in the AT-SPI tree (D-Bus and the
  accessibility registry restored with the desktop).
"""
from __future__ import annotations

import os
import shutil
import time
import uuid

from .desktop import DesktopSession
from .tasks import _wait_http, task_file

_DOCS = {"calc": ("empty.xlsx", ".xlsx", "LibreOffice Calc"), "writer": ("blank.docx", ".docx", "LibreOffice Writer")}


def _ok(ok: bool, detail: str) -> dict:
    return {"ok": bool(ok), "detail": detail}


def _wait(cond, timeout: float, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def _windows_of(s: DesktopSession, wm_class: str) -> set[str]:
    return {wid for wid, _, cls in s.windows() if wm_class.lower() in cls.lower()}


def _blank_document(s: DesktopSession, kind: str, stem: str) -> str:
    blank, ext, _ = _DOCS[kind]
    path = os.path.join(s.home, "Documents", stem + ext)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copy(task_file(blank), path)
    return path


def prepare(s: DesktopSession) -> dict:
    s.launch("chromium", "about:blank")
    for kind in ("calc", "writer"):  # one soffice process: the second document goes to the first's instance
        path = _blank_document(s, kind, "restore-source")
        s.launch(kind, path)
        s.wait_window(os.path.basename(path), timeout=90)
    s.launch("mousepad")
    s.wait_window("Mousepad", timeout=30, by_class=True)
    s.launch("xterm")
    s.wait_window("Terminal", timeout=30)
    _wait_http(f"http://127.0.0.1:{s.cdp_port}/json/version", 60)  # raises, naming the URL, if it never answers
    s.wait_window("Chromium", timeout=30, by_class=True)
    s.wait_idle(timeout=20)
    return _ok(True, "windows: " + ", ".join(sorted({t for _, t, _ in s.windows() if t})))


def check_chromium(s: DesktopSession) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(f"http://127.0.0.1:{s.cdp_port}", timeout=30_000)
        page = browser.contexts[0].new_page()
        page.goto("data:text/html,<title>restore check</title><p id=x>tab</p>")
        text = page.evaluate("() => document.getElementById('x').textContent + ' ' + (6 * 7)")
        tabs = len(browser.contexts[0].pages)
        page.close()
    return _ok(text == "tab 42", f"new tab ran script: {text!r} ({tabs} tabs)")


def check_libreoffice(s: DesktopSession, kind: str) -> dict:
    title = _DOCS[kind][2]
    path = _blank_document(s, kind, f"restore-check-{uuid.uuid4().hex[:6]}")
    name = os.path.basename(path)
    before = os.stat(path).st_mtime_ns
    s.launch(kind, path)  # soffice hands the file to the running (restored) instance over its pipe
    s.wait_window(name, timeout=60)
    s.activate_window(name)
    s.wait_idle(timeout=20)
    text = "restore42"
    r = s.run_python(f"pyautogui.typewrite({text!r}, interval=0.02); pyautogui.press('enter'); time.sleep(0.3); "
                     "pyautogui.hotkey('ctrl', 's')", timeout=60)
    if r.returncode != 0:
        return _ok(False, f"typing into {title} failed: {r.stderr.strip()[-300:]}")
    if not _wait(lambda: os.stat(path).st_mtime_ns != before, 60):
        return _ok(False, f"{title} did not save {name} within 60 s")
    time.sleep(1)  # the save may still be writing after the first mtime change
    if kind == "calc":
        import openpyxl

        got = openpyxl.load_workbook(path).active["A1"].value
    else:
        import docx

        got = " ".join(p.text for p in docx.Document(path).paragraphs).strip()
    s.close_window(name)
    return _ok(str(got).lower() == text, f"new document {name} saved and read back: {got!r}")


def check_mousepad(s: DesktopSession) -> dict:
    before = _windows_of(s, "mousepad")
    s.launch("mousepad", "--opening-mode=window")  # hands off to the restored primary instance over D-Bus
    after = _wait(lambda: _windows_of(s, "mousepad") - before, 30)
    return _ok(bool(after), f"Mousepad windows {len(before)} -> {len(before) + len(after or ())}")


def check_xterm(s: DesktopSession) -> dict:
    out = "/tmp/restore-check-xterm"
    if os.path.exists(out):
        os.unlink(out)
    if not s.activate_window("Terminal"):
        return _ok(False, "no Terminal window in the clone")
    s.run(["xdotool", "type", "--delay", "20", f"sh -c 'echo restore-$((6*7))' > {out}"], timeout=30)
    s.run(["xdotool", "key", "Return"], timeout=10)
    got = _wait(lambda: os.path.exists(out) and open(out).read().strip(), 20)
    return _ok(got == "restore-42", f"the shell's subprocess wrote {got!r}")


def check_atspi(s: DesktopSession) -> dict:
    s.launch("pcmanfm", str(s.home))
    s.wait_window("pcmanfm", timeout=30, by_class=True)
    tree = _wait(lambda: (lambda t: t if "pcmanfm" in t.lower() else "")(s.accessibility_tree()), 30, step=1.0)
    s.close_window("pcmanfm", by_class=True)
    return _ok(bool(tree), f"PCManFM started in the clone {'is' if tree else 'is not'} in the AT-SPI tree "
                           f"({tree.count('<') if tree else 0} elements)")
