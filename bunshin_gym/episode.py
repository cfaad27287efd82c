"""Episode: one task attempt of a Bunshin env — its position in the task's prefix tree and the step cache.

A step is looked up in the tree by the whole action history (hit: the recorded result, nothing runs);
a miss claims the call (single flight across envs), materialises the live workspace at the parent state
through the `Restorer`, executes, and records the result. An env whose live workspace already holds the
state a call in flight elsewhere starts from runs it too (lockstep rollouts), so it need not catch up after.
The episode also evaluates (terminal steps and truncation), retains states the snapshot policy picks, starts
speculation, keeps the live workspace in step with cache hits in the background, and forks itself. A replay
that no longer gives what was recorded (a timing-dependent app) drops that part of the tree and the calls are
executed again.

Failures (BunshinRL's "a cache hit must mean the same thing as executing"): nothing that failed is ever
recorded or left in the history. A handler error or a timed-out / unreachable executor comes back as
`last_action_error` and the episode goes on from the state before the call (its workspace, which may be
mid-call, is discarded); a restore that cannot be made raises `StepFailed`, after which only reset() works.
"""
from __future__ import annotations

import copy
import logging
import time

import gymnasium as gym

from forkcore import ExecutorError, ExecutorUnreachable, ForkcoreError, RestoreFailed, SnapshotError, Workspace

from .adapter import EnvAdapter, EvaluationUnavailable, Task
from .cache import CachedStep, CacheError, CacheStore, Executed, MissExecutionError, Node, PrefixTree
from .restorer import ReplayDiverged, Restorer
from .runtime import Runtime
from .speculator import Speculator
from .task_snapshots import TaskSnapshot

log = logging.getLogger("bunshin_gym")

#: replays that may diverge in a row (each drops the subtree it reached) before the step gives up
MAX_DIVERGENCES = 3


class StepFailed(gym.error.ResetNeeded):
    """The episode's workspace could not be restored; the tree is unchanged. Call reset()."""


