"""The OSWorld-style desktop: what runs (Xvfb, dbus, AT-SPI, openbox, apps), how it is started and reset,
and how it is observed (screenshot, accessibility tree, terminal text).

Owns:
  * `desktop_services(home, display, size)` — the service definitions (name, argv, env) of one desktop, so
    forkcore's init can start the same desktop inside a workspace; `prepare_home` seeds the HOME they need.
  * `DesktopSession` — the same desktop run directly on the host (tests, the replay backend): starts the
    services, launches apps, runs commands in the desktop's environment, observes, resets between tasks.

Does not own: namespaces, snapshots or forking (forkcore), the step loop / gym API (bunshin_gym), action
parsing (actions.py), tasks and judging (tasks.py, evaluators/).

Conventions of OSWorld's VM that tasks rely on: the user's home is /home/user (with ~/Desktop), `python` on
PATH imports pyautogui, Chromium's DevTools port is 9222, the terminal opens with Ctrl+Alt+T. Inside a
workspace HOME *is* /home/user. On the host a session runs with a temp HOME and maps the literal prefix
/home/user in task commands and paths to it (`DesktopSession.vm_path` / `map_command`); text the agent types
is never rewritten, so host-run tasks and oracles use `~` where the agent types a path.

Quirks handled here (measured, see the platform notes): HOME / XDG_RUNTIME_DIR private per desktop (else
the a11y bus is shared between desktops), GTK_MODULES=gail:atk-bridge (GTK2 apps), SAL_USE_VCLPLUGIN=gtk3
(LibreOffice over ATK), ACCESSIBILITY_ENABLED=1 (Chromium on AT-SPI), an existing ~/.Xauthority
(python-xlib), `xmodmap -e "keycode 94 = NoSymbol"` (else pyautogui types '<' as '>'), LibreOffice's
first-run dialogs skipped by a pre-seeded registrymodifications.xcu.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from .errors import DependencyNotInstalled, DesktopStartError, TaskConfigError

__all__ = [
    "VM_HOME",
    "DEFAULT_SIZE",
    "CDP_PORT",
    "DesktopService",
    "DesktopSession",
    "desktop_env",
    "desktop_services",
    "prepare_home",
    "app_command",
    "free_display",
    "free_port",
]

VM_HOME = "/home/user"
"""The home directory OSWorld's tasks name; inside a workspace HOME is exactly this."""
DEFAULT_SIZE = (1920, 1080)
"""OSWorld's screen size (width, height)."""
CDP_PORT = 9222
"""Chromium's remote-debugging port (OSWorld forwards 9222 to Chrome's port)."""
PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
"""What OSWorld prepends to every pyautogui action before `python -c`."""

_REQUIRED_PROGRAMS = {
    "Xvfb": "xvfb",
    "openbox": "openbox",
    "dbus-daemon": "dbus",
    "xdotool": "xdotool",
    "xmodmap": "x11-xserver-utils",
}
_AT_SPI_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"
_HERE = Path(__file__).resolve().parent
_RUN_DIR_NAME = ".bunshin-run"
"""Per-desktop runtime dir (XDG_RUNTIME_DIR, logs, terminal logs) inside HOME; kept by `restore_home`."""
_LO_PROFILE = ".config/libreoffice/4"
#: Chromium's --user-data-dir, relative to HOME (OSWorld's Chrome keeps its profile in ~/.config/google-chrome)
CHROMIUM_PROFILE = ".config/chromium"

CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-session-crashed-bubble",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--test-type",
    "--force-renderer-accessibility",
    "--password-store=basic",
    "--remote-allow-origins=*",
    "--start-maximized",
)
"""Chromium flags: no network calls besides the page's own (platform notes "Browser"), a11y on, CDP open."""

LIBREOFFICE_FLAGS = ("--norestore", "--nologo", "--nodefault", "--nolockcheck")

