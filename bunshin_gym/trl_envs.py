"""Environments for TRL's `GRPOTrainer(environment_factory=...)`: one instance per rollout, tools from the env's
action grammar, the reward from the env, group statistics for the trainer's log.

Owns: `WebArenaToolEnv` and `OSWorldToolEnv` (the classes a trainer instantiates), `ObservationBudget` (what a
reply may hold), the backends they drive (`gym.make` in this process, or a `bunshin serve` session through
OpenEnv's client) and `GroupLedger` (per GRPO group: how each rollout's workspace started, how many steps
were prefix-cache hits) with `group_stats_callback()` for the trainer's log. Does not own: the env itself,
rendering (the adapter's `render_prompt`, as `rollout.ChatPolicy` uses it) or the server.

TRL's contract (trl >= 1.0, `GRPOTrainer`): the factory is called with no arguments, so settings come from a
`functools.partial` (`partial(WebArenaToolEnv, url=..., env_kwargs={...})`); `reset(**row)` gets the whole
dataset row (`prompt` included) and returns text appended to the prompt's last user message; every public
method but `reset` and `get_reward` is a tool (typed arguments, `Args:` docstring); `get_reward()` is called
once per finished rollout. Instances are pooled and reset again for later batches, never closed: the
backends close when the instance is collected or the interpreter exits (`weakref.finalize`), or at once
with `close_all()`.

A GRPO group's G rollouts of one task start from the task's one snapshot (built once per process or server,
not G cold starts): each reset is served from the prefix tree's root and its workspace is a thawed standby
clone or a CRIU restore of that snapshot, made behind the model's generation; steps that another rollout of
the group already took are cache hits (nothing runs). Every reply is text within `ObservationBudget.max_chars`
(plus, with `screenshot="image"`, the screenshot as an image block for a vision model); action errors, a
failed step and the episode's end are replies, never exceptions into the trainer.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from typing import Any

__all__ = ["GroupLedger", "OSWorldToolEnv", "ObservationBudget", "WebArenaToolEnv", "group_stats_callback",
           "ledger"]


@dataclasses.dataclass(frozen=True)
class ObservationBudget:
    """What reset's text and each tool reply may hold.

    Attributes:
        max_chars: the reply's text, cut to this many characters (saying so). TRL drops a tool reply whose tokens
            would push the rollout past `max_completion_length` after the action ran: keep
            max_chars below ~3 x the tokens left (English text and accessibility trees run ~3-4 chars a token).
        screenshot: "none" (text only) or "image" (a PIL image block before the text, for a vision model).
        screenshot_scale: the image downscaled by this factor (0 < s <= 1; a 1280x720 page at 0.5 is 640x360).
    """

    max_chars: int = 4000
    screenshot: str = "none"
    screenshot_scale: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.max_chars, int) or self.max_chars < 64:
            raise ValueError(f"max_chars={self.max_chars!r}: expected an int >= 64")
        if self.screenshot not in ("none", "image"):
            raise ValueError(f"screenshot={self.screenshot!r}: expected 'none' or 'image'")
        if not 0 < self.screenshot_scale <= 1:
            raise ValueError(f"screenshot_scale={self.screenshot_scale!r}: expected 0 < s <= 1")


# ---- group statistics ------------------------------------------------------------------------------------
@dataclasses.dataclass
class GroupStats:
    """One GRPO group: the rollouts of one task reset in one batch.

    Attributes:
        batch: the batch number (a reset after any get_reward starts a new batch).
        task: the task id (or the task config's digest).
        rollouts: resets in this group.
        first_of_task: resets that were this process's first of the task (a cold start builds its snapshot;
            with a server, the server may have built it before).
        thaws: workspaces that started as a thawed standby clone (a fork made ahead and frozen).
        restores: workspaces restored from a snapshot by CRIU (the task's initial one or a retained one).
        tool_calls: steps the model's tool calls made (the others: get_reward ending an unfinished episode).
        steps, hits, misses: steps that reached the env; of them served by the prefix cache (nothing ran) and
            executed. Steps whose outcome the server did not report (diagnostics off) are in neither.
    """

    batch: int
    task: str
    rollouts: int = 0
    first_of_task: int = 0
    thaws: int = 0
    restores: int = 0
    tool_calls: int = 0
    steps: int = 0
    hits: int = 0
    misses: int = 0


class GroupLedger:
    """Process-wide per-group counters, filled by the tool envs (one lock; read with `groups()`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, str], GroupStats] = {}
        self._seen_tasks: set[str] = set()
        self._batch, self._rewarded = 0, False

    def on_reset(self, task: str) -> tuple[int, str]:
        with self._lock:
            if self._rewarded:
                self._batch, self._rewarded = self._batch + 1, False
            key = (self._batch, task)
            g = self._groups.setdefault(key, GroupStats(self._batch, task))
            g.rollouts += 1
            if task not in self._seen_tasks:
                self._seen_tasks.add(task)
                g.first_of_task += 1
            return key

    def on_step(self, key: tuple[int, str] | None, cache: str | None, by_tool: bool) -> None:
        with self._lock:
            g = self._groups.get(key)
            if g is not None:
                g.steps += 1
                g.tool_calls += by_tool
                g.hits += cache == "hit"
                g.misses += cache in ("miss", "waited")

    def on_end(self, key: tuple[int, str] | None, restores: dict) -> None:
        with self._lock:
            self._rewarded = True
            g = self._groups.get(key)
            if g is not None:
                g.thaws += int(restores.get("standby", 0))
                g.restores += int(restores.get("initial", 0)) + int(restores.get("snapshot", 0))

    def groups(self, since_batch: int = 0) -> list[GroupStats]:
        with self._lock:
            return [dataclasses.replace(g) for g in self._groups.values() if g.batch >= since_batch]

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()
            self._seen_tasks.clear()
            self._batch, self._rewarded = 0, False


