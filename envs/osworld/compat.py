"""Restore checks of the OSWorld desktop's applications (see bunshin_gym.compat), run in a restored clone.

Owns the in-workspace methods the handlers register (the suite naming them is
`OSWorldAdapter.restore_checks()`); each takes the attached `DesktopSession` and returns
``{"ok": bool, "detail": str}``:

- ``osworld.check_prepare(apps)`` (in the source, before the snapshot): starts `apps` (default CORE_APPS: headful
  Chromium with its DevTools port, Calc, Writer, Mousepad and an xterm; the suite asks for ALL_APPS, which adds
  Impress, GIMP, VLC playing a tone, and Thunderbird) and waits for their windows.
- ``osworld.check_chromium()``: a new tab over CDP whose page runs script.
- ``osworld.check_libreoffice(kind)``: the running LibreOffice opens a new document (a blank file handed to
  ``soffice``, which passes it to the restored instance), text is typed and saved, and the saved file is read
  back with openpyxl / python-docx.
- ``osworld.check_impress()``: as check_libreoffice, for a presentation (read back with python-pptx).
- ``osworld.check_gimp()``: an image handed to the restored GIMP opens in a new image window.
- ``osworld.check_vlc()``: the restored VLC answers on its web interface, pauses, and plays on.
- ``osworld.check_thunderbird()``: text typed into the restored Thunderbird changes the screen.
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

_DOCS = {"calc": ("empty.xlsx", ".xlsx", "LibreOffice Calc"), "writer": ("blank.docx", ".docx", "LibreOffice Writer"),
         "impress": ("blank.pptx", ".pptx", "LibreOffice Impress")}
#: the applications prepare() starts by default; the other domains' ones are asked for by name
CORE_APPS = ("chromium", "calc", "writer", "mousepad", "xterm")
ALL_APPS = CORE_APPS + ("impress", "gimp", "vlc", "thunderbird")
#: VLC's web interface as the seeded vlcrc sets it (desktop.prepare_home)
VLC_HTTP = ("127.0.0.1", 8080, "password")


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


def prepare(s: DesktopSession, apps: list[str] | tuple[str, ...] = CORE_APPS) -> dict:
    """Start `apps` (names in ALL_APPS) and wait for their windows."""
    unknown = set(apps) - set(ALL_APPS)
    if unknown:
        raise ValueError(f"prepare: unknown apps {sorted(unknown)}")
    if "chromium" in apps:
        s.launch("chromium", "about:blank")
    for kind in ("calc", "writer", "impress"):  # one soffice process: later documents go to the first's instance
        if kind in apps:
            path = _blank_document(s, kind, "restore-source")
            s.launch(kind, path)
            s.wait_window(os.path.basename(path), timeout=90)
    if "mousepad" in apps:
        s.launch("mousepad")
        s.wait_window("Mousepad", timeout=30, by_class=True)
    if "xterm" in apps:
        s.launch("xterm")
        s.wait_window("Terminal", timeout=30)
    if "gimp" in apps:
        s.launch("gimp", _image(s, "restore-source"))
        # the image window's title: "GNU Image Manipulation Program" is only shown until the image has loaded
        s.wait_window("[restore-source]", timeout=120)
    if "vlc" in apps:
        s.launch("vlc", "--loop", _tone(s))  # its web interface is on in the seeded vlcrc
        _wait(lambda: _vlc_status(s).get("state") == "playing", 60)
        s.wait_window("VLC media player", timeout=30)
    if "thunderbird" in apps:
        s.launch("thunderbird")
        s.wait_window("Thunderbird", timeout=120)
    if "chromium" in apps:
        _wait_http(f"http://127.0.0.1:{s.cdp_port}/json/version", 60)  # raises, naming the URL, if it never answers
        s.wait_window("Chromium", timeout=30, by_class=True)
    s.wait_idle(timeout=20)
    return _ok(True, "windows: " + ", ".join(sorted({t for _, t, _ in s.windows() if t})))


def _image(s: DesktopSession, stem: str) -> str:
    from PIL import Image

    path = os.path.join(s.home, "Pictures", stem + ".png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", (64, 48), (200, 30, 30)).save(path)
    return path


def _tone(s: DesktopSession, seconds: int = 3) -> str:
    """A WAV of a quiet 440 Hz tone, for VLC to play."""
    import math
    import struct
    import wave

    path = os.path.join(s.home, "Music", "restore-tone.wav")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rate = 8000
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(800 * math.sin(2 * math.pi * 440 * i / rate)))
                               for i in range(rate * seconds)))
    return path


def _vlc_status(s: DesktopSession, command: str = "") -> dict:
    """VLC's HTTP interface status ({"state", "time", ...}), {} if it does not answer."""
    import base64
    import json
    import urllib.request

    host, port, password = VLC_HTTP
    url = f"http://{host}:{port}/requests/status.json" + (f"?command={command}" if command else "")
    auth = base64.b64encode(f":{password}".encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"}),
                                    timeout=5) as r:
            return json.load(r)
    except Exception:  # noqa: BLE001 - not answering is what the caller checks
        return {}


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


