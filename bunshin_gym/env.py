"""BunshinEnv: the Gymnasium façade shared by all Bunshin envs (one task per episode, forkable live).

`reset()` starts an `Episode` of the task (the task's initial snapshot is built once per process);
`step(action)` canonicalises the action and hands it to the episode's step cache; the episode is
evaluated when the agent stops (terminated) or at `max_steps` (truncated). `fork(n)` clones the live
episode into n new envs. Env-specific knowledge comes only through an `EnvAdapter`.
"""
from __future__ import annotations

import copy
import sys
import time
from typing import Any

import gymnasium as gym

from .adapter import ActionError, EnvAdapter, Task
from .cache import CachedStep, PrefixTree
from .config import EnvConfig
from .episode import Episode, StepFailed
from .runtime import runtime
from .speculator import Speculator
from .task_snapshots import TaskSnapshot

__all__ = ["BunshinEnv", "ForkableWrapper", "StepFailed", "make_forkable", "reset_prefix_cache"]


def reset_prefix_cache() -> None:
    """Forget every recorded step and release retained snapshots (benchmarks: each configuration starts cold)."""
    runtime().reset_cache()


class BunshinEnv(gym.Env):
    """A task of a Bunshin env (see the concrete env's docstring for observation and action details).

    Args:
        task_id: which task (see `bunshin tasks list`; 0 and "0" both mean task "0"); or
        task_config: a task as a dict or a path to its JSON file.
        max_steps: steps before the episode is truncated (and evaluated with an empty answer).
        backend: forkcore memory backend for clones ("auto", "memfile", "ksm", "private"); an unknown name
            raises ValueError here, an unavailable one at the first restore.
        cache: consult the task's tool-prefix tree before executing (see below). With cache=False each
            episode gets a private tree (used only by speculation): nothing is reused across episodes.
        selector: a trained `SpecToolSelector`; when set, after each executed step the env runs the
            predicted next `speculate_k` calls on its workspace in the background (see below).
        speculate_k: length of a speculative chain.
        speculate_min_idle_cpus: start a chain only while at least this many of the machine's CPUs were idle
            over the last second (0.5): speculation is meant to use the CPU a policy leaves idle while it thinks;
            on a saturated machine a chain slows every other rollout down. 0: speculate whatever the load.
        stats_sink: a list that receives this env's speculation counters when it closes (benchmarks).
        background_sync: with the cache on, keep the live workspace in step with the episode behind the
            policy's think time: restore it right after reset and run the calls of cache hits on it in the
            background, so a miss after hits finds the state ready instead of restoring and replaying then
            (costs the CPU of executing the hit calls, as cache=False would; False: restore lazily at a miss).
        step_timeout_s: RPC timeout of one executor call (an action, its replay, an evaluation). A call
            that times out is not recorded: its workspace is discarded and the step returns its error.
        diagnostics: put run-dependent details (cache hit/miss, replayed calls, backend, timings) into
            `info["bunshin"]`; off by default so identical runs give identical `info`.
        cache_dir: a directory holding an on-disk `CacheStore` (default: $BUNSHIN_CACHE_DIR, else none).
            The task's tree is loaded from it at the first reset in a process and every new step is
            written back when an episode ends and when the env closes, so another process (the next
            iteration, a crashed run restarted) starts warm. Entries are verified when read; a corrupt one
            is dropped and re-executed, never served. Its identity includes the task file, the workspace
            spec, layer versions and the host's versions (kernel, CRIU, Debian and venv packages:
            forkcore.versions), so changed code, tasks or application builds never hit old entries.

    Prefix cache (BunshinRL §3.2, TVCache): a step's key is the canonical signature of every action of the
    episode so far. If that whole prefix was executed before (by any env of this task in this process), the
    recorded (observation, reward, terminated) is returned and nothing runs; the workspace is brought to
    that state only when a later step misses (fork of the nearest retained snapshot + replay of the calls
    in between). Correct because envs are deterministic functions of (task, initial state, action prefix):
    fixed clock, seeded data, one workspace per episode.

    Speculation (BunshinRL §3.3): while the policy thinks, a background thread runs the selector's
    predicted chain on the live workspace and records its results in the tree. If the policy's next
    action matches, the step is served from the tree (waiting for the in-flight call if needed) and the
    speculative workspace is adopted back when the env next needs a live one; on a mismatch the chain is
    aborted, its workspace destroyed and the episode's state re-materialised from the tree (fork of the
    nearest retained snapshot + replay), which costs less than forking before every speculation.
    `speculation_enabled` can be toggled per env and `speculation_filter` (signature -> bool) cuts chains
    at calls too quick to be worth running ahead: the rollout driver's tail selection sets both.

    A chain starts only when it is expected to pay: p(first call) x its execution time must exceed
    (1 - p) x (restore + replay from the nearest retained snapshot), with times measured in this process.

    Selective snapshots: after a miss, if the tree's policy says the state is worth retaining, it is dumped
    in the background while the policy thinks (before a speculative chain, if one starts).

    Standby clones (DeltaBox): the process keeps frozen, already-restored clones of each task's initial
    snapshot and of retained snapshots restored from more than once (`runtime.StandbyPools`, sized by
    $BUNSHIN_STANDBY_BUDGET_MB, default 2048, and $BUNSHIN_STANDBY_PER_SNAPSHOT, default 2); a reset, a
    miss or a restore for `fork` thaws one when it is ready (milliseconds) instead of a CRIU restore.

    Failures: see `episode.py`. A failed call is never recorded nor kept in the history; a restore that
    cannot be made raises `StepFailed` (a `gymnasium.error.ResetNeeded`).

    Structure: this class is the Gymnasium façade; an `Episode` (episode.py) holds the step cache, its
    `Restorer` (restorer.py) the live workspace, the `Speculator` (speculator.py) runs ahead; the process's
    `Runtime` (runtime.py) holds the trees, task snapshots and standby pools. See docs/DESIGN.md.

    Episode end:
        terminated=True when the agent stops (reward = the task's evaluation of its answer/end state);
        truncated=True at `max_steps` (reward = evaluation with an empty answer).
        A malformed action counts as a step, sets `last_action_error` and changes nothing.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}
    adapter_class: type[EnvAdapter]

    def __init__(self, task_id: str | None = None, task_config: dict | str | None = None, max_steps: int = 30,
                 backend: str = "auto", cache: bool = True, diagnostics: bool = False,
                 render_mode: str | None = None, selector: Any = None, speculate_k: int = 3,
                 speculate_min_idle_cpus: float = 0.5,
                 stats_sink: list | None = None, cache_dir: str | None = None, step_timeout_s: float = 120.0,
                 background_sync: bool = True, **adapter_kwargs: Any) -> None:
        self.config = EnvConfig.from_kwargs(
            task_id=task_id, task_config=task_config, max_steps=max_steps, backend=backend, cache=cache,
            diagnostics=diagnostics, render_mode=render_mode, speculate_k=speculate_k, cache_dir=cache_dir,
            speculate_min_idle_cpus=speculate_min_idle_cpus,
            step_timeout_s=step_timeout_s, background_sync=background_sync, **adapter_kwargs)
        self.adapter = self.adapter_class(**dict(self.config.adapter_kwargs))
        given = self.config.task_id is not None or task_config is not None  # task_id=0 is a task
        self._default_task = self.adapter.load_task(self.config.task_id, task_config) if given else None
        self.observation_space = self.adapter.observation_space()
        self.action_space = self.adapter.action_space()
        self.render_mode = render_mode
        self.speculator = Speculator(selector, self.config.speculate_k, self.config.speculate_min_idle_cpus,
                                     runtime().idle_cpus, runtime().reaper.destroy)
        self._stats_sink = stats_sink
        self.episode: Episode | None = None

    # ---- settings kept as attributes (read by benchmarks, the rollout driver and tests) ------------------
    max_steps = property(lambda self: self.config.max_steps)
    backend = property(lambda self: self.config.backend)
    use_cache = property(lambda self: self.config.cache)
    diagnostics = property(lambda self: self.config.diagnostics)
    cache_dir = property(lambda self: self.config.cache_dir)
    selector = property(lambda self: self.speculator.selector)
    speculate_k = property(lambda self: self.speculator.k)
    spec_stats = property(lambda self: self.speculator.counters)

    @property
    def speculation_enabled(self) -> bool:
        return self.speculator.enabled

    @speculation_enabled.setter
    def speculation_enabled(self, on: bool) -> None:
        self.speculator.enabled = bool(on) and self.speculator.selector is not None

    @property
    def speculation_filter(self):
        return self.speculator.filter

    @speculation_filter.setter
    def speculation_filter(self, fn) -> None:
        self.speculator.filter = fn

    task = property(lambda self: self.episode.task if self.episode else None)
    history = property(lambda self: self.episode.history if self.episode else [])
    elapsed_steps = property(lambda self: self.episode.elapsed_steps if self.episode else 0)
    workspace = property(lambda self: self.episode.workspace if self.episode else None)

    # ---- Gymnasium API -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options or "task_config" in options:
            tid = options.get("task_id")
            task = self.adapter.load_task(None if tid is None else str(tid), options.get("task_config"))
        elif self._default_task is not None:
            task = self._default_task
        else:
            ids = self.adapter.task_ids()
            task = self.adapter.load_task(ids[int(self.np_random.integers(len(ids)))])
        t0 = time.monotonic()
        self._end_episode(background=True)  # stops speculation first: nothing of the old task lands in a tree after
        ts = runtime().task_snapshots.task(self.adapter, task, self.config.backend)
        result = ts.initial_result(self.adapter, task)
        self.episode = self.new_episode(task, ts)
        self.episode.restorer.ensure_initial_standby()
        diag: dict[str, Any] = {}
        if not self.config.cache:  # no tree to serve the first steps: the workspace is needed now
            self.episode.restorer.materialise(self.episode.tree.root, diag)
        elif self.episode.sync:  # restored while the policy thinks about its first action
            self.episode.restorer.follow(self.episode.tree.root, kind="reset")
        info = self._info(result.last_action_error, {**diag, "reset_s": time.monotonic() - t0})
        return copy.deepcopy(result.observation), info

    def new_episode(self, task: Task, ts: TaskSnapshot) -> Episode:
        """An episode of `task` at its initial state, in the task's tree (not started: no workspace yet)."""
        rt = runtime()
        result = ts.initial_result(self.adapter, task)
        readonly = self._readonly
        if self.config.cache:
            tree, store = rt.tree(task.id, ts.initial_digest, readonly, self.config.cache_dir)
        else:  # a private tree: speculation only, no reuse across episodes
            tree, store = PrefixTree(task.id, f"{ts.initial_digest}-{id(self)}-{time.monotonic_ns()}",
                                     readonly=readonly), None
        if tree.cost_class is None:
            tree.cost_class = self.adapter.cost_class
        if tree.root.result is None:  # the tree's first episode
            tree.set_root_result(CachedStep(result.observation, info={"last_action_error": ""}))
            tree.policy.observe_initial(ts.snapshot.size_bytes(), ts.snapshot.dump_s)
        sync = self.config.cache and self.config.background_sync
        return Episode(rt, self.adapter, task, ts, tree, store, self.speculator, self.config.backend,
                       self.config.step_timeout_s, self.config.cache, result.observation, sync)

    def step(self, action: Any):
        ep = self.episode
        if ep is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if ep.broken:
            raise StepFailed(f"{ep.broken}\ncall reset() to start a new episode")
        if ep.done:
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        t0 = time.monotonic()
        ep.elapsed_steps += 1
        diag: dict[str, Any] = {}
        try:
            signature = self.adapter.canonical_action(action)
        except ActionError as e:
            obs, err, reward, terminated = ep.with_error(str(e)), str(e), 0.0, False
            diag["cache"] = "malformed"
            step = None
        else:
            try:
                step = ep.step(signature, diag)
            except StepFailed:
                ep.elapsed_steps -= 1
                raise
            obs, err = step.observation, step.info.get("last_action_error", "")
            reward, terminated = step.reward, step.terminated
        ep.last_obs = obs
        truncated = False
        if not terminated and ep.elapsed_steps >= self.config.max_steps:
            reward, truncated = ep.truncation_reward(diag), True
        ep.done = terminated or truncated
        if ep.done:
            ep.speculator.stop()
            ep.restorer.cancel_syncs()  # e.g. a truncation: no later step needs the state reached
            ep.persist()
        elif diag.get("cache") == "miss":
            ep.after_miss(step, self.speculator.enabled, diag)
        info = self._info(err, {**diag, "step_s": time.monotonic() - t0})
        return copy.deepcopy(obs), reward, terminated, truncated, info

    def render(self):
        if self.episode is None:
            return None
        shot = self.episode.last_obs.get("screenshot")
        return None if shot is None else shot.copy()  # never an alias of a cached observation

    def close(self) -> None:
        self._end_episode()
        runtime().reaper.flush()  # workspaces of earlier episodes are gone too when close() returns
        if self._stats_sink is not None:
            self._stats_sink.append(dict(self.spec_stats))
            self._stats_sink = None

    def _end_episode(self, background: bool = False) -> None:
        ep, self.episode = self.episode, None
        if ep is not None:
            ep.close(background)
            if not ep.done:  # an ended episode was saved when it ended
                ep.persist()

    def _readonly(self, signature: str) -> bool:
        try:
            return self.adapter.is_read_only(signature)
        except Exception:  # noqa: BLE001 - an unparsable signature is never read-only
            return False

    def live_workspace(self):
        """The forkcore workspace in this episode's current state, materialised first if the position was
        served from the prefix cache (inspect it with `exec`/`call`; changing it desynchronises the cache)."""
        if self.episode is None:
            raise RuntimeError("live_workspace() before reset()")
        return self.episode.live_here()

    # ---- fork ---------------------------------------------------------------------------------------
    def fork(self, n: int = 1) -> list[gym.Env]:
        """n new envs in this episode's exact state (live workspace, tree position, step count, history);
        this env goes on unchanged. Each is built from this env's config (adapter settings and default
        task included) and wrapped the way `gym.make` wrapped this one."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"fork(n={n!r}): n must be an int >= 1")
        if self.episode is None:
            raise gym.error.ResetNeeded("call reset() before fork()")
        envs = [gym.make(self.spec) if self.spec is not None else type(self)(
            selector=self.selector, stats_sink=self._stats_sink, **self.config.kwargs()) for _ in range(n)]
        speculators = []
        for env in envs:
            base: BunshinEnv = env.unwrapped
            base.speculator.enabled, base.speculator.filter = self.speculator.enabled, self.speculator.filter
            speculators.append(base.speculator)
        try:
            episodes = self.episode.fork(n, speculators)
        except BaseException:
            for env in envs:
                env.close()
            raise
        for env, ep in zip(envs, episodes):
            env.unwrapped.episode = ep
            _mark_reset(env)
        return envs

    def fork_info(self) -> dict:
        """The info a reset would give, for a slot that became a clone (vector envs)."""
        ep = self.episode
        return self._info(ep.last_obs.get("last_action_error", "") if ep else "", {})

    # ---- helpers ------------------------------------------------------------------------------------
    def _info(self, error: str, diag: dict) -> dict:
        ep = self.episode
        info: dict[str, Any] = {"last_action_error": error, "task_id": ep.task.id if ep else None,
                                "elapsed_steps": ep.elapsed_steps if ep else 0}
        if self.config.diagnostics:
            ws = ep.workspace if ep else None
            info["bunshin"] = {"backend": ws.backend if ws else None, "standby": runtime().standby.stats(),
                               "restores": dict(ep.restorer.stats) if ep else {}, **diag}
        return info


def _mark_reset(env: gym.Env) -> None:
    """Tell Gymnasium's OrderEnforcing/PassiveEnvChecker wrappers that this env has been reset."""
    e = env
    while isinstance(e, gym.Wrapper):
        if hasattr(e, "_has_reset"):
            e._has_reset = True
        if hasattr(e, "checked_reset"):  # the source env already passed the passive checks
            e.checked_reset = e.checked_step = e.checked_data_reuse = True
        e = e.env