_LO_REGISTRY = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="ooSetupInstCompleted" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="ooSetupLastVersion" oor:op="fuse"><value>7.4</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeGetInvolvedShown" oor:op="fuse"><value>9999999999</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeDonateShown" oor:op="fuse"><value>9999999999</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="CrashReport" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="AutoSave" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Recovery/AutoSave"><prop oor:name="Enabled" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Recovery/RecoveryInfo"><prop oor:name="Enabled" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Writer/AutoFunction/Completion"><prop oor:name="Enable" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Input"><prop oor:name="AutoInput" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Office.UI/Infobar/Enabled"><prop oor:name="WhatsNew" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.UI/Infobar/Enabled"><prop oor:name="GetInvolved" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.UI/Infobar/Enabled"><prop oor:name="Donate" oor:op="fuse"><value>false</value></prop></item>
</oor:items>
"""


class DesktopService(NamedTuple):
    """One long-running process of the desktop, started in list order (later ones wait for earlier ones).

    Fields:
        name: short id ("xvfb", "dbus", "a11y", "wm").
        argv: the command; each waits itself for what it needs (the X socket, the bus socket).
        env: the complete environment for it (not merged with the caller's).
    """

    name: str
    argv: list[str]
    env: dict[str, str]


# ----------------------------------------------------------------------------------------------------
# Environment and services


def _run_dir(home: str | os.PathLike) -> Path:
    return Path(home) / _RUN_DIR_NAME


def desktop_env(home: str | os.PathLike, display: int, *, marker: str | None = None,
                python_bin: str | None = None) -> dict[str, str]:
    """The environment every process of the desktop gets (services, apps, `python -c` actions).

    Args:
        home: the desktop user's HOME (in a workspace: /home/user).
        display: X display number (":N").
        marker: value of BUNSHIN_DESKTOP, used by `DesktopSession.kill_apps` to find the desktop's processes.
        python_bin: directory put first on PATH so `python` imports pyautogui (default: this interpreter's).

    Returns:
        A new dict (not merged with os.environ).
    """
    home = str(home)
    run = _run_dir(home)
    pybin = python_bin or str(Path(sys.executable).parent)
    path = os.pathsep.join(dict.fromkeys([pybin, "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]))
    env = {
        "HOME": home,
        "USER": "user",
        "LOGNAME": "user",
        "SHELL": "/bin/bash",
        "PATH": path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm-256color",
        "DISPLAY": f":{display}",
        "XAUTHORITY": f"{home}/.Xauthority",
        "XDG_RUNTIME_DIR": str(run / "xdg"),
        "XDG_CONFIG_HOME": f"{home}/.config",
        # GSettings in a file of HOME (GLib's keyfile backend): settings reset and fork with HOME, and no
        # dconf daemon holds them in memory
        "GSETTINGS_BACKEND": "keyfile",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_SESSION_TYPE": "x11",
        "XDG_CURRENT_DESKTOP": "openbox",
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={run / 'xdg' / 'bus'}",
        "GTK_MODULES": "gail:atk-bridge",
        "SAL_USE_VCLPLUGIN": "gtk3",
        "ACCESSIBILITY_ENABLED": "1",
        "QT_ACCESSIBILITY": "1",
        "NO_AT_BRIDGE": "0",
        "GTK_OVERLAY_SCROLLING": "0",
        "BUNSHIN_DESKTOP_RUN": str(run),
        # LibreOffice and GTK keep temp dirs there: a host-run desktop would leave them in the host's /tmp
        "TMPDIR": str(run / "tmp"),
    }
    if marker:
        env["BUNSHIN_DESKTOP"] = marker
    return env


def _openbox_rc(home: Path) -> Path:
    """~/.config/openbox/rc.xml: Debian's default + Ctrl+Alt+T → terminal + normal windows maximized."""
    src = Path("/etc/xdg/openbox/rc.xml")
    if not src.exists():
        raise DependencyNotInstalled("missing /etc/xdg/openbox/rc.xml; install it with: apt-get install openbox")
    text = src.read_text()
    term = app_command("xterm", home=home)
    cmd = " ".join(_sh_quote(a) for a in term)
    keybind = (f'<keybind key="C-A-t"><action name="Execute"><command>{_xml_escape(cmd)}</command>'
               f'</action></keybind>\n')
    text = text.replace("<keyboard>", "<keyboard>\n" + keybind, 1)
    apps = ('<application type="normal"><maximized>yes</maximized><decor>yes</decor></application>\n'
            '</applications>')
    text = text.replace("</applications>", apps, 1)
    out = home / ".config" / "openbox" / "rc.xml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


#: GSettings where OSWorld's VM differs from the schemas' defaults (its tasks' initial states read them)
_OSWORLD_VM_SETTINGS = """[org/gnome/desktop/screensaver]
lock-enabled=false
"""


#: VLC as OSWorld's VM has it: its web interface on (OSWorld's vlc_playing_info getter reads it), the first-run
#: privacy question answered; no sound card here, so the dummy audio output (else an "Errors" dialog opens)
_VLCRC = """[qt]
qt-privacy-ask=0
[core]
extraintf=http
aout=adummy
[lua]
http-host=127.0.0.1
http-port=8080
http-password=password
"""


#: Video files open in Totem, as on OSWorld's Ubuntu desktop (its default-video-player task has the agent change it)
_MIMEAPPS = "[Default Applications]\n" + "".join(
    f"video/{t}=org.gnome.Totem.desktop\n" for t in ("mp4", "mpeg", "webm", "ogg", "quicktime", "x-matroska",
                                                      "x-msvideo", "x-flv", "x-ms-wmv", "3gpp", "x-m4v", "x-ogm+ogg"))


def prepare_home(home: str | os.PathLike) -> None:
    """Seed a desktop user's HOME (idempotent): ~/Desktop, ~/Documents, ~/Downloads, ~/.Xauthority,
    the openbox config, LibreOffice's registrymodifications.xcu (no first-run dialogs, no "Keep current
    format" question, no autocomplete), GSettings as OSWorld's VM has them, VLC's vlcrc, Totem as the video
    player (mimeapps.list) and the runtime dir.
    Must run before the services start."""
    home = Path(home)
    for sub in ("Desktop", "Documents", "Downloads", "Pictures", ".config", ".local/share", ".cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / ".Xauthority").touch()
    run = _run_dir(home)
    for sub in ("xdg", "logs", "terminal", "tmp"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(run / "xdg", 0o700)
    os.chmod(run / "tmp", 0o1777)
    _openbox_rc(home)
    lo_user = home / _LO_PROFILE / "user"
    lo_user.mkdir(parents=True, exist_ok=True)
    (lo_user / "registrymodifications.xcu").write_text(_LO_REGISTRY)
    (home / ".bashrc").write_text("PS1='user@ubuntu:\\w$ '\nexport HISTFILE=/dev/null\n")
    settings = home / ".config/glib-2.0/settings/keyfile"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(_OSWORLD_VM_SETTINGS)
    vlcrc = home / ".config/vlc/vlcrc"
    vlcrc.parent.mkdir(parents=True, exist_ok=True)
    vlcrc.write_text(_VLCRC)
    (home / ".config/mimeapps.list").write_text(_MIMEAPPS)



def desktop_services(home: str | os.PathLike, display: int, size: tuple[int, int] = DEFAULT_SIZE, *,
                     marker: str | None = None) -> list[DesktopService]:
    """The desktop as service definitions, in start order, for forkcore's init (or `DesktopSession`).

    Call `prepare_home(home)` first. Services: Xvfb (`:display`, size x 24 bit), a session D-Bus at
    $XDG_RUNTIME_DIR/bus (the same thing dbus-run-session starts, at a fixed address so every later
    process finds it), the AT-SPI bus launcher (started eagerly so apps register at once) and openbox
    (after the keycode-94 fix). Each later service waits for the sockets it needs.

    Args:
        home: the user's HOME (in a workspace /home/user).
        display: X display number.
        size: (width, height) of the screen.
        marker: optional BUNSHIN_DESKTOP value put into every service's environment.

    Returns:
        list of DesktopService(name, argv, env).
    """
    w, h = size
    env = desktop_env(home, display, marker=marker)
    xsock = f"/tmp/.X11-unix/X{display}"
    bus = env["DBUS_SESSION_BUS_ADDRESS"].split("=", 1)[1]
    wait_x = f'i=0; while [ ! -S {xsock} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; '
    wait_bus = f'i=0; while [ ! -S {_sh_quote(bus)} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; '
    rc = Path(home) / ".config" / "openbox" / "rc.xml"
    return [
        DesktopService("xvfb", ["Xvfb", f":{display}", "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp",
                                "-dpi", "96", "-noreset", "+extension", "RANDR"], env),
        DesktopService("dbus", ["dbus-daemon", "--session", f"--address=unix:path={bus}", "--nofork",
                                "--nopidfile", "--nosyslog"], env),
        DesktopService("a11y", ["sh", "-c", wait_bus + f"exec {_AT_SPI_LAUNCHER} --launch-immediately"], env),
        DesktopService("wm", ["sh", "-c", wait_x + wait_bus + 'xmodmap -e "keycode 94 = NoSymbol"; '
                              f"exec openbox --config-file {_sh_quote(str(rc))}"], env),
    ]


CHROME_NAMES = ("chromium", "chrome", "google-chrome", "google-chrome-stable", "chromium-browser")


def app_command(app: str, *args: str, home: str | os.PathLike, cdp_port: int = CDP_PORT) -> list[str]:
    """The argv that starts one desktop app the way OSWorld tasks expect it.

    Args:
        app: "xterm" | "terminal" | "mousepad" | "gedit" | "text_editor" | "pcmanfm" | "nautilus" | "calc" |
            "writer" | "impress" | "libreoffice" | "soffice" | "chromium" | "chrome" | "google-chrome"; other
            names (gimp, vlc, thunderbird, ...) are returned unchanged (a plain program).
        *args: files / URLs / extra flags appended.
        home: the user's HOME (profiles live under it).
        cdp_port: Chromium's --remote-debugging-port.
    """
    home = Path(home)
    a = list(args)
    name = os.path.basename(app)
    if name in ("xterm", "terminal", "gnome-terminal", "x-terminal-emulator"):
        log = f"{_run_dir(home)}/terminal/xterm-$$.log"
        # sh -c so each terminal gets its own log file (the `terminal` observation reads the newest).
        # titled "Terminal" like Ubuntu's terminal, which OSWorld's configs activate by that name
        inner = f'exec xterm -T Terminal -fa Monospace -fs 11 -geometry 120x36 -l -lf "{log}"'
        if a:
            inner += " -e " + " ".join(_sh_quote(x) for x in a)
        return ["sh", "-c", inner]
    if name in ("mousepad", "gedit", "text_editor"):
        return ["mousepad", *a]
    if name in ("pcmanfm", "nautilus", "files"):
        return ["pcmanfm", *a]
    if name in ("calc", "writer", "impress", "libreoffice", "soffice", "localc", "lowriter", "loimpress"):
        kind = {"calc": ["--calc"], "localc": ["--calc"], "writer": ["--writer"], "lowriter": ["--writer"],
                "impress": ["--impress"], "loimpress": ["--impress"]}.get(name, [])
        profile = (home / _LO_PROFILE).as_uri()
        return ["soffice", *kind, *LIBREOFFICE_FLAGS, f"-env:UserInstallation={profile}", *a]
    if name in CHROME_NAMES:  # a task's own --remote-debugging-port is honoured through cdp_port (launch)
        a = [x for x in a if not x.startswith("--remote-debugging-port")]
        return ["chromium", *CHROMIUM_FLAGS, f"--remote-debugging-port={cdp_port}",
                f"--user-data-dir={home}/{CHROMIUM_PROFILE}", *a]
    if name in ("vlc", "cvlc") and os.geteuid() == 0:
        # Debian's VLC refuses to run as root; in a user namespace that maps us to uid 1000 it runs (its files
        # still belong to us outside). Workspaces run the desktop as `user` where they can (env.py)
        return ["unshare", "--user", "--map-user=1000", "--map-group=1000", app, *a]
    return [app, *a]


def free_display(start: int = 40, stop: int = 400) -> int:
    """A display number with no X socket or lock file on this machine (host runs share /tmp/.X11-unix)."""
    for n in range(start, stop):
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock"):
            return n
    raise DesktopStartError(f"no free X display between :{start} and :{stop}; stop stale Xvfb servers")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for a host-run Chromium's DevTools when 9222 is taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


# ----------------------------------------------------------------------------------------------------
# The session


class DesktopSession:
    """One desktop run on this machine: services, apps, observation, reset.

    Example:
        >>> with DesktopSession(tempfile.mkdtemp(), size=(1280, 800)) as d:   # doctest: +SKIP
        ...     d.launch("mousepad")
        ...     obs = d.observe("Type hello")
        ...     obs["screenshot"].shape
        (800, 1280, 3)

    Attributes:
        home: the user's HOME (a Path).
        display: the X display number.
        size: (width, height).
        cdp_port: Chromium's DevTools port on 127.0.0.1.
        env: the environment of every process of the desktop (see `desktop_env`).
        vm_home: the HOME task files name (/home/user); mapped to `home` by `vm_path` / `map_command`.
        attach: the services were started by someone else (forkcore's init, from `desktop_services(...,
            marker=...)` with the same marker): `start()` only waits for them, `close()` only ends apps.
    """

    def __init__(self, home: str | os.PathLike, display: int | None = None,
                 size: tuple[int, int] = DEFAULT_SIZE, *, cdp_port: int | None = None,
                 vm_home: str = VM_HOME, task_files: str | os.PathLike | None = None,
                 marker: str | None = None, attach: bool = False):
        self.attach = attach
        self.home = Path(home).resolve()
        self._auto_display = display is None
        self.display = display if display is not None else free_display(40 + random.randrange(0, 300))
        self.size = (int(size[0]), int(size[1]))
        self.cdp_port = cdp_port if cdp_port is not None else (CDP_PORT if _port_free(CDP_PORT) else free_port())
        self._default_cdp_port = self.cdp_port
        self.vm_home = vm_home.rstrip("/")
        self.task_files = Path(task_files) if task_files else _HERE / "task_files"
        self.marker = marker or f"{self.display}-{uuid.uuid4().hex[:12]}"
        self.env = desktop_env(self.home, self.display, marker=self.marker)
        self._services: dict[str, subprocess.Popen] = {}
        self._apps: list[subprocess.Popen] = []
        self._baseline: Path | None = None
        self._mss = None
        self.instruction = ""

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> "DesktopSession":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def run_dir(self) -> Path:
        return _run_dir(self.home)

    @property
    def running(self) -> bool:
        if self.attach:
            return os.path.exists(f"/tmp/.X11-unix/X{self.display}") and self._wm_ready()
        return bool(self._services) and all(p.poll() is None for p in self._services.values())

    def start(self, timeout: float = 20.0) -> None:
        """Seed HOME, start the services and wait until X, the bus and the window manager answer.

        With an automatically chosen display, a display taken meanwhile by another desktop on this machine
        (Xvfb exits) is retried on the next free one, up to 3 times.

        Raises:
            DependencyNotInstalled: a program is missing (message has the apt-get line).
            DesktopStartError: a service exited or did not come up within `timeout` (message has its log).
        """
        missing = [f"{p} (apt-get install {pkg})" for p, pkg in _REQUIRED_PROGRAMS.items() if not shutil.which(p)]
        if not os.path.exists(_AT_SPI_LAUNCHER):
            missing.append(f"{_AT_SPI_LAUNCHER} (apt-get install at-spi2-core)")
        if missing:
            raise DependencyNotInstalled("the desktop needs: " + ", ".join(missing))
        deadline = time.monotonic() + timeout
        if self.attach:
            bus = self.env["DBUS_SESSION_BUS_ADDRESS"].split("=", 1)[1]
            self._wait(lambda: os.path.exists(f"/tmp/.X11-unix/X{self.display}") and os.path.exists(bus)
                       and self._wm_ready(), deadline, "wm")
            self.snapshot_home()
            return
        for attempt in range(3):
            try:
                self._start_services(deadline)
                break
            except DesktopStartError as e:
                if not (self._auto_display and attempt < 2 and "'xvfb' exited" in str(e)):
                    raise
                self.display = free_display(self.display + 1)
                self.marker = f"{self.display}-{uuid.uuid4().hex[:12]}"
                self.env = desktop_env(self.home, self.display, marker=self.marker)
        self._wait(lambda: self._wm_ready(), deadline, "wm")
        self.snapshot_home()

    def _start_services(self, deadline: float) -> None:
        prepare_home(self.home)
        logs = self.run_dir / "logs"
        for svc in desktop_services(self.home, self.display, self.size, marker=self.marker):
            log = open(logs / f"{svc.name}.log", "ab")
            self._services[svc.name] = subprocess.Popen(
                svc.argv, env=svc.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=str(self.home))
            log.close()
            if svc.name == "xvfb":
                self._wait(lambda: self._xvfb_is_ours(), deadline, "xvfb")
            elif svc.name == "dbus":
                bus = self.env["DBUS_SESSION_BUS_ADDRESS"].split("=", 1)[1]
                self._wait(lambda: os.path.exists(bus), deadline, "dbus")

    def _wait(self, ready, deadline: float, name: str) -> None:
        while not ready():
            for svc_name, p in self._services.items():
                if p.poll() is not None:
                    self.close()
                    raise DesktopStartError(f"desktop service {svc_name!r} exited with {p.returncode}; "
                                            f"log: {self._log_tail(svc_name)}")
            if time.monotonic() > deadline:
                self.close()
                raise DesktopStartError(f"desktop service {name!r} not ready in time on :{self.display}; "
                                        f"log: {self._log_tail(name)}")
            time.sleep(0.05)

    def _xvfb_is_ours(self) -> bool:
        """Our Xvfb owns the display: its socket exists and the lock file names its pid (not another server's)."""
        p = self._services.get("xvfb")
        try:
            with open(f"/tmp/.X{self.display}-lock") as f:
                owner = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return False
        if p is not None and owner != p.pid:
            return False  # still starting, or another server holds the display (ours then exits)
        return os.path.exists(f"/tmp/.X11-unix/X{self.display}")

    def _wm_ready(self) -> bool:
        r = subprocess.run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], env=self.env,
                           capture_output=True, text=True)
        return r.returncode == 0 and "window id" in r.stdout

    def _log_tail(self, name: str, n: int = 1500) -> str:
        try:
            return (self.run_dir / "logs" / f"{name}.log").read_text(errors="replace")[-n:] or "(empty)"
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Stop every app and service this session started (by pid / process group, nothing else)."""
        self.kill_apps()
        for name in reversed(list(self._services)):
            _terminate(self._services[name])
        self._services.clear()
        if self._mss is not None:
            try:
                self._mss.close()
            except Exception:
                pass
            self._mss = None

    # -- processes ------------------------------------------------------------------------------------
    def vm_path(self, path: str) -> str:
        """Map a path of OSWorld's VM (/home/user/..., ~/...) to this session's filesystem."""
        path = str(path)
        if path.startswith("~"):
            path = self.vm_home + path[1:]
        if path == self.vm_home or path.startswith(self.vm_home + "/"):
            return str(self.home) + path[len(self.vm_home):]
        return path

    def map_command(self, command: str | Sequence[str]) -> str | list[str]:
        """Replace the literal VM home prefix in a task's command (string or argv) by this HOME."""
        if str(self.home) == self.vm_home:
            return command if isinstance(command, str) else list(command)
        pat = re.compile(re.escape(self.vm_home) + r"(?=/|\b|$)")
        if isinstance(command, str):
            return pat.sub(str(self.home), command)
        return [pat.sub(str(self.home), str(c)) for c in command]

    def run_task_command(self, command: str | Sequence[str], *, shell: bool = False,
                         timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a task file's command as OSWorld does: VM paths mapped (`map_command`), an argv joined into one
        string for `shell=True`, a string split like a shell for `shell=False`."""
        import shlex

        cmd = self.map_command(command)
        if shell and isinstance(cmd, list):
            cmd = " ".join(cmd)
        if not shell and isinstance(cmd, str):
            cmd = shlex.split(cmd)
        return self.run(cmd, shell=shell, timeout=timeout)

    def launch(self, app: str, *args: str) -> subprocess.Popen:
        """Start an app (see `app_command`) in the desktop, detached; returns its Popen. Chromium listens on the
        DevTools port a task's launch names (OSWorld's tasks then forward 9222 to it with socat), if free."""
        if os.path.basename(app) in CHROME_NAMES:
            asked = [x.split("=", 1)[1] for x in args if x.startswith("--remote-debugging-port=")]
            if asked and asked[-1].isdigit() and _port_free(int(asked[-1])):
                self.cdp_port = int(asked[-1])
        argv = app_command(app, *args, home=self.home, cdp_port=self.cdp_port)
        if not shutil.which(argv[0]):
            raise DependencyNotInstalled(f"{argv[0]!r} is not installed (needed to launch {app!r})")
        log = open(self.run_dir / "logs" / f"app-{os.path.basename(argv[0])}.log", "ab")
        p = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=str(self.home))
        log.close()
        self._apps.append(p)
        return p

    def run(self, command: str | Sequence[str], *, shell: bool = False, timeout: float = 60.0,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command to completion in the desktop's environment (cwd = HOME); text output.

        Output goes through temporary files, not pipes, so a command that leaves a background app running
        (e.g. an action doing `subprocess.Popen(["xterm"])`) returns when the command itself exits.
        """
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                p = subprocess.Popen(command, shell=shell, env=self.env, cwd=str(self.home), stdout=out, stderr=err,
                                     stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                     start_new_session=True)
            except OSError as e:
                return subprocess.CompletedProcess(command, 127, "", f"{type(e).__name__}: {e}")
            try:
                if input is not None:
                    p.communicate(input.encode(), timeout=timeout)
                rc = p.wait(timeout=timeout)
                note = ""
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()
                rc, note = 124, f"\n(timed out after {timeout} s)"
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(command, rc, out.read().decode(errors="replace"),
                                               err.read().decode(errors="replace") + note)

    def run_python(self, code: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run `python -c PREFIX+code` as OSWorld's VM server runs a pyautogui action."""
        return self.run(["python", "-c", PYAUTOGUI_PREFIX + code], timeout=timeout)

    def desktop_pids(self) -> list[int]:
        """Pids of every process carrying this desktop's marker (services, apps, what they started)."""
        needle = f"BUNSHIN_DESKTOP={self.marker}".encode()
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        pids.append(int(d))
            except OSError:
                continue
        return pids

    def _service_tree(self) -> set[int]:
        """Pids of the services and of everything D-Bus / the a11y launcher activated (kept on reset)."""
        keep = {p.pid for p in self._services.values()}
        roots = [p.pid for n, p in self._services.items() if n in ("dbus", "a11y")]
        if self.attach:  # services are not our children: recognise them by program name
            for pid in self.desktop_pids():
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if comm in ("Xvfb", "openbox", "dbus-daemon", "at-spi-bus-laun"):
                    keep.add(pid)
                    if comm != "Xvfb" and comm != "openbox":
                        roots.append(pid)
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(d))
                except (OSError, ValueError, IndexError):
                    continue
        stack = roots
        wm = self._services.get("wm")
        if wm is not None:
            keep.add(wm.pid)  # the sh that exec'd openbox is openbox
        while stack:
            pid = stack.pop()
            keep.add(pid)
            stack.extend(children.get(pid, []))
        return keep

    def kill_apps(self, grace: float = 1.5) -> None:
        """End every app of this desktop (launched by us, by a config step or by the agent), keep services."""
        for p in self._apps:
            if p.poll() is None:
                _signal_group(p.pid, signal.SIGTERM)
        keep = self._service_tree() if (self._services or self.attach) else set()
        victims = [pid for pid in self.desktop_pids() if pid not in keep]
        for pid in victims:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            alive = [pid for pid in victims if _alive(pid)] + [p.pid for p in self._apps if p.poll() is None]
            if not alive:
                break
            time.sleep(0.05)
        for pid in victims:
            _signal(pid, signal.SIGKILL)
        for p in self._apps:
            if p.poll() is None:
                _signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self._apps.clear()
        if self._services or self.attach:
            # Release anything an action left pressed (keyDown without keyUp, mouseDown without mouseUp).
            self.run(["xdotool", "keyup", "shift", "ctrl", "alt", "super", "mouseup", "1"], timeout=5)

    # -- HOME baseline --------------------------------------------------------------------------------
    def snapshot_home(self) -> None:
        """Remember HOME's current files as the baseline `restore_home` returns to."""
        base = self.run_dir / "baseline"
        if base.exists():
            shutil.rmtree(base)
        shutil.copytree(self.home, base, symlinks=True, ignore=_ignore_run_dir(self.home))
        self._baseline = base

    def restore_home(self) -> None:
        """Put HOME back to the baseline (LibreOffice's profile cache is kept: faster starts)."""
        if self._baseline is None:
            return
        for entry in os.listdir(self.home):
            if entry == _RUN_DIR_NAME or entry == ".config":
                continue
            _remove(self.home / entry)
        for entry in os.listdir(self.home / ".config"):
            if entry == "libreoffice":
                continue
            _remove(self.home / ".config" / entry)
        for item in self._baseline.iterdir():
            if item.name == ".config":
                for sub in item.iterdir():
                    if sub.name != "libreoffice":
                        _copy(sub, self.home / ".config" / sub.name)
            else:
                _copy(item, self.home / item.name)
        lo_user = self.home / _LO_PROFILE / "user"
        lo_user.mkdir(parents=True, exist_ok=True)
        (lo_user / "registrymodifications.xcu").write_text(_LO_REGISTRY)
        for lock in lo_user.glob(".lock*"):
            _remove(lock)
        for log in (self.run_dir / "terminal").glob("*.log"):
            _remove(log)

    def reset(self) -> None:
        """End all apps and restore HOME: the state right after `start()`."""
        self.kill_apps()
        self.restore_home()
        self.instruction = ""
        self.cdp_port = self._default_cdp_port

    def wait_idle(self, timeout: float = 15.0, window: float = 0.5, max_ticks: int = 6) -> bool:
        """Wait until the desktop's processes together use < `max_ticks` CPU ticks (1/100 s) in `window`
        seconds and none of their threads is runnable or in disk wait at its end — i.e. apps have finished
        loading. Ticks alone are not enough: on a saturated machine an app with work left can wait for a CPU
        for a whole window and use no ticks. Returns False if still busy at `timeout`."""
        def busy_thread(pid: int) -> bool:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "RD":
                        return True
            return False

        def activity() -> tuple[int, bool]:
            total, running = 0, False
            for pid in self.desktop_pids():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    total += int(fields[11]) + int(fields[12])
                    running = running or busy_thread(pid)  # one busy thread is enough: the rest are not read
                except (OSError, ValueError, IndexError):
                    continue
            return total, running
        deadline = time.monotonic() + timeout
        before = activity()[0]
        while time.monotonic() < deadline:
            time.sleep(window)
            now, running = activity()
            if now - before < max_ticks and not running:
                return True
            before = now
        return False

    # -- windows --------------------------------------------------------------------------------------
    def windows(self) -> list[tuple[str, str, str]]:
        """Visible top-level windows as (window id, title, WM_CLASS), via xdotool/xprop."""
        r = self.run(["xdotool", "search", "--onlyvisible", "--name", "."], timeout=10)
        out = []
        for wid in r.stdout.split():
            name = self.run(["xdotool", "getwindowname", wid], timeout=5).stdout.strip()
            cls = self.run(["xprop", "-id", wid, "WM_CLASS"], timeout=5).stdout
            cls = ",".join(re.findall(r'"([^"]*)"', cls))
            out.append((wid, name, cls))
        return out

    def find_window(self, name: str, *, strict: bool = False, by_class: bool = False) -> str | None:
        """Id of a visible window whose title (or WM_CLASS) contains / equals `name`; None if none. OSWorld's
        VM runs Google Chrome, this desktop Chromium: a title's "Google Chrome" is found as "Chromium"."""
        if not by_class and name.endswith("Google Chrome"):
            name = name[: -len("Google Chrome")] + "Chromium"
        for wid, title, cls in self.windows():
            hay = cls.split(",") if by_class else [title]
            for h in hay:
                if (h == name) if strict else (name.lower() in h.lower()):
                    return wid
        return None

    def wait_window(self, name: str, timeout: float = 20.0, **kw) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            wid = self.find_window(name, **kw)
            if wid:
                return wid
            time.sleep(0.2)
        raise TaskConfigError(f"no window matching {name!r} appeared within {timeout} s; "
                              f"windows now: {[w[1] for w in self.windows()]}")

    def activate_window(self, name: str, *, strict: bool = False, by_class: bool = False) -> bool:
        wid = self.find_window(name, strict=strict, by_class=by_class)
        if wid is None:
            return False
        self.run(["xdotool", "windowactivate", "--sync", wid], timeout=5)
        return True

    def close_window(self, name: str, *, strict: bool = False, by_class: bool = False) -> bool:
        wid = self.find_window(name, strict=strict, by_class=by_class)
        if wid is None:
            return False
        self.run(["xdotool", "windowclose", wid], timeout=5)
        return True

    # -- observation ----------------------------------------------------------------------------------
    def screenshot(self) -> np.ndarray:
        """The screen as uint8 RGB, shape (height, width, 3)."""
        if self._mss is None:
            try:
                import mss
            except ImportError as e:
                raise DependencyNotInstalled("mss is missing: pip install mss") from e
            factory = getattr(mss, "MSS", None) or mss.mss
            self._mss = factory(display=f":{self.display}".encode() if _mss_wants_bytes() else f":{self.display}")
        shot = self._mss.grab(self._mss.monitors[1])
        arr = np.frombuffer(shot.bgra, dtype=np.uint8).reshape(shot.height, shot.width, 4)
        return np.ascontiguousarray(arr[:, :, 2::-1])

    def settled_screenshot(self, interval: float = 0.05, max_wait: float = 1.0) -> np.ndarray:
        """A screenshot once two grabs `interval` apart are identical (apps draw asynchronously after an
        action: under load the first grab can catch a half-drawn frame), or the last one at `max_wait`."""
        shot = self.screenshot()
        deadline = time.monotonic() + max_wait
        while time.monotonic() < deadline:
            time.sleep(interval)
            again = self.screenshot()
            if np.array_equal(again, shot):
                break
            shot = again
        return shot

    def accessibility_tree(self, max_nodes: int = 4000, timeout: float = 30.0) -> str:
        """OSWorld-style XML of the AT-SPI tree (see a11y.py); "" if AT-SPI did not answer."""
        r = self.run([sys.executable, str(_HERE / "a11y.py"), "--max-nodes", str(max_nodes)], timeout=timeout)
        if r.returncode != 0:
            return ""
        return r.stdout

    def terminal_output(self, max_chars: int = 8000) -> str | None:
        """Text of the newest xterm (its log, escape sequences removed); None if no terminal ran."""
        logs = sorted((self.run_dir / "terminal").glob("*.log"), key=lambda p: p.stat().st_mtime)
        if not logs:
            return None
        raw = logs[-1].read_bytes()[-max_chars * 4:].decode("utf-8", errors="replace")
        return _strip_ansi(raw)[-max_chars:]

    def observe(self, instruction: str | None = None, *, a11y: bool = True, max_nodes: int = 4000) -> dict:
        """OSWorld's observation dict.

        Returns:
            {"screenshot": uint8 (H, W, 3), "accessibility_tree": str (XML, "" when off/unavailable),
             "terminal": str | None, "instruction": str}
        """
        if instruction is not None:
            self.instruction = instruction
        return {
            "screenshot": self.screenshot(),
            "accessibility_tree": self.accessibility_tree(max_nodes) if a11y else "",
            "terminal": self.terminal_output(),
            "instruction": self.instruction,
        }


# ----------------------------------------------------------------------------------------------------
# helpers

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r")


def _strip_ansi(s: str) -> str:
    s = _ANSI.sub("", s)
    out = []
    for ch in s:  # apply backspaces
        if ch == "\b":
            if out:
                out.pop()
        elif ch == "\x07":
            continue
        else:
            out.append(ch)
    return "".join(out)


def _mss_wants_bytes() -> bool:
    try:
        import mss
        major = int(str(getattr(mss, "__version__", "9")).split(".")[0])
        return major < 9
    except Exception:
        return False


def _text(x) -> str:
    if x is None:
        return ""
    return x.decode(errors="replace") if isinstance(x, bytes) else x


def _sh_quote(s: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:=,@%+-]+", s) and "$" not in s:
        return s
    if "$$" in s:  # keep $$ expanding (per-terminal log file names)
        return '"' + s.replace('"', '\\"') + '"'
    return "'" + s.replace("'", "'\\''") + "'"


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _ignore_run_dir(home: Path):
    def ignore(d, names):
        return [n for n in names if Path(d) == home and n == _RUN_DIR_NAME]
    return ignore


def _remove(p: Path) -> None:
    if p.is_symlink() or p.is_file():
        p.unlink(missing_ok=True)
    elif p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists():
        p.unlink(missing_ok=True)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        _signal(pid, sig)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _terminate(p: subprocess.Popen, grace: float = 2.0) -> None:
    if p.poll() is None:
        _signal_group(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass

