"""BunshinEnv: the Gymnasium env shared by all Bunshin envs; each episode runs in a forked live workspace.

`reset()` forks the task's initial snapshot (built once per process, see snapshots.py) into a private
workspace; `step(action)` sends the action to the workspace's executor; the episode is evaluated when the
agent stops (terminated) or at `max_steps` (truncated). `fork(n)` clones the live episode into n new envs.
Env-specific knowledge comes only through an `EnvAdapter`.
"""
from __future__ import annotations

import atexit
import copy
import os
import threading
import time
from typing import Any

import gymnasium as gym
import logging

from forkcore import ALL_BACKENDS, ExecutorError, Snapshot, Workspace

from .adapter import ActionError, EnvAdapter, Task
from .cache import CacheConfig, CachedStep, CacheStore, MissExecutionError, PrefixCache, PrefixTree
from .snapshots import REGISTRY


log = logging.getLogger("bunshin_gym")


class _Speculation:
    """One in-flight speculative chain: its workspace, the calls still expected, the node it reached."""

    def __init__(self, chain: list[str]) -> None:
        self.chain = chain
        self.abort = threading.Event()
        self.thread: threading.Thread
        self.workspace: Workspace | None = None
        self.node = None
        self.error: Exception | None = None


class _TreeSnapshot:
    """A forkcore Snapshot as the prefix tree's SnapshotHandle (the tree calls release() when evicting)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.size_bytes = snapshot.size_bytes()

    def release(self) -> None:
        self.snapshot.release()


#: One prefix cache per process: every env of a task (and every fork of it) shares the task's tree.
PREFIX_CACHE = PrefixCache(CacheConfig(snapshot_budget_bytes=int(os.environ.get("BUNSHIN_SNAPSHOT_BUDGET_MB", "8192")) << 20))
atexit.register(PREFIX_CACHE.close)
_TRUNCATION_REWARDS: dict[tuple[int, str], float] = {}  # (tree id, node key) -> evaluation of "" there
_STORES: dict[str, CacheStore] = {}  # cache_dir -> its store, shared by every env of this process
_STORE_LOADED: set[tuple[str, str, str]] = set()  # (cache_dir, task id, initial digest) adopted from disk
_STORE_LOCK = threading.Lock()


def _store_tree(cache_dir: str, task_id: str, digest: str, readonly) -> tuple[PrefixTree, CacheStore]:
    """The task's tree in PREFIX_CACHE, first loaded from the on-disk store of `cache_dir` (once per process)."""
    cache_dir = os.path.abspath(cache_dir)
    with _STORE_LOCK:
        store = _STORES.get(cache_dir)
        if store is None:
            store = _STORES[cache_dir] = CacheStore(cache_dir)
        if (cache_dir, task_id, digest) not in _STORE_LOADED:
            tree, report = store.load_tree(task_id, digest, readonly=readonly, tree_factory=PREFIX_CACHE.new_tree)
            if report.dropped:
                log.warning("cache store %s: %d corrupt or stale entries of task %s dropped", cache_dir,
                            report.dropped, task_id)
            if all(t.key != tree.key for t in PREFIX_CACHE.trees()):  # else keep the tree this process built
                PREFIX_CACHE.adopt(tree)
            _STORE_LOADED.add((cache_dir, task_id, digest))
        return PREFIX_CACHE.tree(task_id, digest, readonly=readonly), store


def _close_stores() -> None:
    with _STORE_LOCK:
        for store in _STORES.values():
            store.close()
        _STORES.clear()
        _STORE_LOADED.clear()


atexit.register(_close_stores)


def reset_prefix_cache() -> None:
    """Forget every recorded step and release retained snapshots (benchmarks: each configuration starts cold)."""
    global PREFIX_CACHE
    PREFIX_CACHE.close()
    PREFIX_CACHE = PrefixCache(PREFIX_CACHE.config)
    _TRUNCATION_REWARDS.clear()
    _close_stores()