_LEDGER = GroupLedger()


def ledger() -> GroupLedger:
    """This process's `GroupLedger`."""
    return _LEDGER


def group_stats_callback(jsonl_path: str | None = None):
    """A `transformers.TrainerCallback` that adds the groups finished since the last log to the trainer's log
    (`bunshin/rollouts`, `bunshin/thaws`, `bunshin/restores`, `bunshin/first_of_task`, `bunshin/steps`,
    `bunshin/cache_hits`, `bunshin/cache_hit_rate`) and appends each group as a JSON line to `jsonl_path`."""
    from transformers import TrainerCallback

    class BunshinGroupStats(TrainerCallback):
        def __init__(self) -> None:
            self.logged: set[tuple[int, str]] = set()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None:
                return
            new = [g for g in _LEDGER.groups() if (g.batch, g.task) not in self.logged and g.steps + g.thaws
                   + g.restores > 0]
            if not new:
                return
            for g in new:
                self.logged.add((g.batch, g.task))
            total = {f: sum(getattr(g, f) for g in new) for f in ("rollouts", "first_of_task", "thaws",
                                                                   "restores", "tool_calls", "steps", "hits")}
            logs.update({f"bunshin/{'cache_hits' if k == 'hits' else k}": v for k, v in total.items()})
            logs["bunshin/cache_hit_rate"] = round(total["hits"] / total["steps"], 4) if total["steps"] else 0.0
            if jsonl_path:
                with open(jsonl_path, "a") as f:
                    for g in new:
                        f.write(json.dumps({"global_step": state.global_step, **dataclasses.asdict(g)}) + "\n")

    return BunshinGroupStats()


# ---- backends --------------------------------------------------------------------------------------------
class _LocalBackend:
    """The env in this process (`gym.make`), with diagnostics on; made at the first reset, reused after."""

    def __init__(self, env_id: str, env_kwargs: dict) -> None:
        self.env_id, self.env_kwargs, self.env = env_id, {**env_kwargs, "diagnostics": True}, None

    def reset(self, task: dict):
        import gymnasium as gym

        import bunshin_gym  # noqa: F401 - registers the envs

        if self.env is None:
            self.env = gym.make(self.env_id, **self.env_kwargs)
        obs, info = self.env.reset(options=task)
        return obs, info

    def step(self, action: str):
        return self.env.step(action)

    def restores(self) -> dict:
        ep = self.env.unwrapped.episode if self.env is not None else None
        return dict(ep.restorer.stats) if ep is not None else {}

    @property
    def adapter(self):
        return self.env.unwrapped.adapter

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