def check_impress(s: DesktopSession) -> dict:
    """A new presentation handed to the restored soffice: a title typed into it, saved, read back."""
    path = _blank_document(s, "impress", f"restore-check-{uuid.uuid4().hex[:6]}")
    name = os.path.basename(path)
    before = os.stat(path).st_mtime_ns
    s.launch("impress", path)
    s.wait_window(name, timeout=60)
    s.activate_window(name)
    s.wait_idle(timeout=20)
    # Tab selects the title placeholder, Enter edits it, Escape twice leaves the text and the selection
    r = s.run_python("pyautogui.press('tab'); time.sleep(0.3); pyautogui.press('enter'); time.sleep(0.3); "
                     "pyautogui.typewrite('restore42', interval=0.02); pyautogui.press('escape'); "
                     "pyautogui.press('escape'); time.sleep(0.3); pyautogui.hotkey('ctrl', 's')", timeout=60)
    if r.returncode != 0:
        return _ok(False, f"typing into LibreOffice Impress failed: {r.stderr.strip()[-300:]}")
    if not _wait(lambda: os.stat(path).st_mtime_ns != before, 60):
        return _ok(False, f"LibreOffice Impress did not save {name} within 60 s")
    time.sleep(1)
    from pptx import Presentation

    got = " ".join(sh.text_frame.text for slide in Presentation(path).slides for sh in slide.shapes
                   if sh.has_text_frame).strip()
    s.close_window(name)
    return _ok(got == "restore42", f"new presentation {name} saved and read back: {got!r}")


def check_gimp(s: DesktopSession) -> dict:
    """An image handed to the restored GIMP (its single-instance D-Bus call) opens in a new image window."""
    path = _image(s, f"restore-check-{uuid.uuid4().hex[:6]}")
    s.launch("gimp", path)
    stem = os.path.splitext(os.path.basename(path))[0]
    found = _wait(lambda: [t for _, t, _ in s.windows() if f"[{stem}]" in t], 60)  # "[stem] (imported)-2.0 (RGB ...) – GIMP"
    return _ok(bool(found), f"GIMP {'opened ' + found[0] if found else 'did not open ' + stem}")


def check_vlc(s: DesktopSession) -> dict:
    """The restored VLC answers on its HTTP interface, pauses and plays again, and its clock moves."""
    before = _vlc_status(s)
    if not before:
        return _ok(False, "VLC's HTTP interface does not answer in the clone")
    paused = _wait(lambda: _vlc_status(s, "pl_forcepause").get("state") == "paused" or None, 10)
    t0 = _vlc_status(s, "pl_forceresume").get("time", 0)
    moved = _wait(lambda: (lambda st: st.get("state") == "playing" and st.get("position", 0) != before.get("position")
                           and st)(_vlc_status(s)), 10)
    return _ok(bool(paused and moved), f"state {before.get('state')} -> paused: {bool(paused)} -> playing again at "
                                       f"position {(moved or {}).get('position')} (from {t0} s)")


def check_thunderbird(s: DesktopSession) -> dict:
    """The restored Thunderbird takes keyboard input and draws it: text typed into its focused field (the
    first-run account dialog's name) changes the screen. (Its Gecko widgets are not in the AT-SPI tree here.)"""
    if not s.activate_window("Thunderbird"):
        return _ok(False, "no Thunderbird window in the clone")
    s.wait_idle(timeout=10)
    before = s.screenshot()
    s.run(["xdotool", "type", "--delay", "20", "restore42"], timeout=30)
    changed = _wait(lambda: int((s.screenshot() != before).any(axis=-1).sum()), 20)
    return _ok(changed > 200, f"typing into the restored Thunderbird changed {changed} pixels")


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
