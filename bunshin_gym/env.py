"""BunshinEnv: the Gymnasium env shared by all Bunshin envs; each episode runs in a forked live workspace.

`reset()` forks the task's initial snapshot (built once per process, see snapshots.py) into a private
workspace; `step(action)` sends the action to the workspace's executor; the episode is evaluated when the
agent stops (terminated) or at `max_steps` (truncated). `fork(n)` clones the live episode into n new envs.
Env-specific knowledge comes only through an `EnvAdapter`.
"""
from __future__ import annotations

import copy
import time
from typing import Any

import gymnasium as gym
import numpy as np

from forkcore import ExecutorError, Workspace

from .adapter import ActionError, EnvAdapter, StepResult, Task
from .snapshots import REGISTRY


class BunshinEnv(gym.Env):
    """A task of a Bunshin env (see the concrete env's docstring for observation and action details).

    Args:
        task_id: which task (see `bunshin tasks list`); or
        task_config: a task as a dict or a path to its JSON file.
        max_steps: steps before the episode is truncated (and evaluated with an empty answer).
        backend: forkcore memory backend for clones ("auto", "memfile", "ksm", "private").
        diagnostics: put run-dependent details (timings, backend, cache) into `info["bunshin"]`; off by
            default so identical runs give identical `info` (Gymnasium's determinism checks).

    Episode end:
        terminated=True when the agent stops (reward = the task's evaluation of its answer/end state);
        truncated=True at `max_steps` (reward = evaluation with an empty answer).
        A malformed action counts as a step, sets `last_action_error` and changes nothing.
    """

    metadata = {"render_modes": ["rgb_array"]}
    adapter_class: type[EnvAdapter]

    def __init__(self, task_id: str | None = None, task_config: dict | str | None = None, max_steps: int = 30,
                 backend: str = "auto", diagnostics: bool = False, render_mode: str | None = None,
                 **adapter_kwargs: Any) -> None:
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps={max_steps!r}: expected an int >= 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: only 'rgb_array' is supported")
        self.adapter = self.adapter_class(**adapter_kwargs)
        self.max_steps, self.backend, self.diagnostics, self.render_mode = max_steps, backend, diagnostics, render_mode
        self._default_task = self.adapter.load_task(task_id, task_config) if (task_id or task_config) else None
        self.observation_space = self.adapter.observation_space()
        self.action_space = self.adapter.action_space()
        self.task: Task | None = None
        self.workspace: Workspace | None = None
        self.elapsed_steps = 0
        self.history: list[str] = []
        self._last_obs: dict | None = None
        self._done = False

    # ---- Gymnasium API -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options or "task_config" in options:
            task = self.adapter.load_task(options.get("task_id"), options.get("task_config"))
        elif self._default_task is not None:
            task = self._default_task
        else:
            ids = self.adapter.task_ids()
            task = self.adapter.load_task(ids[int(self.np_random.integers(len(ids)))])
        t0 = time.monotonic()
        ts = REGISTRY.task(self.adapter, task, self.backend)
        if self.workspace is not None:
            self.workspace.destroy()
        self.workspace = ts.snapshot.fork(1, backend=self.backend)[0]
        result = self.adapter.decode(ts.initial_raw, task)
        self.task, self.elapsed_steps, self.history, self._done = task, 0, [], False
        self._last_obs = result.observation
        info = self._info(result.last_action_error, {"reset_s": time.monotonic() - t0})
        return copy.deepcopy(result.observation), info

    def step(self, action: Any):
        if self.workspace is None or self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        t0 = time.monotonic()
        self.elapsed_steps += 1
        try:
            signature = self.adapter.canonical_action(action)
        except ActionError as e:
            result = StepResult(self._with_error(str(e)), str(e), False, None)
        else:
            self.history.append(signature)
            method, params = self.adapter.step_call(action)
            try:
                result = self.adapter.decode(self.workspace.call(method, **params), self.task)
            except ExecutorError as e:  # an impossible action the env did not catch itself
                msg = f"{e.remote_type}: {e}"
                result = StepResult(self._with_error(msg), msg, False, None)
        self._last_obs = result.observation
        reward, terminated, truncated = 0.0, False, False
        if result.done:
            reward, terminated = self._evaluate(result.answer), True
        elif self.elapsed_steps >= self.max_steps:
            reward, truncated = self._evaluate(""), True
        self._done = terminated or truncated
        info = self._info(result.last_action_error, {"step_s": time.monotonic() - t0})
        return copy.deepcopy(result.observation), reward, terminated, truncated, info

    def render(self):
        if self._last_obs is None:
            return None
        for key in ("screenshot",):
            if key in self._last_obs:
                return self._last_obs[key]
        return None

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.destroy()
            self.workspace = None

    # ---- fork ---------------------------------------------------------------------------------------
    def fork(self, n: int = 1) -> list[gym.Env]:
        """n new envs in this episode's exact state (workspace, step count, history); this env goes on unchanged.

        Each is wrapped the way `gym.make` wrapped this one (when it was made by gym.make).
        """
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"fork(n={n!r}): n must be an int >= 1")
        if self.workspace is None:
            raise gym.error.ResetNeeded("call reset() before fork()")
        clones = self.workspace.fork(n, backend=self.backend)
        out = []
        for ws in clones:
            env = gym.make(self.spec) if self.spec is not None else type(self)(**self._ctor_kwargs())
            base: BunshinEnv = env.unwrapped
            base.task, base.workspace, base.elapsed_steps = self.task, ws, self.elapsed_steps
            base.history, base._last_obs, base._done = list(self.history), copy.deepcopy(self._last_obs), self._done
            _mark_reset(env)
            out.append(env)
        return out

    def _ctor_kwargs(self) -> dict:
        return {"max_steps": self.max_steps, "backend": self.backend, "diagnostics": self.diagnostics,
                "render_mode": self.render_mode}

    # ---- helpers ------------------------------------------------------------------------------------
    def _evaluate(self, answer: str | None) -> float:
        method, params = self.adapter.evaluate_call(answer)
        return float(self.workspace.call(method, **params)["reward"])

    def _with_error(self, message: str) -> dict:
        obs = copy.deepcopy(self._last_obs) if self._last_obs is not None else {}
        if "last_action_error" in obs:
            obs["last_action_error"] = message
        return obs

    def _info(self, error: str, timings: dict) -> dict:
        info: dict[str, Any] = {"last_action_error": error, "task_id": self.task.id if self.task else None,
                                "elapsed_steps": self.elapsed_steps}
        if self.diagnostics:
            info["bunshin"] = {"backend": self.workspace.backend if self.workspace else None, **timings}
        return info


def _mark_reset(env: gym.Env) -> None:
    """Tell Gymnasium's OrderEnforcing/PassiveEnvChecker wrappers that this env has been reset."""
    e = env
    while isinstance(e, gym.Wrapper):
        if hasattr(e, "_has_reset"):
            e._has_reset = True
        if hasattr(e, "checked_reset"):
            e.checked_reset = True
        e = e.env


class ForkableWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Outermost wrapper of every Bunshin env made by gym.make: exposes `fork(n)` through the wrapper stack."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def fork(self, n: int = 1) -> list[gym.Env]:
        return self.env.unwrapped.fork(n)