class _RemoteBackend:
    """One `bunshin serve` session through OpenEnv's client (the way TRL reaches env servers), asking the
    server to leave out or downscale the screenshot and to bound each text (its per-session observation
    option)."""

    def __init__(self, url: str, token: str | None, budget: ObservationBudget, timeout_s: float) -> None:
        import urllib.parse

        import httpx

        self.url, self.budget = url.rstrip("/"), budget
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        about = self.http.get("/bunshin")
        if about.status_code != 200:
            self.http.close()
            raise ConnectionError(f"{self.url}/bunshin: HTTP {about.status_code}: {about.text} (is `bunshin serve` "
                                  "running there, and is the token right?)")
        about = about.json()
        self.env_id, self.adapter_kwargs = about["env_id"], about["adapter_kwargs"]
        ws = self.url
        if token:  # OpenEnv's client sends no headers; websockets turns URL credentials into Basic auth
            parts = urllib.parse.urlsplit(ws)
            ws = parts._replace(netloc=f"bunshin:{urllib.parse.quote(token, safe='')}@{parts.netloc}").geturl()
        self.ws_url, self.timeout_s = ws, timeout_s
        self.client, self.session_id, self._adapter = None, None, None

    def _connect(self):
        from openenv.core.generic_client import GenericEnvClient

        if self.client is None:
            self.client = GenericEnvClient(base_url=self.ws_url, message_timeout_s=self.timeout_s).sync()
            self.session_id = None
        return self.client

    def reset(self, task: dict):
        observe = {"screenshot": "png" if self.budget.screenshot == "image" else "none",
                   "screenshot_scale": self.budget.screenshot_scale, "max_text_chars": max(64, self.budget.max_chars)}
        try:
            r = self._connect().reset(**task, observation=observe)
        except Exception:  # noqa: BLE001 - a closed or reaped session: a new connection, once
            self._drop()
            r = self._connect().reset(**task, observation=observe)
        if self.session_id is None:
            self.session_id = self.client.state()["session_id"]
        obs, _, _, _, info = self._result(r)
        return obs, info

    def step(self, action: str):
        return self._result(self.client.step({"action": action}))

    def _result(self, r):
        data = dict(r.observation)
        info = data.pop("info", {})
        shot = data.get("screenshot")
        if shot:
            import base64
            import io

            from PIL import Image

            data["screenshot"] = Image.open(io.BytesIO(base64.b64decode(shot))).convert("RGB")
        else:
            data.pop("screenshot", None)
        return data, float(r.reward or 0.0), bool(info.get("terminated")), bool(info.get("truncated")), info

    def restores(self) -> dict:
        if self.session_id is None:
            return {}
        r = self.http.get(f"/sessions/{self.session_id}/diagnostics")
        return r.json().get("restores", {}) if r.status_code == 200 else {}

    @property
    def adapter(self):
        if self._adapter is None:
            from . import adapter_for

            self._adapter = type(adapter_for(self.env_id))(**self.adapter_kwargs)
        return self._adapter

    def _drop(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass

    def close(self) -> None:
        self._drop()
        self.http.close()


def _close_backend(holder: list) -> None:
    backend = holder[0]
    holder[0] = None
    if backend is not None:
        try:
            backend.close()
        except Exception:  # noqa: BLE001 - at exit, best effort: the server also ends idle sessions
            pass


# ---- the tool envs --------------------------------------------------------------------------------------
class _ToolEnv:
    """What both tool envs share: reset from a dataset row, acting, replies, reward, group bookkeeping.

    Args:
        url: a `bunshin serve` server ("http://host:8000"); None: the env runs in this process.
        token: the server's token (None: a loopback server started with --no-auth).
        env_kwargs: in-process, the env's keyword arguments (`max_steps`, `backend`, `viewport`, ...); over a
            server they are the server's (`bunshin serve --env-arg`).
        budget: what each reply may hold (`ObservationBudget`).
        timeout_s: over a server, the longest wait for one answer.
    """

    ENV_ID = ""
    #: the action that ends an unfinished episode at get_reward, so its end state is judged (as at max_steps)
    END_ACTION = ""
    _instances: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, url: str | None = None, token: str | None = None, env_kwargs: dict | None = None,
                 budget: ObservationBudget | None = None, timeout_s: float = 600.0) -> None:
        self._budget = budget or ObservationBudget()
        if url is None:
            backend: Any = _LocalBackend(self.ENV_ID, dict(env_kwargs or {}))
        else:
            if env_kwargs:
                raise ValueError(f"env_kwargs={env_kwargs!r} with url=: a server's env settings are its own; "
                                 "start it with `bunshin serve --env-arg KEY=VALUE`")
            backend = _RemoteBackend(url, token, self._budget, timeout_s)
            if backend.env_id != self.ENV_ID:
                backend.close()
                raise ValueError(f"{url} serves {backend.env_id}, not {self.ENV_ID}: use the tool env of that env")
        self._holder = [backend]
        self._finalizer = weakref.finalize(self, _close_backend, self._holder)
        self._group: tuple[int, str] | None = None
        self._done, self._reward, self._reported = True, 0.0, False
        type(self)._instances.add(self)

    @property
    def _backend(self):
        backend = self._holder[0]
        if backend is None:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return backend

    @classmethod
    def close_all(cls) -> None:
        """Close every live instance's env or server session now (the trainer never closes them)."""
        for inst in list(cls._instances):
            inst._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._finalizer()

    # -- TRL's contract -------------------------------------------------------------------------------
    def reset(self, **row: Any) -> str | list:
        """Start the task of a dataset row: its `task_id` or `task_config` column (other columns, `prompt`
        included, are ignored). Returns the goal and first observation as text (within the budget)."""
        task = _task_of_row(row)
        self._finish()
        key = str(task.get("task_id")) if "task_id" in task else "config:" + _digest(task["task_config"])
        self._group = _LEDGER.on_reset(key)
        obs, _info = self._backend.reset(task)
        self._done, self._reward, self._reported = False, 0.0, False
        return self._reply(obs, prefix="\n\n")

    def get_reward(self) -> float:
        """The rollout's reward: the env's at the end of the episode. An episode the model left unfinished is
        ended first with the env's end action (its end state judged, as at max_steps)."""
        if not self._done:
            self._act(self.END_ACTION, by_tool=False)
        self._finish()
        return float(self._reward)

    # -- helpers -----------------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._group is not None and not self._reported:
            self._reported = True
            try:
                restores = self._backend.restores()
            except Exception:  # noqa: BLE001 - statistics only
                restores = {}
            _LEDGER.on_end(self._group, restores)

    def _act(self, action: str, by_tool: bool = True) -> str | list:
        if self._done:
            return "The episode has already ended; nothing was done. Stop calling tools."
        try:
            obs, reward, terminated, truncated, info = self._backend.step(action)
        except Exception as e:  # noqa: BLE001 - a failed step is the rollout's end, not the trainer's crash
            self._done, self._reward = True, 0.0
            return f"The action failed and the episode ended: {type(e).__name__}: {e}"[: self._budget.max_chars]
        _LEDGER.on_step(self._group, (info.get("bunshin") or {}).get("cache"), by_tool)
        self._reward = float(reward)
        if terminated or truncated:
            self._done = True
            why = "the step limit was reached" if truncated else "the task was submitted"
            return f"The episode has ended ({why}). Stop calling tools."
        return self._reply(obs)

    def _reply(self, obs: dict, prefix: str = "") -> str | list:
        try:
            text = self._backend.adapter.render_prompt(obs)
        except Exception:  # noqa: BLE001 - the env's package is not installed here: the text keys as they are
            text = "\n".join(f"{k.upper()}: {v}" for k, v in obs.items() if isinstance(v, str))
        from .spaces import clip_text

        text = prefix + clip_text(text, self._budget.max_chars - len(prefix))
        shot = obs.get("screenshot")
        if self._budget.screenshot != "image" or shot is None:
            return text
        return [{"type": "image", "image": _scaled_image(shot, self._budget.screenshot_scale)},
                {"type": "text", "text": text}]