class Episode:
    """One episode of a task (made by `BunshinEnv.reset`, cloned by `fork`).

    Args:
        runtime, adapter: the process's runtime and the env's adapter.
        task, task_snapshot: the task and its initial snapshot.
        tree, store: the task's prefix tree and its on-disk store (or None).
        speculator: the env's speculator (it outlives episodes; `close()` stops its chain).
        backend, call_timeout_s: forkcore backend of every restore; RPC timeout of every call.
        retain: whether this episode may retain snapshots in the tree (cache=True envs).
        sync: keep the live workspace in step with cache hits in the background (`Restorer.follow`).
    """

    def __init__(self, runtime: Runtime, adapter: EnvAdapter, task: Task, task_snapshot: TaskSnapshot,
                 tree: PrefixTree, store: CacheStore | None, speculator: Speculator, backend: str,
                 call_timeout_s: float, retain: bool, initial_observation: dict, sync: bool = False) -> None:
        self.runtime, self.adapter, self.task, self.task_snapshot = runtime, adapter, task, task_snapshot
        self.tree, self.store, self.speculator = tree, store, speculator
        self.backend, self.call_timeout_s, self.retain, self.sync = backend, call_timeout_s, retain, sync
        self.restorer = Restorer(runtime, tree, task, task_snapshot, adapter, backend, call_timeout_s)
        self.node: Node = tree.root
        self.history: list[str] = []
        self.elapsed_steps = 0
        self.done = False
        self.last_obs: dict = initial_observation
        self.broken: str | None = None  # why the episode cannot go on (StepFailed)
        # When the policy last got an observation (reset's, then each step's): what it thinks behind.
        self._step_returned_at = time.monotonic()

    # ---- the step cache ------------------------------------------------------------------------------
    def step(self, signature: str, diag: dict) -> CachedStep:
        """The step's result: from the tree, or executed and recorded (see the module docstring)."""
        self.tree.policy.observe_think(time.monotonic() - self._step_returned_at)
        try:
            return self._step(signature, diag)
        finally:
            self._step_returned_at = time.monotonic()

    def _step(self, signature: str, diag: dict) -> CachedStep:
        history = self.history + [signature]
        self.speculator.on_action(signature, lambda: self.tree.lookup(history, count=False).hit, diag)
        if diag.get("speculation_match") is False:  # the chain stopped: adopt its workspace if it is here
            ws = self.speculator.take_workspace(self.node)
            if ws is not None:
                self.restorer.adopt(ws, self.node)
            else:
                self.speculator.stop()
        try:
            node, step = self._advance(history, diag)
        except (ForkcoreError, CacheError, EvaluationUnavailable) as e:
            # A handler raised, the executor timed out or died, or the env we waited on failed: nothing is
            # recorded and the workspace (maybe mid-call) is discarded; the episode stays where it was.
            cause = e.__cause__ if isinstance(e, MissExecutionError) and e.__cause__ else e
            msg = f"{getattr(cause, 'remote_type', type(cause).__name__)}: {cause}"
            self.restorer.drop()
            diag["cache"] = "error"
            return CachedStep(self.with_error(msg), 0.0, False, False, {"last_action_error": msg})
        self.history, self.node = history, node
        if (diag["cache"] in ("hit", "waited") and self.sync and not step.terminated
                and not self.speculator.holds_workspace):  # an episode that ended builds on nothing
            self.restorer.follow(node)
        return step

    def _advance(self, history: list[str], diag: dict) -> tuple[Node, CachedStep]:
        """The node and result of `history`: looked up, or its missing calls executed and recorded. A replay
        that no longer reproduces its recording drops that subtree and the calls are executed afresh."""
        for _ in range(MAX_DIVERGENCES + 1):
            match = self.tree.lookup(history)
            if match.hit:
                diag["cache"] = "hit"
                return match.node, match.result
            try:
                return self._execute_missing(match.node, match.remaining, diag, history)
            except ReplayDiverged as d:
                self._forget(d, diag)
        raise StepFailed(f"replaying the recorded calls of task {self.task.id} diverged {MAX_DIVERGENCES + 1} times "
                         f"in a row (the app does not replay deterministically); call reset()")

    def _execute_missing(self, node: Node, calls: tuple[str, ...], diag: dict,
                         history: list[str]) -> tuple[Node, CachedStep]:
        step: CachedStep | None = None
        shared = self.runtime.shared_records
        for i, sig in enumerate(calls):  # normally one call: this step
            prefix = history[:len(history) - len(calls) + i + 1]
            alongside = self._run_alongside(node, sig, diag)
            t0 = time.monotonic()
            with self.tree.acquire_miss(node, sig, timeout=self.call_timeout_s + 60) as claim:
                if not claim.leader:
                    diag["claim_wait_s"] = round(time.monotonic() - t0, 4)
                    if alongside is not None:
                        self._keep_alongside(claim.node, alongside.step, diag)
                    node, step = claim.node, claim.result
                    diag["cache"] = "waited"
                    continue
                found = shared.get(self.tree.key, prefix) \
                    if shared is not None and alongside is None and not self._local_only(node, sig) else None
                if found is not None:  # executed on another node: a hit; the live workspace stays where it is
                    step, exec_s = found
                    node = claim.complete(step, exec_s)
                    diag["cache"], diag["shared_record"] = "hit", True
                    continue
                if alongside is not None:  # the env it ran alongside failed: this run is the record
                    step, exec_s, replay_s = alongside
                else:
                    self._live(node, diag)
                    step, exec_s, replay_s = self.execute(self.restorer.workspace, sig)
                    diag["execute_s"] = round(exec_s, 4)
                node = claim.complete(step, exec_s, replay_s)
                self.restorer.node = node
                diag["cache"] = "miss"
                if shared is not None:
                    shared.put(self.tree.key, prefix, step, exec_s)
        return node, step

    def _run_alongside(self, node: Node, signature: str, diag: dict) -> Executed | None:
        """Where another env is executing this very call from `node`'s state and this episode's live workspace
        holds that state too (a group's rollouts in lockstep), execute it here as well, as without the cache,
        instead of waiting and then catching up in the background (a replay or a restore the next step may
        have to wait for). Returns what it executed, or None where it did not run (or failed: then the live
        workspace is dropped and the episode waits for the other env's record as usual)."""
        if self.tree.is_readonly(signature) or not self.tree.is_in_flight(node, signature):
            return None
        self.restorer.wait_background()
        if not self.restorer.holds(node):
            return None
        try:
            ran = self.execute(self.restorer.workspace, signature)
        except (ForkcoreError, EvaluationUnavailable) as e:
            log.info("task %s: a call run alongside another env's failed here (%s); waiting for its record",
                     self.task.id, e)
            self.restorer.drop()
            return None
        diag["ran_alongside"], diag["execute_s"] = True, round(ran.cost_s, 4)
        return ran

    def _keep_alongside(self, node: Node, ours: CachedStep, diag: dict) -> None:
        """The live workspace holds `node` after running its call alongside, if it got what was recorded."""
        if self.restorer.matches(node, ours):
            self.restorer.node = node
        else:  # the app answered differently here (timing): the tree's record stands, this state is dropped
            diag["alongside_differed"] = True
            self.restorer.drop()

    def _local_only(self, node: Node, signature: str) -> bool:
        """Whether the state `signature` leads to from `node` is at or below a path this machine must execute
        itself (a record made elsewhere did not replay here: taking it again would diverge again)."""
        if not self.tree.local_only:
            return False
        path = node.path() + (() if self.tree.is_readonly(signature) else (signature,))
        return any(path[:i] in self.tree.local_only for i in range(1, len(path) + 1))

    def _forget(self, d: "ReplayDiverged", diag: dict) -> None:
        if self.runtime.shared_records is not None:
            self.tree.local_only.add(d.node.path())
        removed = self.tree.forget(d.node)
        diag["diverged"] = diag.get("diverged", 0) + 1
        diag.setdefault("diverged_fields", []).append(d.key)
        log.info("task %s: %s; %d recorded states dropped", self.task.id, d, removed)

    def execute(self, ws: Workspace, signature: str) -> Executed:
        """Run one action on `ws` (and evaluate it if it ends the episode). Raises ExecutorError if the
        handler raised, ExecutorUnreachable on a timeout, ServiceDied if a service of the workspace died
        meanwhile, EvaluationUnavailable: nothing to record."""
        method, params = self.adapter.step_call(signature)
        t0 = time.monotonic()
        try:
            raw = ws.call(method, timeout=self.call_timeout_s, **params)
            result = self.adapter.decode(raw, self.task)
        except ExecutorError:
            ws.check_services()  # the handler failed because a service died (e.g. the X server): say that
            raise
        # a replay runs the call without its observation (where the adapter's replays do not observe)
        replay_s = max(0.0, time.monotonic() - t0 - self.adapter.observation_seconds(raw))
        reward = self.evaluate(result.answer, ws) if result.done else 0.0
        ws.check_services()  # a service killed meanwhile (OOM, crash): the result may be wrong, never record it
        step = CachedStep(result.observation, reward, result.done, False,
                          {"last_action_error": result.last_action_error})
        return Executed(step, time.monotonic() - t0, replay_s)

    def evaluate(self, answer: str | None, ws: Workspace) -> float:
        """The task's evaluation of the end state on `ws`. An evaluator that raised judged the state (a task
        failed: 0, recorded); one that could not run raises EvaluationUnavailable (never recorded)."""
        try:
            return self.adapter.evaluate(self.task, answer,
                                         lambda method, **params: ws.call(method, timeout=self.call_timeout_s, **params))
        except ExecutorError as e:  # the end state cannot be judged (e.g. every tab closed): a failed task
            log.warning("evaluation of task %s failed, reward 0: %s", self.task.id, e)
            return 0.0
        except ForkcoreError as e:
            raise EvaluationUnavailable(f"the evaluator of task {self.task.id} could not run: {e}") from e

    def truncation_reward(self, diag: dict) -> float:
        """Evaluation of an empty answer at the current state (memoised per tree node when it ran)."""
        key = (self.tree.key, self.node.key)
        memo = self.runtime.truncation_rewards
        if self.retain and key in memo:
            return memo[key]
        try:
            reward = self.evaluate("", self.live_here(diag))
        except (EvaluationUnavailable, ExecutorError, ExecutorUnreachable) as e:  # StepFailed propagates
            self.restorer.drop()  # its executor may still be busy with the call that timed out
            diag["evaluation_error"] = str(e)
            log.warning("%s; truncated with reward 0 (not memoised)", e)
            return 0.0
        if self.retain:
            memo[key] = reward
        return reward

    # ---- the live workspace --------------------------------------------------------------------------
    def _live(self, node: Node, diag: dict | None = None) -> Workspace:
        """The live workspace in `node`'s state: the finished speculative chain's if it holds it, else
        materialised by the restorer (which first waits for a background snapshot of the live state)."""
        t0 = time.monotonic()
        jobs = self.restorer.wait_background()
        waited_s = time.monotonic() - t0
        if diag is not None and jobs and waited_s > 0.001:  # a snapshot, sync or reset's restore still ran
            diag["background_wait_s"], diag["background_wait_jobs"] = round(waited_s, 4), list(jobs)
        if not self.restorer.holds(node):
            ws = self.speculator.take_workspace(node)
            if ws is not None:
                self.restorer.adopt(ws, node)
            else:
                self.speculator.stop()  # its workspace is not this state: the restorer starts afresh
                diag_ = diag if diag is not None else {}
                try:
                    diag_["replayed_calls"] = self.restorer.materialise(node, diag_)
                except (RestoreFailed, SnapshotError) as e:
                    # Only the initial snapshot gets here (a failed retained one is dropped and planned
                    # around): forget it, so the next reset builds the task snapshot again.
                    self.runtime.standby.discard(self.task_snapshot.snapshot)
                    self.runtime.task_snapshots.discard(self.task_snapshot)
                    self.broken = f"restoring the task's initial snapshot failed: {type(e).__name__}: {e}"
                    raise StepFailed(f"{self.broken}\nNothing was recorded; call reset() to start a new "
                                     f"episode.") from e
        return self.restorer.workspace

    def live_here(self, diag: dict | None = None) -> Workspace:
        """The live workspace at the episode's position; if replaying there diverges, the forgotten calls of
        the history are executed again (the episode then holds what executing them really gives)."""
        if self.broken:
            raise StepFailed(self.broken)
        diag = diag if diag is not None else {}
        for _ in range(MAX_DIVERGENCES + 1):
            try:
                return self._live(self.node, diag)
            except ReplayDiverged as d:
                self._forget(d, diag)
                self.node, _ = self._advance(self.history, diag)
        raise StepFailed(f"replaying the recorded calls of task {self.task.id} keeps diverging; call reset()")

    def after_miss(self, step: CachedStep, selector_ready: bool, diag: dict) -> None:
        """Behind the policy's think time: retain the new state if the policy says so, then speculate."""
        ws_node = self.restorer.node
        think_per_call_s = self.tree.policy.est_think_s if self.sync else 0.0
        decision = (self.tree.should_snapshot(ws_node, think_per_call_s)
                    if self.retain and not step.terminated and ws_node is not None else None)
        want_snapshot = decision is not None and decision.retain
        diag["snapshot_scheduled"] = want_snapshot
        started = False
        if selector_ready and ws_node is not None:
            replay_s = 0.0 if want_snapshot else self.tree.replay_cost_s(ws_node)
            snapshot = self.restorer.snapshot_into_tree
            started = self.speculator.start(
                self.tree, self.task.id, self.history, ws_node, self.restorer.lend, self.execute,
                self.tree.is_readonly, replay_s, diag, before=snapshot if want_snapshot else None,
                retain=snapshot if decision is not None and decision.possible else None)
        if want_snapshot and not started:
            self.restorer.snapshot_in_background()

    # ---- fork and end --------------------------------------------------------------------------------
    def fork(self, n: int, speculators: list[Speculator]) -> list["Episode"]:
        """n episodes in this one's exact state (live workspace, tree position, steps, history)."""
        if self.broken:
            raise StepFailed(self.broken)
        self.live_here()
        clones = self.restorer.workspace.fork(n, backend=self.backend)
        out = []
        for ws, spec in zip(clones, speculators):
            e = Episode(self.runtime, self.adapter, self.task, self.task_snapshot, self.tree, self.store, spec,
                        self.backend, self.call_timeout_s, self.retain, copy.deepcopy(self.last_obs), self.sync)
            e.history, e.node, e.elapsed_steps, e.done = list(self.history), self.node, self.elapsed_steps, self.done
            e.restorer.adopt(ws, self.node)
            out.append(e)
        return out

    def with_error(self, message: str) -> dict:
        obs = copy.deepcopy(self.last_obs)
        if "last_action_error" in obs:
            obs["last_action_error"] = message
        return obs

    def persist(self) -> None:
        """Write the tree's new steps to the on-disk store (a full disk loses persistence, not the episode)."""
        if self.store is not None:
            try:
                self.store.save_tree(self.tree)
            except OSError as e:
                log.warning("cache store: saving task %s failed, continuing in memory: %s", self.tree.task_id, e)

    def close(self, background: bool = False) -> None:
        """Stop speculation (joined: nothing lands in the tree after), drop the workspace (see Restorer.drop)."""
        self.speculator.stop()
        self.restorer.drop(background)

    @property
    def workspace(self) -> Workspace | None:
        return self.restorer.workspace

