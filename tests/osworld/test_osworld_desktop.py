"""The desktop itself: service definitions, observation (screenshot, a11y tree, terminal) and reset."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from lxml import etree

from envs.osworld.desktop import (DEFAULT_SIZE, DesktopService, app_command, desktop_env, desktop_services,
                                  prepare_home)

ST = "https://accessibility.ubuntu.example.org/ns/state"


def test_desktop_services_define_the_whole_desktop_with_private_env(tmp_path):
    prepare_home(tmp_path)
    svcs = desktop_services(tmp_path, 7, (1024, 768))
    assert [s.name for s in svcs] == ["xvfb", "dbus", "a11y", "wm"]
    assert all(isinstance(s, DesktopService) and isinstance(s, tuple) and len(s) == 3 for s in svcs)
    assert svcs[0].argv[:5] == ["Xvfb", ":7", "-screen", "0", "1024x768x24"]
    env = svcs[0].env
    assert env["HOME"] == str(tmp_path) and env["DISPLAY"] == ":7"
    assert env["XDG_RUNTIME_DIR"].startswith(str(tmp_path))
    assert env["GTK_MODULES"] == "gail:atk-bridge" and env["SAL_USE_VCLPLUGIN"] == "gtk3"
    assert env["ACCESSIBILITY_ENABLED"] == "1"
    assert env["DBUS_SESSION_BUS_ADDRESS"].startswith("unix:path=" + str(tmp_path))
    assert "keycode 94 = NoSymbol" in svcs[3].argv[-1]
    assert (tmp_path / ".Xauthority").exists()
    assert (tmp_path / ".config/libreoffice/4/user/registrymodifications.xcu").read_text().count("WarnAlienFormat") == 1
    assert "C-A-t" in (tmp_path / ".config/openbox/rc.xml").read_text()
    assert DEFAULT_SIZE == (1920, 1080)
    assert os.path.basename(desktop_env(tmp_path, 7)["PATH"].split(":")[0]) == "bin"


def test_app_commands_carry_the_flags_the_platform_needs(tmp_path):
    chrome = app_command("google-chrome", "--remote-debugging-port=1337", "http://x/", home=tmp_path)
    assert chrome[0] == "chromium" and "--remote-debugging-port=9222" in chrome
    assert "--remote-debugging-port=1337" not in chrome
    for flag in ("--force-renderer-accessibility", "--password-store=basic", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-breakpad"):
        assert flag in chrome
    calc = app_command("calc", "/tmp/a.xlsx", home=tmp_path)
    assert calc[:2] == ["soffice", "--calc"] and "--norestore" in calc and "--nologo" in calc
    assert f"-env:UserInstallation=file://{tmp_path}/.config/libreoffice/4" in calc


@pytest.mark.desktop
def test_observation_has_osworld_keys_shapes_and_types(clean_desktop):
    d = clean_desktop
    d.launch("mousepad")
    d.wait_window("Mousepad", by_class=True)
    d.wait_idle(timeout=10)
    obs = d.observe("type something")
    assert set(obs) == {"screenshot", "accessibility_tree", "terminal", "instruction"}
    shot = obs["screenshot"]
    assert shot.dtype == np.uint8 and shot.shape == (d.size[1], d.size[0], 3)
    assert shot.std() > 0  # not a blank frame: a window is drawn
    root = etree.fromstring(obs["accessibility_tree"].encode())
    assert root.tag == "desktop-frame"
    apps = [a.get("name") for a in root]
    assert "mousepad" in apps
    assert root.xpath("//*[@st:active='true']", namespaces={"st": ST})
    assert obs["terminal"] is None and obs["instruction"] == "type something"


@pytest.mark.desktop
def test_terminal_observation_shows_what_the_terminal_printed(clean_desktop):
    d = clean_desktop
    d.launch("xterm")
    d.wait_window("xterm", by_class=True)
    d.wait_idle(timeout=10)
    d.activate_window("xterm", by_class=True)
    d.run_python("pyautogui.typewrite('echo $((6*7))zz\\n', interval=0.01); time.sleep(0.5)")
    assert "42zz" in (d.terminal_output() or "")


@pytest.mark.desktop
def test_calc_accessibility_tree_is_bounded_to_visible_cells(clean_desktop):
    from envs.osworld.tasks import TASK_FILES_DIR
    import shutil
    d = clean_desktop
    dst = d.home / "Documents" / "budget.xlsx"
    shutil.copy(TASK_FILES_DIR / "budget.xlsx", dst)
    d.launch("calc", str(dst))
    d.wait_window("budget.xlsx")
    d.wait_idle(timeout=30)
    t0 = time.monotonic()
    xml = d.accessibility_tree(max_nodes=3000)
    took = time.monotonic() - t0
    root = etree.fromstring(xml.encode())
    cells = root.xpath("//table-cell")
    assert 0 < len(cells) <= 60 * 30, len(cells)
    texts = {c.text for c in cells}
    assert {"Rent", "40", "Books"} <= texts
    assert len(root.xpath("//*")) <= 3001
    assert took < 30
    focused = [e for e in root.iter() if e.get(f"{{{ST}}}focused")]
    assert focused and all(e.tag == "table-cell" for e in focused), [e.tag for e in focused]


def test_focused_is_kept_on_the_deepest_focused_nodes_only():
    from envs.osworld.a11y import NS, deepest_focus_only

    def node(tag, focused, *children):
        e = etree.Element(tag, nsmap=NS)
        if focused:
            e.set(f"{{{ST}}}focused", "true")
        e.extend(children)
        return e
    # LibreOffice's stale state: root pane, table and cell all focused; another app's focused leaf stays
    root = node("desktop-frame", False, node("root-pane", True, node("table", True, node("table-cell", True))),
                node("frame", False, node("push-button", True)))
    deepest_focus_only(root)
    assert [e.tag for e in root.iter() if e.get(f"{{{ST}}}focused")] == ["table-cell", "push-button"]


@pytest.mark.desktop
def test_a_long_text_appears_whole_up_to_the_text_cap(clean_desktop):
    from envs.osworld.a11y import MAX_TEXT

    d = clean_desktop
    content = "".join(f"{i:04d}," for i in range(600))  # 3000 characters, each position distinct
    path = d.home / "Documents" / "long.txt"
    path.write_text(content)
    d.launch("mousepad", str(path))
    d.wait_window("long.txt")
    d.wait_idle(timeout=10)
    root = etree.fromstring(d.accessibility_tree().encode())
    texts = [e.text for e in root.iter() if e.text and e.text.startswith("0000,")]
    assert texts == [content[:MAX_TEXT]]


@pytest.mark.desktop
def test_reset_kills_apps_and_restores_home(clean_desktop):
    d = clean_desktop
    (d.home / "Desktop" / "junk.txt").write_text("x")
    (d.home / ".bashrc").write_text("changed")
    d.launch("xterm")
    d.launch("mousepad")
    d.wait_window("Mousepad", by_class=True)
    # an app started by an action (not by the session) is found through the desktop marker
    d.run_python("import subprocess; subprocess.Popen(['xterm'])")
    time.sleep(1.0)
    d.reset()
    assert d.windows() == []
    assert not (d.home / "Desktop" / "junk.txt").exists()
    assert "PS1" in (d.home / ".bashrc").read_text()
    assert d.running
    d.launch("xterm")
    assert d.wait_window("xterm", by_class=True)


@pytest.mark.desktop
def test_desktop_services_started_by_another_supervisor_can_be_attached(tmp_path):
    """What forkcore's init does: start `desktop_services` itself; a DesktopSession(attach=True) drives it."""
    import signal
    import subprocess

    from envs.osworld.desktop import DesktopSession, free_display

    display = free_display()
    prepare_home(tmp_path)
    procs = []
    try:
        for svc in desktop_services(tmp_path, display, (800, 600), marker="svc-test"):
            procs.append(subprocess.Popen(svc.argv, env=svc.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        d = DesktopSession(tmp_path, display, (800, 600), marker="svc-test", attach=True)
        d.start(timeout=20)
        assert d.running
        d.launch("xterm")
        d.wait_window("xterm", by_class=True)
        assert d.screenshot().shape == (600, 800, 3)
        d.reset()
        assert d.windows() == [] and all(p.poll() is None for p in procs)  # services survive a reset
        d.close()
        assert all(p.poll() is None for p in procs)  # attach mode never stops the supervisor's services
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            p.wait(timeout=5)


@pytest.mark.desktop
def test_chromium_page_appears_in_the_accessibility_tree(clean_desktop):
    from envs.osworld.harness import setup_task
    from envs.osworld.tasks import TASKS_DIR, load_task
    d = clean_desktop
    setup_task(d, load_task(TASKS_DIR / "chrome-open-about.json"), reset=False)
    root = etree.fromstring(d.accessibility_tree().encode())
    assert [a.get("name") for a in root] == ["Chromium"]
    assert root.xpath("//document-web[@name='Home - Bunshin Docs']")
    assert {e.get("name") for e in root.xpath("//link")} >= {"About", "Contact"}
    assert root.xpath("//entry[@name='Address and search bar']")


@pytest.mark.desktop
def test_default_screen_is_osworlds_1920x1080(tmp_path):
    from envs.osworld.desktop import DesktopSession
    with DesktopSession(tmp_path) as d:
        assert d.size == (1920, 1080)
        assert d.screenshot().shape == (1080, 1920, 3)


def _cpu_capped_cgroup(name: str) -> Path:
    """A new cgroup whose processes get 1% of one CPU (cgroup v1's cpu controller, else v2's cpu.max)."""
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        cg = v1 / name
        cg.mkdir()
        (cg / "cpu.cfs_period_us").write_text("100000")
        (cg / "cpu.cfs_quota_us").write_text("1000")
        return cg
    if "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        cg = v2 / name
        cg.mkdir()
        (cg / "cpu.max").write_text("1000 100000")
        return cg
    pytest.skip("no cgroup cpu controller here to starve a process with (neither v1's cpu nor v2's cpu.max)")


@pytest.mark.desktop
def test_an_app_starved_of_cpu_is_not_idle(clean_desktop):
    """An app with work left that waits for a CPU uses almost no ticks (as on a saturated machine): the step's
    settle wait must still see it busy, or the observation catches the app mid-work."""
    d = clean_desktop
    cg = _cpu_capped_cgroup(f"bunshin-test-starved-{os.getpid()}")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], env=d.env)
    try:
        (cg / "cgroup.procs").write_text(str(spinner.pid))
        assert not d.wait_idle(timeout=2, window=0.5, max_ticks=6)
    finally:
        spinner.kill()
        spinner.wait()
        cg.rmdir()
    assert d.wait_idle(timeout=10)