def _task_of_row(row: dict) -> dict:
    if row.get("task_id") is not None:
        return {"task_id": str(row["task_id"])}
    config = row.get("task_config")
    if isinstance(config, str):  # a JSON column (datasets keeps nested dicts, but a CSV does not)
        try:
            config = json.loads(config)
        except json.JSONDecodeError as e:
            raise ValueError(f"reset: the row's task_config is not JSON: {e}") from e
    if isinstance(config, dict):
        return {"task_config": config}
    raise ValueError(f"reset: the dataset row has neither `task_id` nor `task_config` (columns: {sorted(row)}); "
                     "add a task_id column (`bunshin tasks list`) or a task_config column (the task as JSON)")


def _digest(config: dict) -> str:
    import hashlib

    return hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _scaled_image(shot, scale: float):
    from PIL import Image

    image = shot if isinstance(shot, Image.Image) else Image.fromarray(shot)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                             Image.BILINEAR)
    return image


class WebArenaToolEnv(_ToolEnv):
    """BunshinWebArena-v0 as TRL tools (WebArena's action set: click, type, hover, press, scroll, tabs, goto,
    go_back, stop). See `_ToolEnv` for the arguments; `reset(task_id=...)` takes a row of task ids 0-N
    (`bunshin tasks list --env webarena`). The episode ends with `stop`, at `max_steps`, or at get_reward."""

    ENV_ID = "BunshinWebArena-v0"
    END_ACTION = "stop []"

    def click(self, element_id: int) -> str:
        """Click an element of the page.

        Args:
            element_id: the element's id, the number in brackets in the accessibility tree.
        """
        return self._act(f"click [{int(element_id)}]")

    def type_text(self, element_id: int, text: str, press_enter: bool = True) -> str:
        """Replace the content of a text field.

        Args:
            element_id: the field's id in the accessibility tree.
            text: what to type.
            press_enter: press Enter afterwards.
        """
        return self._act(f"type [{int(element_id)}] [{text}] [{int(bool(press_enter))}]")

    def hover(self, element_id: int) -> str:
        """Move the mouse over an element.

        Args:
            element_id: the element's id in the accessibility tree.
        """
        return self._act(f"hover [{int(element_id)}]")

    def press(self, key_comb: str) -> str:
        """Press a key combination on the focused element.

        Args:
            key_comb: e.g. "Enter", "Control+a".
        """
        return self._act(f"press [{key_comb}]")

    def scroll(self, direction: str) -> str:
        """Scroll the page by one screen.

        Args:
            direction: "up" or "down".
        """
        return self._act(f"scroll [{direction}]")

    def new_tab(self) -> str:
        """Open a new, empty tab and focus it."""
        return self._act("new_tab")

    def tab_focus(self, index: int) -> str:
        """Focus a tab.

        Args:
            index: the tab's 0-based index.
        """
        return self._act(f"tab_focus [{int(index)}]")

    def close_tab(self) -> str:
        """Close the current tab."""
        return self._act("close_tab")

    def goto(self, url: str) -> str:
        """Open a URL in the current tab.

        Args:
            url: the address, e.g. "http://127.0.0.1:7770/".
        """
        return self._act(f"goto [{url}]")

    def go_back(self) -> str:
        """Go back to the previous page."""
        return self._act("go_back")

    def stop(self, answer: str) -> str:
        """Finish the task, giving the answer (empty if the task asks for none).

        Args:
            answer: the answer to the task's question, or "" when it needs none.
        """
        return self._act(f"stop [{answer}]")


class OSWorldToolEnv(_ToolEnv):
    """BunshinOSWorld-v0 as TRL tools: pyautogui code, plus done / fail / wait (OSWorld's special actions).
    The server or `env_kwargs` must keep `action_space="pyautogui"` (the default). The episode ends with
    `done` or `fail`, at `max_steps`, or at get_reward (which judges the end state, as `done`)."""

    ENV_ID = "BunshinOSWorld-v0"
    END_ACTION = "DONE"

    def run_pyautogui(self, code: str) -> str:
        """Run Python code that drives the desktop with pyautogui (already imported), as OSWorld runs it.

        Args:
            code: e.g. "pyautogui.click(100, 200); pyautogui.typewrite('hello')".
        """
        return self._act(code)

    def wait(self) -> str:
        """Wait a moment and look at the screen again."""
        return self._act("WAIT")

    def done(self) -> str:
        """Declare the task done: the desktop's state is judged."""
        return self._act("DONE")

    def fail(self) -> str:
        """Declare the task infeasible."""
        return self._act("FAIL")