class BunshinEnv(gym.Env):
    """A task of a Bunshin env (see the concrete env's docstring for observation and action details).

    Args:
        task_id: which task (see `bunshin tasks list`); or
        task_config: a task as a dict or a path to its JSON file.
        max_steps: steps before the episode is truncated (and evaluated with an empty answer).
        backend: forkcore memory backend for clones ("auto", "memfile", "ksm", "private").
        cache: consult the task's tool-prefix tree before executing (see below). With cache=False each
            episode gets a private tree (used only by speculation): nothing is reused across episodes.
        selector: a trained `SpecToolSelector`; when set, after each executed step the env runs the
            predicted next `speculate_k` calls on its workspace in the background (see below).
        speculate_k: length of a speculative chain.
        stats_sink: a list that receives this env's speculation counters when it closes (benchmarks).
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
                 stats_sink: list | None = None, cache_dir: str | None = None, **adapter_kwargs: Any) -> None:
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps={max_steps!r}: expected an int >= 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: only 'rgb_array' is supported")
        self.adapter = self.adapter_class(**adapter_kwargs)
        self.max_steps, self.backend, self.use_cache = max_steps, backend, bool(cache)
        self.diagnostics, self.render_mode = diagnostics, render_mode
        self.cache_dir = cache_dir if cache_dir is not None else (os.environ.get("BUNSHIN_CACHE_DIR") or None)
        if self.cache_dir is not None and not self.use_cache:
            raise ValueError("cache_dir needs cache=True (the on-disk store persists the shared prefix tree)")
        self._store: CacheStore | None = None
        if backend != "auto" and backend not in ALL_BACKENDS:  # availability is checked at the first fork
            raise ValueError(f"backend={backend!r}: choose one of auto, {', '.join(ALL_BACKENDS)}")
        given = task_id is not None or task_config is not None  # task_id=0 is a task, not "pick one"
        self._default_task = self.adapter.load_task(task_id, task_config) if given else None
        self.observation_space = self.adapter.observation_space()
        self.action_space = self.adapter.action_space()
        self.task: Task | None = None
        self.workspace: Workspace | None = None
        self.elapsed_steps = 0
        self.history: list[str] = []
        self._last_obs: dict | None = None
        self._done = False
        self._task_snapshot = None
        self._tree: PrefixTree | None = None
        self._node = None  # the episode's position in the tree
        self._ws_node = None  # the tree node whose state the live workspace holds
        self.selector, self.speculate_k = selector, int(speculate_k)
        self.speculation_enabled = selector is not None
        self.speculation_filter: Any = None  # signature -> bool: worth running ahead? (tail timing model)
        self._spec: _Speculation | None = None
        self._bg: threading.Thread | None = None  # a snapshot of the live workspace in progress
        self.spec_stats = {"adopted": 0, "aborted": 0, "predicted": 0, "matched": 0}
        self._stats_sink = stats_sink

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
        self._drop_workspace()
        result = self.adapter.decode(ts.initial_raw, task)
        self.task, self._task_snapshot = task, ts
        self.elapsed_steps, self.history, self._done = 0, [], False
        self._last_obs = result.observation
        self._abort_speculation()
        if self.cache_dir is not None:
            self._tree, self._store = _store_tree(self.cache_dir, task.id, ts.initial_digest, self._readonly)
        elif self.use_cache:
            self._tree = PREFIX_CACHE.tree(task.id, ts.initial_digest, readonly=self._readonly)
        else:  # a private tree: speculation only, no reuse across episodes
            self._tree = PrefixTree(task.id, f"{ts.initial_digest}-{id(self)}-{time.monotonic_ns()}",
                                    readonly=self._readonly)
        if self._tree.root.result is None:
            self._tree.set_root_result(CachedStep(result.observation, info={"last_action_error": ""}))
        self._node = self._tree.root
        if self.use_cache:
            pass  # the workspace is forked lazily, at the first miss
        else:
            self.workspace = ts.snapshot.fork(1, backend=self.backend)[0]
            self._ws_node = self._node
        info = self._info(result.last_action_error, {"reset_s": time.monotonic() - t0})
        return copy.deepcopy(result.observation), info

    def step(self, action: Any):
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        t0 = time.monotonic()
        self.elapsed_steps += 1
        diag: dict[str, Any] = {}
        try:
            signature = self.adapter.canonical_action(action)
        except ActionError as e:
            obs, err, reward, terminated = self._with_error(str(e)), str(e), 0.0, False
            diag["cache"] = "malformed"
        else:
            self.history.append(signature)
            self._check_speculation(signature, diag)
            step = self._cached_step(signature, diag)
            obs, err = step.observation, step.info.get("last_action_error", "")
            reward, terminated = step.reward, step.terminated
        self._last_obs = obs
        truncated = False
        if not terminated and self.elapsed_steps >= self.max_steps:
            reward, truncated = self._truncation_reward(diag), True
        self._done = terminated or truncated
        if self._done:
            self._abort_speculation()
            self._persist()
        elif diag.get("cache") == "miss":
            snapshot_node = self._ws_node if self._wants_snapshot(step) else None
            if not (self.speculation_enabled and self._start_speculation(diag, snapshot_node)) and snapshot_node:
                self._background(lambda ws=self.workspace: self._snapshot_into_tree(ws, snapshot_node))
            diag["snapshot_scheduled"] = snapshot_node is not None
        info = self._info(err, {**diag, "step_s": time.monotonic() - t0})
        return copy.deepcopy(obs), reward, terminated, truncated, info

    def render(self):
        if self._last_obs is None:
            return None
        return self._last_obs.get("screenshot")

    def close(self) -> None:
        self._abort_speculation()
        if not self._done:  # an ended episode was saved when it ended
            self._persist()
        self._drop_workspace()
        if self._stats_sink is not None:
            self._stats_sink.append(dict(self.spec_stats))
            self._stats_sink = None

    def _persist(self) -> None:
        """Write the tree's new steps to the on-disk store (a full disk loses persistence, not the episode)."""
        if self._store is not None and self._tree is not None:
            try:
                self._store.save_tree(self._tree)
            except OSError as e:
                log.warning("cache store %s: saving task %s failed, continuing in memory: %s", self.cache_dir,
                            self._tree.task_id, e)

    # ---- execution, cache and materialisation ---------------------------------------------------------
    def _readonly(self, signature: str) -> bool:
        try:
            return self.adapter.is_read_only(signature)
        except Exception:  # noqa: BLE001 - an unparsable signature is never read-only
            return False

    def _execute(self, signature: str) -> CachedStep:
        """Run one action in the live workspace (and evaluate it if it ends the episode)."""
        return self._execute_on(self.workspace, signature)

    def _execute_on(self, ws: Workspace, signature: str) -> CachedStep:
        """Raises ExecutorError if the handler raised: that result is never recorded (see _cached_step)."""
        method, params = self.adapter.step_call(signature)
        result = self.adapter.decode(ws.call(method, **params), self.task)
        reward = self._evaluate(result.answer, ws) if result.done else 0.0
        return CachedStep(result.observation, reward, result.done, False, {"last_action_error": result.last_action_error})

    def _cached_step(self, signature: str, diag: dict) -> CachedStep:
        tree = self._tree
        match = tree.lookup(self.history)
        if match.hit:
            self._node = match.node
            diag["cache"] = "hit"
            return match.result
        node = match.node
        step = None
        try:
            for sig in match.remaining:  # normally one call: this step
                with tree.acquire_miss(node, sig) as claim:
                    if claim.leader:
                        diag["replayed_calls"] = self._materialise(node)
                        t0 = time.monotonic()
                        step = self._execute(sig)
                        node = claim.complete(step, time.monotonic() - t0)
                        self._ws_node = node
                        diag["cache"] = "miss"
                    else:
                        node, step = claim.node, claim.result
                        diag["cache"] = "waited"
        except (ExecutorError, MissExecutionError) as e:
            # The handler raised (a crashed browser, an unexpected state): nothing is recorded, the
            # workspace may be broken, so it is dropped and the next step re-materialises this state.
            cause = e.__cause__ if isinstance(e, MissExecutionError) and e.__cause__ else e
            msg = f"{getattr(cause, 'remote_type', type(cause).__name__)}: {cause}"
            self.history.pop()
            self._drop_workspace()
            self._node = node
            diag["cache"] = "error"
            return CachedStep(self._with_error(msg), 0.0, False, False, {"last_action_error": msg})
        self._node = node
        return step

    def _materialise(self, node) -> int:
        """Bring the live workspace to `node`'s state; returns how many calls were replayed."""
        self._join_background()
        if self.workspace is not None and self._ws_node is node:
            return 0
        spec = self._spec
        if spec is not None and not spec.thread.is_alive() and spec.node is node and spec.workspace is not None \
                and spec.error is None:
            self._drop_workspace()  # adopt the speculative workspace: it already holds this state
            self.workspace, self._ws_node, spec.workspace = spec.workspace, node, None
            self._spec = None
            self.spec_stats["adopted"] += 1
            return 0
        self._drop_workspace()
        with self._tree.checkout(node) as plan:
            handle = plan.ancestor.snapshot_handle
            source = handle.snapshot if handle is not None else self._task_snapshot.snapshot
            t0 = time.monotonic()
            self.workspace = source.fork(1, backend=self.backend)[0]
            self._tree.policy.observe_timing(restore_s=time.monotonic() - t0)
        for sig in plan.calls:
            method, params = self.adapter.step_call(sig)
            self.workspace.call(method, **params)
        self._ws_node = node
        return len(plan.calls)

    def _wants_snapshot(self, step: CachedStep) -> bool:
        """Selective snapshots: retain the state just executed when the tree's policy says it pays off."""
        return (self.use_cache and not step.terminated and self.workspace is not None
                and self._tree.should_snapshot(self._ws_node).retain)

    def _snapshot_into_tree(self, ws: Workspace, node) -> None:
        """Dump `ws` (holding `node`'s state) and retain it in the tree. Runs behind the policy's think time."""
        try:
            t0 = time.monotonic()
            snap = ws.snapshot()
            self._tree.attach_snapshot(node, _TreeSnapshot(snap), time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - a failed snapshot only loses a shortcut
            log.warning("snapshot of task %s at depth %d failed: %s", self.task.id if self.task else "?",
                        node.depth, e)

    def _background(self, job) -> None:
        """Run `job` on the live workspace while the policy thinks; anything touching it first joins it."""
        self._join_background()
        self._bg = threading.Thread(target=job, name="bunshin-snapshot", daemon=True)
        self._bg.start()

    def _join_background(self) -> None:
        if self._bg is not None:
            self._bg.join()
            self._bg = None

    # ---- speculation -----------------------------------------------------------------------------------
    def _start_speculation(self, diag: dict, snapshot_node=None) -> bool:
        """Start the predicted chain in the background (after retaining `snapshot_node`'s state, if given);
        returns False if nothing was predicted worth running."""
        self._abort_speculation()
        preds = self.selector.predict_chain(self.history, self.speculate_k, self.task.id)
        if not preds or self.workspace is None:
            return False
        # Expected value of running ahead: a match hides the call's execution; a mismatch costs a restore
        # plus the replay from the nearest retained snapshot (none if one is being taken right here).
        p, node = preds[0].prob, self._ws_node
        replay_s = 0.0 if snapshot_node is not None else self._tree.replay_cost_s(node)
        mismatch_s = self._tree.policy.est_restore_s + replay_s
        if p * node.cost_s <= (1.0 - p) * mismatch_s:
            diag["speculation"] = {"skipped": f"p={p:.2f} x exec {node.cost_s:.2f}s <= {1 - p:.2f} x mismatch "
                                              f"{mismatch_s:.2f}s"}
            return False
        chain = [pr.signature for pr in preds if not self._readonly(pr.signature)]
        if self.speculation_filter is not None:  # stop at the first call too quick to be worth running ahead
            worth = [self.speculation_filter(s) for s in chain]
            chain = chain[:worth.index(False)] if False in worth else chain
        if not chain:
            return False
        self.spec_stats["predicted"] += 1
        spec = _Speculation(chain)
        spec.node = self._node
        # The chain runs on the live workspace itself (no fork: a CRIU dump + restore per speculation cost
        # more than the think time it hides on small machines). A match adopts it back; a mismatch destroys
        # it and the next miss re-materialises the state from the tree (nearest retained snapshot + replay).
        spec.workspace, self.workspace, self._ws_node = self.workspace, None, None
        tree = self._tree

        def run() -> None:
            if snapshot_node is not None:
                self._snapshot_into_tree(spec.workspace, snapshot_node)
            try:
                for sig in spec.chain:
                    if spec.abort.is_set():
                        return
                    with tree.acquire_miss(spec.node, sig) as claim:
                        if not claim.leader:  # already known (another env ran it): stop at the last state held
                            return
                        t0 = time.monotonic()
                        step = self._execute_on(spec.workspace, sig)
                        spec.node = claim.complete(step, time.monotonic() - t0)
                    if step.terminated:
                        return
            except Exception as e:  # noqa: BLE001 - a failed speculation only costs its time
                spec.error = e

        spec.thread = threading.Thread(target=run, name="bunshin-speculation", daemon=True)
        self._spec = spec
        spec.thread.start()
        diag["speculation"] = {"started": chain}
        return True

    def _check_speculation(self, signature: str, diag: dict) -> None:
        spec = self._spec
        if spec is None:
            return
        if spec.chain and spec.chain[0] == signature:
            spec.chain = spec.chain[1:]
            self.spec_stats["matched"] += 1
            diag["speculation_match"] = True
            t0 = time.monotonic()  # the chain is running this call: wait for it instead of running it twice
            while spec.thread.is_alive() and not self._tree.lookup(self.history, count=False).hit:
                time.sleep(0.005)
            diag["speculation_wait_s"] = time.monotonic() - t0
            return
        if not spec.chain:
            return  # the chain ran out: keep its workspace for adoption at the next miss
        self._abort_speculation()
        self.spec_stats["aborted"] += 1
        diag["speculation_match"] = False

    def _abort_speculation(self) -> None:
        spec, self._spec = self._spec, None
        if spec is None:
            return
        spec.abort.set()
        spec.thread.join()
        if spec.workspace is not None:
            spec.workspace.destroy()

    def _ensure_workspace(self) -> None:
        if self.workspace is None or self._ws_node is not self._node:
            self._materialise(self._node)

    def live_workspace(self) -> Workspace:
        """The forkcore workspace in this episode's current state, materialised first if the position was
        served from the prefix cache (inspect it with `exec`/`call`; changing it desynchronises the cache)."""
        if self._node is None:
            raise RuntimeError("live_workspace() before reset()")
        self._ensure_workspace()
        return self.workspace

    def _truncation_reward(self, diag: dict) -> float:
        key = (id(self._tree), self._node.key)
        if key in _TRUNCATION_REWARDS:
            return _TRUNCATION_REWARDS[key]
        self._ensure_workspace()
        reward = self._evaluate("")
        if self.use_cache:
            _TRUNCATION_REWARDS[key] = reward
        return reward

    def _drop_workspace(self) -> None:
        self._join_background()
        if self.workspace is not None:
            self.workspace.destroy()
        self.workspace, self._ws_node = None, None

    # ---- fork ---------------------------------------------------------------------------------------
    def fork(self, n: int = 1) -> list[gym.Env]:
        """n new envs in this episode's exact state (live workspace, tree position, step count, history);
        this env goes on unchanged. Each is wrapped the way `gym.make` wrapped this one."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"fork(n={n!r}): n must be an int >= 1")
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before fork()")
        self._ensure_workspace()
        clones = self.workspace.fork(n, backend=self.backend)
        out = []
        for ws in clones:
            env = gym.make(self.spec) if self.spec is not None else type(self)(**self._ctor_kwargs())
            base: BunshinEnv = env.unwrapped
            base.task, base._task_snapshot, base.workspace = self.task, self._task_snapshot, ws
            base.elapsed_steps, base.history, base._done = self.elapsed_steps, list(self.history), self._done
            base._last_obs = copy.deepcopy(self._last_obs)
            base._tree, base._node, base._ws_node = self._tree, self._node, self._node
            base._store = self._store
            base.selector, base.speculation_enabled = self.selector, self.speculation_enabled
            base.speculation_filter = self.speculation_filter
            _mark_reset(env)
            out.append(env)
        return out

    def _ctor_kwargs(self) -> dict:
        return {"max_steps": self.max_steps, "backend": self.backend, "cache": self.use_cache,
                "diagnostics": self.diagnostics, "render_mode": self.render_mode, "speculate_k": self.speculate_k,
                "cache_dir": self.cache_dir}

    # ---- helpers ------------------------------------------------------------------------------------
    def _evaluate(self, answer: str | None, ws: Workspace | None = None) -> float:
        method, params = self.adapter.evaluate_call(answer)
        try:
            return float((ws or self.workspace).call(method, **params)["reward"])
        except ExecutorError as e:  # the end state cannot be judged (e.g. every tab closed): a failed task
            log.warning("evaluation of task %s failed, reward 0: %s", self.task.id if self.task else "?", e)
            return 0.0

    def _with_error(self, message: str) -> dict:
        obs = copy.deepcopy(self._last_obs) if self._last_obs is not None else {}
        if "last_action_error" in obs:
            obs["last_action_error"] = message
        return obs

    def _info(self, error: str, diag: dict) -> dict:
        info: dict[str, Any] = {"last_action_error": error, "task_id": self.task.id if self.task else None,
                                "elapsed_steps": self.elapsed_steps}
        if self.diagnostics:
            info["bunshin"] = {"backend": self.workspace.backend if self.workspace else None, **diag}
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
    """Entry point of the registered envs: env → PassiveEnvChecker → OrderEnforcing → ForkableWrapper."""
    from gymnasium.envs.registration import load_env_creator

    env = load_env_creator(entry_point)(**kwargs)
    return ForkableWrapper(gym.wrappers.OrderEnforcing(gym.wrappers.PassiveEnvChecker(env)))


class ForkableWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Outermost wrapper of every Bunshin env made by gym.make: exposes `fork(n)` through the wrapper stack."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def fork(self, n: int = 1) -> list[gym.Env]:
        return self.env.unwrapped.fork(n)
