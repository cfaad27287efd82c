"""BunshinOSWorld-v0: OSWorld-style desktop tasks (terminal, Mousepad, LibreOffice, Chromium), each episode
in its own forked workspace.

The workspace runs a whole desktop as forkcore services — Xvfb (1920x1080x24 by default), a session D-Bus,
the AT-SPI bus and openbox, with HOME=/home/user — and forkcore's executor with this package's handlers
(envs/osworld/handlers.py), which drive the desktop through a `DesktopSession(attach=True)`. Forking the
workspace copies X server, apps (unsaved text included), HOME and the accessibility bus together.

Observation (dict):
    ===================  ==================================  ==========================================
    key                  space                               meaning
    ===================  ==================================  ==========================================
    screenshot           Box(0, 255, (H, W, 3), uint8)       the screen (W x H = ``screen_size``,
                                                             default 1920 x 1080)
    accessibility_tree   Text (any Unicode, ≤ 2M chars)      OSWorld-style XML of the AT-SPI tree (only
                                                             on-screen nodes); "" with ``a11y=False``
    terminal             Text (≤ 200k chars)                 text of the newest xterm ("" if none ran)
    instruction          Text                                the task's instruction
    last_action_error    Text                                "" or why the last action failed (parse
                                                             error, or the traceback of code that raised)
    ===================  ==================================  ==========================================

Action (``action_space`` keyword):
    ``"pyautogui"`` (default): a Python code string run as OSWorld's VM runs it (``python -c "import
    pyautogui; import time; pyautogui.FAILSAFE = False; <code>"``), or one of ``WAIT`` / ``FAIL`` / ``DONE``.
    Space: Text.
    ``"computer_13"``: OSWorld's 13 structured actions as a JSON string (a dict is accepted as well), e.g.
    ``'{"action_type": "CLICK", "parameters": {"x": 10, "y": 20}}'``, or ``WAIT`` / ``FAIL`` / ``DONE``.
    Space: Text (the JSON); coordinates are checked against ``screen_size``.
Episode end: ``DONE`` → evaluation of the end state, terminated; ``FAIL`` → terminated, reward 1 only for
infeasible tasks; ``max_steps`` (30) → evaluation of the end state, truncated. A malformed action counts
as a step, sets ``last_action_error`` and changes nothing. `info` holds ``last_action_error``, ``task_id``,
``elapsed_steps``. Oracle trajectories (``adapter.oracle_actions``) are pyautogui code.

Other keywords: ``screen_size=(width, height)``, ``a11y=True`` (dump the accessibility tree each step,
~0.3-2 s; False skips it), ``run_as_user=None``.

The account: as in OSWorld's VM, ``user`` (uid 1000, home /home/user, password ``password``, in group
``sudo``) exists in the workspace's /etc (forkcore.layers.user_layer), so ``echo password | sudo -S ...`` and
``sudo -u user ...`` work. ``run_as_user=True`` runs the desktop, the apps and the actions as that user;
that needs CRIU to dump other users' processes: it may in the workspace's own user namespace, and elsewhere
only with CAP_SYS_RESOURCE (prlimit across uids). The default (None) runs them as the user where either holds
(`bunshin doctor`: "user namespaces"), otherwise as root with HOME=/home/user, USER=user.

Reuse and timing: desktop actions are timing-based and the desktop has no fixed clock, so two executions of
the same actions are the same only up to pixels: ``accessibility_tree``, ``terminal``, ``instruction`` and
``last_action_error`` must match exactly between a fresh, cached, forked and speculated run (the adapter's
``exact_fields``; the tree marks ``focused`` on the deepest focused nodes only, as an app may leave it set on a
window for a while after the focus moved inside: a11y.py), the ``screenshot`` may differ (a frame caught
mid-redraw; each observation waits for two identical grabs, up to 1 s). After each action the step waits until
the desktop's processes are idle (at most 10 s) before observing, so the next action meets the same state
whether it comes after a policy's think time or at once (speculation, replay). Replaying recorded calls checks
those fields; a replay that differs drops that part of the prefix tree (``info["bunshin"]["diverged"]``; the
fields that differed in ``"diverged_fields"``) and the calls are executed again. Replayed calls are not
observed (the accessibility tree costs seconds of CPU on a spreadsheet): each is checked by its
``last_action_error``, and the state reached is observed and checked once, before a miss, fork or evaluation
uses it (``replay_observes_every_call``; counted in ``restores["replayed_unobserved"]``): by the background
sync after a run of hits, behind the think time, else on the step's path (``info["bunshin"]["verify_s"]``).

Version history: v0 — first release.
"""
from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from bunshin_gym import ActionError, BunshinEnv, EnvAdapter, StepResult, Task
from bunshin_gym.adapter import EvaluationUnavailable
from bunshin_gym.compat import AppCheck, CompatSuite
from bunshin_gym.spaces import any_text, clip_text, unicode_charset
from forkcore import ServiceSpec, WorkspaceSpec
from forkcore.capabilities import non_root_services_snapshot
from forkcore.layers import user_layer
from forkcore.paths import VENV