def make_forkable(entry_point: str, **kwargs: Any) -> gym.Env:
    """Entry point of the registered envs: env → PassiveEnvChecker → OrderEnforcing → ForkableWrapper.

    `gym.make(..., disable_env_checker=True)` leaves the checker out. Gymnasium does not pass that flag to
    entry points, so it is read from the calling `gymnasium.make` frame (the registration sets it True so
    Gymnasium never adds a second checker outside ForkableWrapper, where it would hide `fork`).
    """
    from gymnasium.envs.registration import load_env_creator

    env = load_env_creator(entry_point)(**kwargs)
    if not _make_disabled_env_checker():
        env = gym.wrappers.PassiveEnvChecker(env)
    return ForkableWrapper(gym.wrappers.OrderEnforcing(env))


def _make_disabled_env_checker() -> bool:
    """Whether the `gymnasium.make` call that is building this env passed disable_env_checker=True."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == "make" and frame.f_globals.get("__name__") == "gymnasium.envs.registration":
            return frame.f_locals.get("disable_env_checker") is True
        frame = frame.f_back
    return False


class ForkableWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Outermost wrapper of every Bunshin env made by gym.make: exposes `fork(n)` through the wrapper stack."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def fork(self, n: int = 1) -> list[gym.Env]:
        return self.env.unwrapped.fork(n)
