"""The in-workspace RPC surface of the OSWorld env (thin adapters; the logic lives in the other modules).

Owns: :func:`register`, which adds ``osworld.*`` handlers to forkcore's in-workspace executor, the JSON
shapes of their answers, and the constants the workspace spec and the handlers must agree on (display,
marker, HOME). The desktop's services (Xvfb, dbus, AT-SPI, openbox) are started by forkcore's init from
envs/osworld/env.py's spec; the handlers drive them through a `DesktopSession(attach=True)` created lazily
on the first call (HOME=/home/user).

Handlers (keyword arguments in, JSON-serialisable dicts out):

- ``osworld.warmup(screen_size: list = [1920, 1080])`` -> ``{"ready": true, "seconds": float}``: attaches the
  session (waits for the window manager, records HOME's baseline) and loads the observation code once.
- ``osworld.reset(task: dict, action_space: str = "pyautogui", screen_size: list | None, a11y: bool | None)``
  -> observation: ``screenshot_png`` (base64 PNG, screen size), ``accessibility_tree`` (OSWorld XML, ""
  when off or unavailable), ``terminal`` (str | None: newest xterm's text), ``instruction`` (str),
  ``last_action_error`` (""), ``seconds`` ({"setup", "observe"}). Ends every app, restores HOME, runs the
  task's config steps.
- ``osworld.step(action: str | dict, action_space: str | None, a11y: bool | None, observe: bool = True)`` ->
  observation + ``last_action_error`` (str), ``done`` (bool: DONE or FAIL), ``answer`` ("DONE" / "FAIL" when
  done, else None), ``seconds`` ({"action", "observe"}).
  ``a11y`` (default: $BUNSHIN_OSWORLD_A11Y != "0") turns the accessibility-tree dump on or off;
  ``observe=False`` leaves out the observation (the step still waits for an idle desktop): replays.
- ``osworld.observe()`` -> observation of the current state (no action).
- ``osworld.collect(getter: dict)`` -> ``{"value": ...}``: one evaluator getter that reads the desktop's state
  (not the JUDGE_GETTERS), its value as JSON, a file it copied out as ``{"file": name, "b64": bytes}``. The
  judge (envs/osworld/judge.py) runs outside the workspace; nothing here scores or sees expected values.
- ``osworld.postconfig(steps: list)`` -> ``{"ok": true}``: the evaluator's postconfig steps, before collecting.
- ``osworld.check_prepare(apps)``, ``osworld.check_chromium()``, ``osworld.check_libreoffice(kind)``,
  ``osworld.check_impress()``, ``osworld.check_gimp()``, ``osworld.check_vlc()``, ``osworld.check_thunderbird()``,
  ``osworld.check_mousepad()``, ``osworld.check_xterm()``, ``osworld.check_atspi()`` -> ``{"ok": bool,
  "detail": str}``: the restore checks of compat.py (`bunshin doctor --deep`).
"""
from __future__ import annotations

import base64
import io
import os
import time

from . import compat
from .actions import ACTION_SPACES, execute
from .desktop import CDP_PORT, DEFAULT_SIZE, VM_HOME, DesktopSession
from .errors import OSWorldError
# Imported once, when the executor starts (before any action): a getter module the agent rewrites later on disk
# is never what osworld.collect runs. The workspace holds no metric (evaluators/ is judge-only).
from .getters import JUDGE_GETTERS, cache_dir, get_value

#: X display of the desktop inside a workspace (its own /tmp and network namespace: no clash).
DISPLAY = 0
#: BUNSHIN_DESKTOP marker of the desktop's services and apps inside a workspace.
MARKER = "osworld"
HOME = VM_HOME
#: after an action, wait at most this long for the desktop's processes to go idle (< 12% CPU for 0.25 s)
STEP_IDLE_TIMEOUT_S = 10.0


def _png_b64(arr) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode("ascii")