from . import compat
from .actions import ACTION_SPACES, SPECIAL_ACTIONS, ActionError as _ParseError, parse_action
from .desktop import DEFAULT_SIZE, desktop_env, desktop_services
from .downloads import STAGING_DIR, fetch, resolve_task
from .errors import OSWorldError, StateUnavailable
from .handlers import DISPLAY, HOME, MARKER
from .judge import judge
from .tasks import TASKS_DIR, load_oracle, load_task, task_from_dict, workspace_task

#: observation size limits (longer texts are cut, saying so): they bound AsyncVectorEnv's shared buffers
A11Y_CHARS, TERMINAL_CHARS = 2_000_000, 200_000
#: The desktop's account, as OSWorld's VM has it: password "password", sudo allowed.
USER, PASSWORD, UID = "user", "password", 1000
#: Written by the one-shot "home" service once /home/user is seeded (the desktop services start after it).
HOME_READY = f"{HOME}/.bunshin-run/home-ready"
_PY = str(VENV / "bin" / "python")


def home_service_argv() -> list[str]:
    """argv of the one-shot root service that seeds /home/user (prepare_home), hands it to `user`, creates
    the X socket dir (root-owned, as X wants it) and writes HOME_READY."""
    code = (f"import os, subprocess; from envs.osworld.desktop import prepare_home; prepare_home({HOME!r}); "
            f"subprocess.run(['chown', '-R', '{USER}:{USER}', {HOME!r}], check=True); "
            "os.makedirs('/tmp/.X11-unix', exist_ok=True); os.chmod('/tmp/.X11-unix', 0o1777); "
            f"open({HOME_READY!r}, 'w').close()")
    return [_PY, "-c", code]


