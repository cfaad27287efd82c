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

Site from a Docker image (e.g. WebArena's own ``shopping_final_0712``; README, "The real WebArena shopping
site"): ``site_image`` (None: the built-in site) runs the image as the workspace's service (forkcore.images:
its filesystem exported once into a layer, its Entrypoint/Cmd/Env/User kept), so every episode forks the live
site, database included. ``__SHOPPING__`` maps to ``http://127.0.0.1:<site_port>`` inside the workspace.
``docker_host`` (None: DOCKER_HOST or the default socket) is the daemon holding the image, needed only to
export it; ``site_port`` (None: the image's first exposed TCP port); ``site_credentials`` ((email, password);
None: WebArena's shopping customer), signed in through Magento's customer form when a task has
``require_login``; ``site_setup`` (shell commands run in the image's root once the site answers, before the
base snapshot, ``{base_url}`` replaced: e.g. Magento's base-URL commands); ``task_dir`` (a folder of WebArena
config files such as ``config_files``; its shopping tasks become the env's task ids; without it a site image
needs ``task_config``); ``site_memory_mb`` (4096) and ``site_disk_mb`` (2048), the workspace's memory limit and
the size of its writable layer (memory too: see README). All of them are part of the snapshot and cache
identity, the image by its content.
Episode end: ``stop``/``send_msg_to_user`` → evaluation, terminated; ``max_steps`` (30) → evaluation of an
empty answer, truncated. `info` holds ``last_action_error``, ``task_id``, ``elapsed_steps``.

Reuse: the built-in site and the browser are deterministic (seeded data, fixed clock, caret hidden, no
animation): every observation key, pixels included, is identical between a fresh, cached, forked and
speculated run. A site image is as deterministic as its site (the stand-in's pages are; a clock is not).

Version history: v0 — first release.
"""
from __future__ import annotations

import base64
import dataclasses
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
from bunshin_gym.spaces import any_text, clip_text, text_list
from forkcore import ServiceSpec, WorkspaceSpec
from forkcore.images import ImageError

from .actions import is_read_only, parse_action
from .errors import ActionParseError, StateUnavailable, TaskConfigError
from .handlers import DEFAULT_PORT, site_service_argv
from .judge import WorkspaceState, judge
from .tasks import load_oracle, load_task, shopping_task_ids, task_from_dict, task_ids, workspace_task

DB_PATH = "/srv/webarena/shop.db"
#: observation size limits (longer texts are cut, saying so): they bound AsyncVectorEnv's shared buffers
AXTREE_CHARS, URL_CHARS, MAX_TABS = 1_000_000, 8192, 32
SITE_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
#: WebArena's shopping customer (its environment config): a site image signs in as this customer by default
WEBARENA_SHOPPING_CUSTOMER = ("emma.lopez@hotmail.com", "Password.123")
#: what a site image's workspace opens before its base snapshot (starts Chromium on the site's front page)
WARMUP_TASK = {"start_urls": ["__SHOPPING__"], "require_login": False}


class WebArenaAdapter(EnvAdapter):
    name = "webarena"

    def __init__(self, viewport: tuple[int, int] = (1280, 720), headless: bool = True, site_image: str | None = None,
                 docker_host: str | None = None, site_port: int | None = None,
                 site_credentials: tuple[str, str] | None = None, site_setup: tuple[str, ...] = (),
                 site_memory_mb: int = 4096, site_disk_mb: int = 2048, task_dir: str | None = None) -> None:
        if len(viewport) != 2 or min(viewport) < 100:
            raise ValueError(f"viewport={viewport!r}: expected (width, height), each >= 100")
        self.viewport, self.headless = (int(viewport[0]), int(viewport[1])), bool(headless)
        if site_image is None and (docker_host or site_port or site_credentials or site_setup
                                   or (site_memory_mb, site_disk_mb) != (4096, 2048)):
            raise ValueError("docker_host, site_port, site_credentials, site_setup, site_memory_mb and site_disk_mb "
                             "configure a site_image; give site_image= too")
        if min(int(site_memory_mb), int(site_disk_mb)) < 64:
            raise ValueError(f"site_memory_mb={site_memory_mb!r}, site_disk_mb={site_disk_mb!r}: expected MB >= 64")
        if site_credentials is not None and (len(site_credentials) != 2
                                             or not all(isinstance(x, str) for x in site_credentials)):
            raise ValueError(f"site_credentials={site_credentials!r}: expected (email, password)")
        if isinstance(site_setup, str) or not all(isinstance(c, str) for c in site_setup):
            raise ValueError(f"site_setup={site_setup!r}: expected a sequence of shell commands")
        if task_dir is not None and not Path(task_dir).is_dir():
            raise ValueError(f"task_dir={task_dir!r} is not a directory of WebArena config files (<id>.json)")
        self.site_image, self.docker_host = site_image, docker_host
        self.site_port = None if site_port is None else int(site_port)
        self.site_credentials = tuple(site_credentials) if site_credentials else None
        self.site_setup, self.task_dir = tuple(site_setup), task_dir
        self.site_memory_mb, self.site_disk_mb = int(site_memory_mb), int(site_disk_mb)
        self._site: tuple[WorkspaceSpec, str] | None = None  # (spec, base URL) of site_image, asked once
        self._task_dir_ids: list[str] | None = None

    def _image_site(self) -> tuple[WorkspaceSpec, str]:
        """The image's workspace spec (its filesystem exported once) and the URL its site answers at."""
        if self._site is None:
            from forkcore.images import image_config, image_spec

            client = _docker_client(self.docker_host)
            ports = image_config(self.site_image, client).exposed_tcp_ports
            port = self.site_port or (ports[0] if ports else None)
            if port is None:
                raise ValueError(f"site_image={self.site_image!r} exposes no TCP port: give site_port=")
            spec = image_spec(self.site_image, client=client, ready=f"tcp:{port}", hostname="shopping",
                              handlers=("envs.webarena.handlers",), memory_max_mb=self.site_memory_mb,
                              disk_mb=self.site_disk_mb)
            self._site = (spec, "http://127.0.0.1" + ("" if port == 80 else f":{port}"))  # as Chromium writes it
        return self._site

    def workspace_spec(self) -> WorkspaceSpec:
        if self.site_image is not None:
            spec = self._image_site()[0]
        else:
            spec = WorkspaceSpec(name="webarena", handlers=("envs.webarena.handlers",),
                                 env=(("BUNSHIN_WEBARENA_URL", SITE_URL),), hostname="shopping",
                                 services=(ServiceSpec.make("site", site_service_argv(DB_PATH, DEFAULT_PORT),
                                                            ready=f"tcp:{DEFAULT_PORT}", ready_timeout_s=120),))
        if self.headless:
            return spec
        w, h = self.viewport  # headful Chromium on the workspace's own X server
        xvfb = ServiceSpec.make("xvfb", ["Xvfb", ":99", "-screen", "0", f"{w}x{h + 200}x24", "-nolisten", "tcp",
                                         "-noreset"], ready="file:/tmp/.X11-unix/X99")
        return dataclasses.replace(spec, name=f"{spec.name}-headful", services=(xvfb, *spec.services),
                                   env=(*spec.env, ("DISPLAY", ":99")))

    def _reset_args(self, task: dict) -> dict:
        """`task`: what its workspace gets (tasks.workspace_task), never its evaluator."""
        args = {"task": task, "viewport": list(self.viewport), "headless": self.headless}
        if self.site_image is not None:  # the built-in site's calls stay as they were: their cache keys too
            email, password = self.site_credentials or WEBARENA_SHOPPING_CUSTOMER
            args.update(base_url=self._image_site()[1], login={"form": "magento", "email": email,
                                                               "password": password})
        return args

    def warmup_call(self):
        if self.site_image is None:
            first = workspace_task(load_task(task_ids()[0]))  # starts Chromium once, before the base snapshot
            return "webarena.reset", self._reset_args(first)
        from forkcore.images import IMAGE_ROOT

        return "webarena.warmup", {"site_setup": list(self.site_setup), "image_root": IMAGE_ROOT,
                                   **self._reset_args(WARMUP_TASK)}

    def task_ids(self) -> list[str]:
        if self.task_dir is not None:
            if self._task_dir_ids is None:
                self._task_dir_ids = [str(i) for i in shopping_task_ids(self.task_dir)]
            return self._task_dir_ids
        if self.site_image is not None:
            raise TaskConfigError(f"site_image={self.site_image!r}: the built-in tasks are written for the "
                                  "built-in site; give task_config= (a WebArena config) or task_dir= (WebArena's "
                                  "config_files folder)")
        return [str(i) for i in task_ids()]

    def load_task(self, task_id=None, task_config=None) -> Task:
        try:
            if task_config is not None:
                raw = task_config if isinstance(task_config, dict) else json.loads(Path(task_config).read_text())
                cfg = task_from_dict(raw, source="" if isinstance(task_config, dict) else str(task_config))
            else:
                if not re.fullmatch(r"\d+", str(task_id)) or str(task_id) not in self.task_ids():
                    raise TaskConfigError(f"task_id={task_id!r}: expected one of {', '.join(self.task_ids()[:8])}, …")
                cfg = load_task(Path(self.task_dir) / f"{task_id}.json" if self.task_dir else int(task_id))
        except (OSError, json.JSONDecodeError) as e:
            raise TaskConfigError(f"cannot read task config {task_config!r}: {e}") from e
        return Task(id=str(cfg.task_id), config=cfg.to_dict(), goal=cfg.intent)

    def reset_call(self, task: Task):
        return "webarena.reset", self._reset_args(workspace_task(task_from_dict(task.config)))

    def step_call(self, action: str, observe: bool = True):
        return "webarena.step", {"action": action}  # always observes: see replay_observes_every_call

    def evaluate(self, task: Task, answer, call) -> float:
        """Judged here, outside the workspace (judge.py): the workspace only hands out its URL and pages."""
        base_url = self._image_site()[1] if self.site_image is not None else SITE_URL
        try:
            return judge(task_from_dict(task.config), answer or "", WorkspaceState(call), base_url)
        except StateUnavailable as e:
            raise EvaluationUnavailable(f"task {task.id}: {e}") from e

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

    def cost_class(self, action: str, observation: dict) -> str | None:
        """An element action by the element's role in the accessibility tree ("click option", "click link"),
        "<action> unlisted" where the id is not in it (hidden or gone): a click on an `<option>` or a hidden
        element waits out the action timeout, a click on a link costs a page load."""
        act = parse_action(action)
        if act.element_id is None:
            return None
        m = re.search(rf"^\s*\[{re.escape(act.element_id)}\]\s+(\S+)", observation.get("axtree") or "", re.M)
        return f"{act.name} {m.group(1) if m else 'unlisted'}"

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
        """Chromium (new page, popup, second origin) and the built-in site (a POST that writes SQLite) in a
        clone; a site image's own services are its author's to check."""
        checks = (AppCheck(f"Chromium ({'headless' if self.headless else 'headful'}, Playwright)",
                           ("chromium", "playwright"), "webarena.check_chromium"),)
        if self.site_image is None:
            checks += (AppCheck("shopping site (Flask + SQLite)", ("flask", "libsqlite3-0"), "webarena.check_site",
                                {"db_path": DB_PATH}),)
        return CompatSuite(env="webarena", spec=self.workspace_spec(), prepare=(self.warmup_call(),), checks=checks)

    def action_grammar(self) -> str:
        # ids are DOM-order numbers; free text is bounded so a constrained completion ends within max_tokens
        return ('root ::= click | type | scroll | goback | stop\n'
                'click ::= "click [" [0-9]{1,5} "]"\n'
                'type ::= "type [" [0-9]{1,5} "] [" [^\\]\\n]{0,60} "] [1]"\n'
                'scroll ::= "scroll [" ("up" | "down") "]"\n'
                'goback ::= "go_back"\n'
                'stop ::= "stop [" [^\\]\\n]{0,60} "]"\n')


def _docker_client(docker_host: str | None):
    try:
        import docker

        return docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
    except Exception as e:  # noqa: BLE001 - the SDK raises DockerException or plain connection errors
        raise ImageError(f"cannot reach the Docker daemon at {docker_host or 'DOCKER_HOST / the default socket'}: "
                         f"{e}; start dockerd, or give docker_host='unix:///path/to/docker.sock'") from e


class WebArenaEnv(BunshinEnv):
    __doc__ = __doc__
    adapter_class = WebArenaAdapter
