"""BunshinWebArena-v0: WebArena-style shopping tasks, each episode in its own forked workspace.

The workspace runs the shopping site (Flask + SQLite, seeded deterministically), headless Chromium driven
by Playwright and forkcore's executor with this package's handlers; forking it copies site, database and
browser together.

Observation (dict):
    ===================  ==================================  ==========================================
    key                  space                               meaning
    ===================  ==================================  ==========================================
    screenshot           Box(0, 255, (720, 1280, 3), uint8)  viewport pixels (caret hidden, no animation)
    axtree               Text (any Unicode)                  ``[id] role 'name'`` lines, WebArena style
    url                  Text                                URL of the active tab
    open_pages_urls      TextList (≤ 32 Text)                URLs of all tabs (the first 32)
    goal                 Text                                the task's intent
    last_action_error    Text                                "" or why the last action failed
    ===================  ==================================  ==========================================

Action: a string in WebArena's syntax (``click [12]``, ``type [5] [shoes] [1]``, ``stop [answer]`` …) or
BrowserGym's function style (``click('12')``, ``fill('5', 'shoes')``, ``send_msg_to_user('…')`` …).
Options: ``viewport`` ((1280, 720)), ``headless`` (True; False runs Chromium headful on an Xvfb inside the
workspace, e.g. to record the desktop).
Episode end: ``stop``/``send_msg_to_user`` → evaluation, terminated; ``max_steps`` (30) → evaluation of an
empty answer, truncated. `info` holds ``last_action_error``, ``task_id``, ``elapsed_steps``.

Reuse: the site and browser are deterministic (seeded data, fixed clock, caret hidden, no animation): every
observation key, pixels included, is identical between a fresh, cached, forked and speculated run.

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
from bunshin_gym.compat import AppCheck, CompatSuite
from bunshin_gym.spaces import any_text, clip_text, text_list
from forkcore import ServiceSpec, WorkspaceSpec

from .actions import is_read_only, parse_action
from .errors import ActionParseError, TaskConfigError
from .handlers import DEFAULT_PORT, site_service_argv
from .tasks import load_oracle, load_task, task_from_dict, task_ids

DB_PATH = "/srv/webarena/shop.db"
#: observation size limits (longer texts are cut, saying so): they bound AsyncVectorEnv's shared buffers
AXTREE_CHARS, URL_CHARS, MAX_TABS = 1_000_000, 8192, 32
SITE_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class WebArenaAdapter(EnvAdapter):
    name = "webarena"

    def __init__(self, viewport: tuple[int, int] = (1280, 720), headless: bool = True) -> None:
        if len(viewport) != 2 or min(viewport) < 100:
            raise ValueError(f"viewport={viewport!r}: expected (width, height), each >= 100")
        self.viewport, self.headless = (int(viewport[0]), int(viewport[1])), bool(headless)

    def workspace_spec(self) -> WorkspaceSpec:
        services = [ServiceSpec.make("site", site_service_argv(DB_PATH, DEFAULT_PORT), ready=f"tcp:{DEFAULT_PORT}",
                                     ready_timeout_s=120)]
        env = [("BUNSHIN_WEBARENA_URL", SITE_URL)]
        if not self.headless:  # headful Chromium on the workspace's own X server
            w, h = self.viewport
            services.insert(0, ServiceSpec.make("xvfb", ["Xvfb", ":99", "-screen", "0", f"{w}x{h + 200}x24", "-nolisten",
                                                         "tcp", "-noreset"], ready="file:/tmp/.X11-unix/X99"))
            env.append(("DISPLAY", ":99"))
        return WorkspaceSpec(name="webarena" if self.headless else "webarena-headful", services=tuple(services),
                             handlers=("envs.webarena.handlers",), env=tuple(env), hostname="shopping")

    def warmup_call(self):
        first = load_task(task_ids()[0]).to_dict()  # starts Chromium once, before the base snapshot
        return "webarena.reset", {"task": first, "viewport": list(self.viewport), "headless": self.headless}

    def task_ids(self) -> list[str]:
        return [str(i) for i in task_ids()]

    def load_task(self, task_id=None, task_config=None) -> Task:
        try:
            if task_config is not None:
                raw = task_config if isinstance(task_config, dict) else json.loads(Path(task_config).read_text())
                cfg = task_from_dict(raw, source="" if isinstance(task_config, dict) else str(task_config))
            else:
                if not re.fullmatch(r"\d+", str(task_id)):
                    raise TaskConfigError(f"task_id={task_id!r}: expected one of {', '.join(self.task_ids()[:8])}, …")
                cfg = load_task(int(task_id))
        except (OSError, json.JSONDecodeError) as e:
            raise TaskConfigError(f"cannot read task config {task_config!r}: {e}") from e
        return Task(id=str(cfg.task_id), config=cfg.to_dict(), goal=cfg.intent)

    def reset_call(self, task: Task):
        return "webarena.reset", {"task": task.config, "viewport": list(self.viewport), "headless": self.headless}

    def step_call(self, action: str, observe: bool = True):
        return "webarena.step", {"action": action}  # always observes: see replay_observes_every_call

    def evaluate_call(self, answer):
        return "webarena.evaluate", {"answer": answer}

    def decode(self, raw: Any, task: Task) -> StepResult:
        from PIL import Image

        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(raw["screenshot_png"]))).convert("RGB"), dtype=np.uint8)
        obs = {"screenshot": img, "axtree": clip_text(raw["axtree"], AXTREE_CHARS), "url": clip_text(raw["url"], URL_CHARS),
               "open_pages_urls": tuple(clip_text(u, URL_CHARS) for u in raw["open_pages_urls"][:MAX_TABS]),
               "goal": task.goal, "last_action_error": clip_text(raw.get("last_action_error", ""), URL_CHARS)}
        return StepResult(obs, obs["last_action_error"], bool(raw.get("done", False)), raw.get("answer"))

    def observation_space(self) -> spaces.Dict:
        w, h = self.viewport
        return spaces.Dict({
            "screenshot": spaces.Box(0, 255, (h, w, 3), np.uint8),
            "axtree": any_text(AXTREE_CHARS),
            "url": any_text(URL_CHARS),
            "open_pages_urls": text_list(MAX_TABS, URL_CHARS),
            "goal": any_text(8192),
            "last_action_error": any_text(URL_CHARS),
        })

    def action_space(self) -> spaces.Space:
        return any_text(8192, min_length=1)

    def canonical_action(self, action: Any) -> str:
        if not isinstance(action, str):
            raise ActionError(f"action must be a string like 'click [12]', got {type(action).__name__}")
        try:
            return parse_action(action).canonical()
        except ActionParseError as e:
            raise ActionError(str(e)) from e

    def is_read_only(self, action: str) -> bool:
        return is_read_only(parse_action(action))

    def render_prompt(self, observation: dict) -> str:
        return (f"OBJECTIVE: {observation['goal']}\nURL: {observation['url']}\n"
                f"OPEN TABS: {', '.join(observation['open_pages_urls'])}\n"
                f"PREVIOUS ACTION ERROR: {observation['last_action_error'] or 'none'}\n"
                f"OBSERVATION:\n{observation['axtree']}")

    def candidate_actions(self, observation: dict) -> list[str]:
        out = []
        for line in observation["axtree"].splitlines():
            m = re.match(r"\s*\[(\w+)\]\s+(link|button|textbox|combobox|checkbox|searchbox)\b", line)
            if m:
                out.append(f"type [{m.group(1)}] [shoes] [1]" if m.group(2) in ("textbox", "searchbox")
                           else f"click [{m.group(1)}]")
        return out + ["scroll [down]", "go_back"]

    def oracle_actions(self, task: Task) -> list[str]:
        return load_oracle(int(task.id))

    def restore_checks(self) -> CompatSuite:
        """Chromium (new page, popup, second origin) and the site (a POST that writes SQLite) in a clone."""
        return CompatSuite(
            env="webarena", spec=self.workspace_spec(), prepare=(self.warmup_call(),),
            checks=(AppCheck(f"Chromium ({'headless' if self.headless else 'headful'}, Playwright)",
                             ("chromium", "playwright"), "webarena.check_chromium"),
                    AppCheck("shopping site (Flask + SQLite)", ("flask", "libsqlite3-0"), "webarena.check_site",
                             {"db_path": DB_PATH})))

    def action_grammar(self) -> str:
        # ids are DOM-order numbers; free text is bounded so a constrained completion ends within max_tokens
        return ('root ::= click | type | scroll | goback | stop\n'
                'click ::= "click [" [0-9]{1,5} "]"\n'
                'type ::= "type [" [0-9]{1,5} "] [" [^\\]\\n]{0,60} "] [1]"\n'
                'scroll ::= "scroll [" ("up" | "down") "]"\n'
                'goback ::= "go_back"\n'
                'stop ::= "stop [" [^\\]\\n]{0,60} "]"\n')


class WebArenaEnv(BunshinEnv):
    __doc__ = __doc__
    adapter_class = WebArenaAdapter