class OSWorldAdapter(EnvAdapter):
    name = "osworld"
    exact_fields = ("accessibility_tree", "terminal", "instruction", "last_action_error")  # see module doc
    replay_observes_every_call = False  # a step waits for an idle desktop, whether or not it observes

    def __init__(self, action_space: str = "pyautogui", screen_size: tuple[int, int] = DEFAULT_SIZE,
                 a11y: bool = True, run_as_user: bool | None = None) -> None:
        if action_space not in ACTION_SPACES:
            raise ValueError(f"action_space={action_space!r}: expected one of {ACTION_SPACES}")
        if len(screen_size) != 2 or min(int(x) for x in screen_size) < 200:
            raise ValueError(f"screen_size={screen_size!r}: expected (width, height), each >= 200")
        self.space = action_space
        self.screen_size = (int(screen_size[0]), int(screen_size[1]))
        self.a11y = bool(a11y)
        self.run_as_user = non_root_services_snapshot() if run_as_user is None else bool(run_as_user)

    # ---- workspace -------------------------------------------------------------------------------------
    def workspace_spec(self) -> WorkspaceSpec:
        path = desktop_env(HOME, DISPLAY, python_bin=str(VENV / "bin"))["PATH"]
        services = [ServiceSpec.make("home", home_service_argv(), ready=f"file:{HOME_READY}", ready_timeout_s=60)]
        for svc in desktop_services(HOME, DISPLAY, self.screen_size, marker=MARKER):
            env = {**svc.env, "PATH": path}
            ready = None
            if svc.name == "xvfb":
                ready = f"unix:/tmp/.X11-unix/X{DISPLAY}"
            elif svc.name == "dbus":
                ready = "unix:" + env["DBUS_SESSION_BUS_ADDRESS"].split("=", 1)[1]
            services.append(ServiceSpec.make(svc.name, svc.argv, env, cwd=HOME, ready=ready, ready_timeout_s=60,
                                             user=USER if self.run_as_user else None))
        account = user_layer(USER, UID, PASSWORD, sudo=True, hostname="ubuntu")
        return WorkspaceSpec(
            name="osworld",
            services=tuple(services),
            handlers=("envs.osworld.handlers",),
            layers=(str(account),),
            executor_user=USER if self.run_as_user else None,
            env=(("HOME", HOME), ("BUNSHIN_OSWORLD_A11Y", "1" if self.a11y else "0")),
            hostname="ubuntu")

    def warmup_call(self):
        return "osworld.warmup", {"screen_size": list(self.screen_size)}

    def restore_checks(self) -> CompatSuite:
        """Headful Chromium, Calc, Writer, Impress, GIMP, VLC, Thunderbird, Mousepad, xterm and AT-SPI, all started
        before the snapshot, each made to create a new process, window or document, or to play, or to take input
        in the clone (envs/osworld/compat.py)."""
        def check(app: str, packages: tuple[str, ...], name: str, **params) -> AppCheck:
            return AppCheck(app, packages, f"osworld.check_{name}", params, timeout_s=180)

        return CompatSuite(
            env="osworld", spec=self.workspace_spec(),
            prepare=(self.warmup_call(), ("osworld.check_prepare", {"apps": list(compat.ALL_APPS)})),
            checks=(check("Chromium (headful, CDP)", ("chromium", "playwright"), "chromium"),
                    check("xterm", ("xterm",), "xterm"),
                    check("Mousepad", ("mousepad",), "mousepad"),
                    check("LibreOffice Calc", ("libreoffice-calc", "libreoffice-core"), "libreoffice", kind="calc"),
                    check("LibreOffice Writer", ("libreoffice-writer", "libreoffice-core"), "libreoffice",
                          kind="writer"),
                    check("LibreOffice Impress", ("libreoffice-impress", "libreoffice-core"), "impress"),
                    check("GIMP", ("gimp",), "gimp"),
                    check("VLC", ("vlc",), "vlc"),
                    check("Thunderbird", ("thunderbird",), "thunderbird"),
                    check("D-Bus + AT-SPI", ("at-spi2-core", "dbus", "pcmanfm"), "atspi")))

    # ---- tasks -----------------------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return sorted(p.stem for p in TASKS_DIR.glob("*.json"))

    def load_task(self, task_id=None, task_config=None) -> Task:
        try:
            if task_config is not None:
                if isinstance(task_config, dict):
                    t = task_from_dict(task_config)
                else:
                    t = load_task(task_config)
            else:
                if not isinstance(task_id, str) or task_id not in self.task_ids():
                    near = ", ".join(self.task_ids()[:6])
                    raise ValueError(f"task_id={task_id!r}: no such OSWorld task; expected one of {near}, … "
                                     "(see `bunshin tasks list --env osworld`)")
                t = load_task(TASKS_DIR / f"{task_id}.json")
            config = t.to_dict()
            # fetched on the host now (cached): the bytes' hashes make the files part of the task's identity
            downloads = resolve_task(config, progress=True)
            config.pop("bunshin_downloads", None)
            if downloads:
                config["bunshin_downloads"] = {u: d.sha256 for u, d in downloads.items()}
        except OSWorldError as e:
            raise ValueError(str(e)) from e
        return Task(id=t.id, config=config, goal=t.instruction)

    def host_files(self, task: Task) -> dict[str, Path]:
        out = {}
        staged = workspace_task(task.config).get("bunshin_downloads") or {}  # never an expected file
        for url, sha in staged.items():
            d = fetch(url)  # from the cache, checked against its sha256
            if d.sha256 != sha:
                raise ValueError(f"the cached download of {url} changed since the task was loaded (sha256 "
                                 f"{sha[:12]}… → {d.sha256[:12]}…): load the task again")
            out[f"{STAGING_DIR}/{sha}"] = d.path
        return out

    def reset_call(self, task: Task):
        return "osworld.reset", {"task": workspace_task(task.config), "action_space": self.space,
                                 "screen_size": list(self.screen_size), "a11y": self.a11y}

    def step_call(self, action: str, observe: bool = True):
        space, _, body = action.partition(":")
        if space not in ACTION_SPACES:
            raise ActionError(f"not a canonical OSWorld action: {action[:80]!r}")
        if body in SPECIAL_ACTIONS:
            raw: Any = body
        elif space == "computer_13":
            raw = json.loads(body)
        else:
            raw = body
        return "osworld.step", {"action": raw, "action_space": space, "a11y": self.a11y, "observe": observe}

    def observe_call(self):
        return "osworld.observe", {}

    def evaluate(self, task: Task, answer, call) -> float:
        """Judged here, outside the workspace (judge.py): the workspace only hands out its state."""
        try:
            return judge(task_from_dict(task.config), answer or None, call)
        except StateUnavailable as e:
            raise EvaluationUnavailable(f"task {task.id}: {e}") from e

    # ---- observations ----------------------------------------------------------------------------------
    def decode(self, raw: Any, task: Task) -> StepResult:
        from PIL import Image

        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(raw["screenshot_png"]))).convert("RGB"), dtype=np.uint8)
        obs = {"screenshot": img,
               "accessibility_tree": clip_text(_printable(raw.get("accessibility_tree") or ""), A11Y_CHARS)
               if self.a11y else "",
               "terminal": clip_text(_printable(raw.get("terminal") or ""), TERMINAL_CHARS),
               "instruction": task.goal, "last_action_error": self.decode_error(raw)}
        return StepResult(obs, obs["last_action_error"], bool(raw.get("done", False)), raw.get("answer"))

    def decode_error(self, raw: Any) -> str:
        return clip_text(_printable(raw.get("last_action_error", "") or ""), TERMINAL_CHARS)

    def observation_seconds(self, raw: Any) -> float:
        # the screenshot and the accessibility tree (seconds of CPU on a spreadsheet), not the idle wait
        return float((raw.get("obs_seconds") or {}).get("total", 0.0))

    def observation_space(self) -> spaces.Dict:
        w, h = self.screen_size
        return spaces.Dict({
            "screenshot": spaces.Box(0, 255, (h, w, 3), np.uint8),
            "accessibility_tree": any_text(A11Y_CHARS),
            "terminal": any_text(TERMINAL_CHARS),
            "instruction": any_text(8192),
            "last_action_error": any_text(TERMINAL_CHARS),
        })

    def action_space(self) -> spaces.Space:
        return any_text(8192, min_length=1)

    # ---- actions ---------------------------------------------------------------------------------------
    def canonical_action(self, action: Any) -> str:
        if self.space == "computer_13" and isinstance(action, str) and action.strip() not in SPECIAL_ACTIONS:
            try:
                action = json.loads(action)
            except json.JSONDecodeError as e:
                raise ActionError(f"computer_13 action must be JSON like {{\"action_type\": \"CLICK\", "
                                  f"\"parameters\": {{\"x\": 10, \"y\": 20}}}} or WAIT/FAIL/DONE; "
                                  f"not valid JSON: {e}") from e
        parsed = parse_action(action, self.space, self.screen_size)
        if isinstance(parsed, _ParseError):
            raise ActionError(parsed.message)
        return parsed.canonical

    def render_prompt(self, observation: dict) -> str:
        parts = [f"INSTRUCTION: {observation['instruction']}",
                 f"PREVIOUS ACTION ERROR: {observation['last_action_error'] or 'none'}"]
        if observation.get("terminal"):
            parts.append(f"TERMINAL:\n{observation['terminal'][-4000:]}")
        parts.append(f"ACCESSIBILITY TREE:\n{observation['accessibility_tree']}")
        return "\n".join(parts)

    def candidate_actions(self, observation: dict) -> list[str]:
        out = []
        for x, y, w, h in re.findall(r'screencoord="\((-?\d+), (-?\d+)\)"[^>]*?size="\((\d+), (\d+)\)"',
                                     observation.get("accessibility_tree", "")):
            cx, cy = int(x) + int(w) // 2, int(y) + int(h) // 2
            if int(w) > 0 and int(h) > 0 and 0 <= cx < self.screen_size[0] and 0 <= cy < self.screen_size[1]:
                out.append(f"pyautogui.click({cx}, {cy})")
        out = list(dict.fromkeys(out))[:40]
        out += ["pyautogui.press('enter')", "pyautogui.typewrite('hello')", "pyautogui.hotkey('ctrl', 's')", "WAIT"]
        if self.space == "computer_13":
            return [json.dumps({"action_type": "PRESS", "parameters": {"key": "enter"}}),
                    json.dumps({"action_type": "TYPING", "parameters": {"text": "hello"}}), "WAIT"]
        return out

    def oracle_actions(self, task: Task) -> list:
        if self.space != "pyautogui":
            raise NotImplementedError("oracle trajectories are pyautogui code; make the env with action_space='pyautogui'")
        try:
            return load_oracle(task.id)
        except FileNotFoundError as e:
            raise NotImplementedError(f"task {task.id!r} has no oracle trajectory (envs/osworld/oracles/)") from e


def _printable(s: str) -> str:
    """`s` restricted to the observation's Text charset (terminal logs may hold stray control characters)."""
    if s.replace("\n", "").replace("\t", "").isprintable():
        return s
    cs = unicode_charset()
    return "".join(c for c in s if c in cs)


class OSWorldEnv(BunshinEnv):
    __doc__ = __doc__
    adapter_class = OSWorldAdapter