class _Runtime:
    """The executor-wide state: one attached desktop session, the current task and action space."""

    def __init__(self) -> None:
        self.session: DesktopSession | None = None
        self.task = None
        self.action_space = "pyautogui"
        self.a11y = os.environ.get("BUNSHIN_OSWORLD_A11Y", "1") != "0"

    def _session(self, screen_size=None) -> DesktopSession:
        if self.session is None:
            size = tuple(int(x) for x in (screen_size or DEFAULT_SIZE))
            s = DesktopSession(HOME, DISPLAY, size, cdp_port=CDP_PORT, marker=MARKER, attach=True)
            s.start(timeout=60.0)
            self.session = s
        return self.session

    def _obs(self) -> dict:
        s = self.session
        t0 = time.monotonic()
        shot = s.settled_screenshot()
        t1 = time.monotonic()
        tree = s.accessibility_tree() if self.a11y else ""
        t2 = time.monotonic()
        out = {"screenshot_png": _png_b64(shot), "accessibility_tree": tree, "terminal": s.terminal_output(),
               "instruction": s.instruction}
        out["obs_seconds"] = {"screenshot": t1 - t0, "a11y": t2 - t1, "total": time.monotonic() - t0}
        return out

    def warmup(self, screen_size=None) -> dict:
        t0 = time.monotonic()
        s = self._session(screen_size)
        s.screenshot()
        s.accessibility_tree()
        return {"ready": True, "seconds": time.monotonic() - t0}

    def reset(self, task: dict, action_space: str = "pyautogui", screen_size=None, a11y: bool | None = None) -> dict:
        from .harness import setup_task
        from .tasks import task_from_dict

        if action_space not in ACTION_SPACES:
            raise OSWorldError(f"action_space={action_space!r}; expected one of {ACTION_SPACES}")
        t = task_from_dict(task, judged=False)  # the host keeps the evaluator: nothing here judges
        s = self._session(screen_size)
        self.task, self.action_space = t, action_space
        if a11y is not None:
            self.a11y = bool(a11y)
        setup_s = setup_task(s, t, reset=True)
        s.wait_idle(timeout=10)
        t0 = time.monotonic()
        out = self._obs()
        out.update(last_action_error="", seconds={"setup": setup_s, "observe": time.monotonic() - t0})
        return out

    def _need_task(self):
        if self.task is None or self.session is None:
            raise OSWorldError("no episode: call osworld.reset(task=...) first")
        return self.task

    def step(self, action, action_space: str | None = None, a11y: bool | None = None, observe: bool = True) -> dict:
        self._need_task()
        if a11y is not None:
            self.a11y = bool(a11y)
        r = execute(self.session, action, action_space or self.action_space)
        t0 = time.monotonic()
        # Observe a quiescent desktop: the next action then meets the same state however long the policy
        # thought (a speculated, replayed or cached call runs with no think time before it).
        self.session.wait_idle(timeout=STEP_IDLE_TIMEOUT_S, window=0.25, max_ticks=3)
        out = self._obs() if observe else {}
        kind = r.action.kind if r.action is not None else None
        out.update(last_action_error=r.error, done=r.done, answer=kind if r.done else None,
                   seconds={"action": r.seconds, "observe": time.monotonic() - t0})
        return out

    def observe(self) -> dict:
        self._need_task()
        out = self._obs()
        out["last_action_error"] = ""
        return out

    def collect(self, getter: dict) -> dict:
        """One state getter's value for the judge outside (envs/osworld/judge.py), as data."""
        self._need_task()
        if getter.get("type") in JUDGE_GETTERS:
            raise OSWorldError(f"getter {getter.get('type')!r} reads the task's own data: the judge runs it")
        return {"value": _export(get_value(self.session, getter), cache_dir(self.session))}

    def postconfig(self, steps: list) -> dict:
        """The evaluator's postconfig steps (e.g. save the document), run before the judge collects."""
        from .tasks import run_config

        self._need_task()
        run_config(self.session, steps)
        return {"ok": True}


#: largest file one getter may hand out (an agent can make files of any size)
MAX_COLLECTED_BYTES = 512 * 2**20


def _export(value, cache: str):
    """A getter's value as JSON data, each file it copied into the evaluation cache as its bytes."""
    if isinstance(value, str) and os.path.dirname(value) == cache.rstrip("/") and os.path.isfile(value):
        size = os.path.getsize(value)
        if size > MAX_COLLECTED_BYTES:
            raise ValueError(f"{os.path.basename(value)}: {size} bytes, more than a getter hands out "
                             f"({MAX_COLLECTED_BYTES})")
        with open(value, "rb") as f:
            return {"file": os.path.basename(value), "b64": base64.b64encode(f.read()).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): _export(v, cache) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_export(v, cache) for v in value]
    return value


def register(executor) -> None:
    """Register the ``osworld.*`` handlers on ``executor`` (anything with ``register(name, fn)``)."""
    rt = _Runtime()
    executor.register("osworld.warmup", rt.warmup)
    executor.register("osworld.reset", rt.reset)
    executor.register("osworld.step", rt.step)
    executor.register("osworld.observe", rt.observe)
    executor.register("osworld.collect", rt.collect)
    executor.register("osworld.postconfig", rt.postconfig)
    for name in ("prepare", "chromium", "libreoffice", "impress", "gimp", "vlc", "thunderbird", "mousepad", "xterm",
                 "atspi"):
        fn = getattr(compat, name if name == "prepare" else f"check_{name}")
        executor.register(f"osworld.check_{name}", lambda _fn=fn, **kw: _fn(rt._session(), **kw))
