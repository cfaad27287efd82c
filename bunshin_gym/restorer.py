"""Restorer: the one owner of an episode's live workspace and the only code that restores one.

It turns a prefix-tree node into a live workspace holding that node's state (`materialise`: the tree's
restore plan — go on from the live workspace if it is at an ancestor, thaw a standby clone, restore a
retained snapshot or the task's initial one — then replay the recorded calls), retains the live state as a
snapshot in the background (`snapshot_in_background`), keeps the live workspace in step with cache hits in
the background (`follow`), and lends the workspace to the speculator and takes it back (`lend`/`adopt`).
Replays are checked against the recording (`EnvAdapter.exact_fields`): a divergence raises `ReplayDiverged`
for the episode to handle.

Hand-off rule: whoever touches the live workspace first calls `wait_background()` (every method here
does); a lent workspace belongs to the borrower until it is adopted back or destroyed.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from forkcore import RestoreFailed, SnapshotError, Workspace

from .adapter import EnvAdapter, Task
from .cache import CachedStep, Node, PrefixTree
from .runtime import Runtime, TreeSnapshot

if TYPE_CHECKING:
    from .task_snapshots import TaskSnapshot

log = logging.getLogger("bunshin_gym")


class SyncCancelled(RuntimeError):
    """A background sync was ended because the state it was bringing the live workspace to is not needed."""


class ReplayDiverged(RuntimeError):
    """Replaying a recorded call gave another observation than the recording (a timing-dependent app)."""

    def __init__(self, node: Node, key: str) -> None:
        super().__init__(f"replaying {node.signature!r} (depth {node.depth}) gave another {key!r} than recorded")
        self.node, self.key = node, key


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b


class Restorer:
    """Live workspace of one episode (see the module docstring).

    Args:
        runtime: the process's runtime (standby pools).
        tree: the task's prefix tree.
        task, task_snapshot: the task and its initial snapshot (what the tree's root is).
        adapter: the env's adapter (the executor call of a signature, the fields replay must reproduce).
        backend: forkcore memory backend for every restore.
        call_timeout_s: RPC timeout of each replayed call.
    """

    def __init__(self, runtime: Runtime, tree: PrefixTree, task: Task, task_snapshot: "TaskSnapshot",
                 adapter: EnvAdapter, backend: str, call_timeout_s: float) -> None:
        self.runtime, self.tree, self.task, self.task_snapshot = runtime, tree, task, task_snapshot
        self.adapter, self.backend, self.call_timeout_s = adapter, backend, call_timeout_s
        self.workspace: Workspace | None = None
        self.node: Node | None = None  #: the node whose state the live workspace holds
        self._bg: threading.Thread | None = None  # runs self._jobs one after another
        self._jobs: collections.deque[tuple[str, Callable[[], None]]] = collections.deque()  # (kind, job)
        self._running: str | None = None  # the kind of the job the background thread runs now
        self._jobs_lock = threading.Lock()
        self._target: Node | None = None  # where `follow` brings the live workspace
        self._unverified: Node | None = None  # reached by unobserved replay; observed before it is used
        self._sync_abort = threading.Event()  # set by `cancel_syncs`: the running sync stops at its next call
        self._sync_ws: Workspace | None = None  # the workspace a sync's call runs on now (killed by a cancel)
        self._sync_lock = threading.Lock()  # orders `_sync_abort` against `_sync_ws`
        self._standby_s = 0.02  # EWMA of a thaw + first answer
        self.stats = {"live": 0, "standby": 0, "snapshot": 0, "initial": 0, "replayed_calls": 0,
                      "replayed_unobserved": 0, "dropped_snapshots": 0, "diverged": 0, "cancelled_syncs": 0}

    # ---- restore -------------------------------------------------------------------------------------
    def _has_standby(self, node: Node) -> bool:
        snap = self._snapshot_at(node)
        return snap is not None and self.runtime.standby.ready(snap, self.backend)

    def _snapshot_at(self, node: Node):
        if node.parent is None:
            return self.task_snapshot.snapshot
        handle = node.snapshot_handle
        return handle.snapshot if isinstance(handle, TreeSnapshot) else None

    def holds(self, node: Node) -> bool:
        """Whether the live workspace holds `node`'s state, checked against the recording."""
        return self.workspace is not None and self.node is node and self._unverified is None

    def materialise(self, node: Node, diag: dict | None = None) -> int:
        """Make the live workspace hold `node`'s state; returns how many calls were replayed.

        Raises what the restore or a replayed call raises (RestoreFailed, SnapshotError, ExecutorUnreachable,
        ExecutorError) or ReplayDiverged; then there is no live workspace.
        """
        self.wait_background()
        return self._materialise_now(node, diag)

    def _materialise_now(self, node: Node, diag: dict | None, verify: bool = True) -> int:
        """`verify=False` (background sync): the state reached may stay unobserved until it is used."""
        if self.workspace is not None and self.node is node:
            if verify and self._unverified is not None:
                t0 = time.monotonic()
                self._verify_live()
                if diag is not None:
                    diag["verify_s"] = round(time.monotonic() - t0, 4)
            return 0
        t0 = time.monotonic()
        while True:
            live = self.node if self.workspace is not None else None
            with self.tree.checkout(node, standby_s=self._standby_s, has_standby=self._has_standby,
                                    live=live) as plan:
                source = plan.source
                if source == "live":  # the live workspace is at an ancestor: replaying from it is cheapest
                    ws, self.workspace, self.node = self.workspace, None, None
                    break
                self._destroy_live()  # before restoring: its memory is not needed any more
                snap = self._snapshot_at(plan.ancestor)
                ws = self.runtime.standby.take(snap, self.backend) if source == "standby" else None
                if ws is None:
                    source = "snapshot" if plan.ancestor.parent is not None else "initial"
                    try:
                        ws = snap.fork(1, backend=self.backend)[0]
                    except (RestoreFailed, SnapshotError) as e:
                        if source == "initial":
                            raise
                        # A corrupt or unrestorable retained snapshot is only a lost shortcut: drop it (and
                        # those depending on it) and plan again from what is left, down to the initial state.
                        log.warning("retained snapshot at depth %d of task %s failed to restore, dropped: %s",
                                    plan.ancestor.depth, self.tree.task_id, e)
                        self.stats["dropped_snapshots"] += 1
                        failed = plan.ancestor
                    else:
                        self.tree.policy.observe_timing(restore_s=time.monotonic() - t0)
                        self._note_restore(plan.ancestor, snap)
                        break
                else:
                    self._standby_s = 0.8 * self._standby_s + 0.2 * (time.monotonic() - t0)
                    break
            self.tree.drop_snapshot(failed)
        self.stats[source] += 1
        if source in ("snapshot", "standby") and plan.ancestor.parent is not None:
            self.tree.policy.observe_restored()
        self._unverified = None  # a live start still unobserved is checked through the state replayed from it
        try:
            reached = self._replay(ws, plan.ancestor, plan.calls)
        except BaseException:
            ws.destroy()
            raise
        self.workspace, self.node, self._unverified = ws, node, reached
        if verify:
            self._verify_live()
        if diag is not None:
            diag["restore"] = {"source": source, "replayed": len(plan.calls), "s": round(time.monotonic() - t0, 4)}
        return len(plan.calls)

    def _note_restore(self, ancestor: Node, snap) -> None:
        """A retained snapshot restored from twice is a divergence point: keep standby clones of it."""
        handle = ancestor.snapshot_handle
        if isinstance(handle, TreeSnapshot):
            handle.restores += 1
            if handle.restores >= 2:
                self.runtime.standby.ensure(snap, self.backend, initial=self.task_snapshot.snapshot)

    def _replay(self, ws: Workspace, ancestor: Node, calls: tuple[str, ...]) -> Node | None:
        """Run the recorded calls from `ancestor`, checking each answer against the recording
        (`EnvAdapter.exact_fields`); raises ReplayDiverged at the first that differs. Where the adapter's
        `replay_observes_every_call` is False the calls are not observed and are checked by `last_action_error`
        only; then returns the node reached, whose observation `_verify_live` checks before the state is used."""
        n = ancestor
        observe = self.adapter.replay_observes_every_call
        for sig in calls:
            n = n.children[sig]
            method, params = self.adapter.step_call(sig) if observe else self.adapter.step_call(sig, observe=False)
            raw = self._call(ws, method, params)
            self.stats["replayed_calls"] += 1
            self.stats["replayed_unobserved"] += not observe
            if n.result is None:
                continue
            if observe:
                self._check(n, self.adapter.decode(raw, self.task).observation, self._fields(n))
            else:
                self._check(n, {"last_action_error": self.adapter.decode_error(raw)}, ("last_action_error",))
        return n if calls and not observe and n.result is not None else None

    def _call(self, ws: Workspace, method: str, params: dict):
        """`ws.call`; on the background thread a call `cancel_syncs` can end (SyncCancelled before it starts,
        the workspace killed while it runs)."""
        if threading.current_thread() is not self._bg:
            return ws.call(method, timeout=self.call_timeout_s, **params)
        with self._sync_lock:
            if self._sync_abort.is_set():
                raise SyncCancelled("the state this sync was reaching is not needed any more")
            self._sync_ws = ws
        try:
            return ws.call(method, timeout=self.call_timeout_s, **params)
        finally:
            with self._sync_lock:
                self._sync_ws = None

    def _fields(self, n: Node) -> tuple[str, ...]:
        """The observation fields a replay must reproduce (`EnvAdapter.exact_fields`; all where None)."""
        return self.adapter.exact_fields or tuple(n.result.observation)

    @staticmethod
    def _differing(n: Node, got: dict, keys) -> str | None:
        return next((k for k in keys if not _same(got.get(k), n.result.observation.get(k))), None)

    def matches(self, n: Node, got: CachedStep) -> bool:
        """Whether `got`, executed here, is what `n` recorded (the fields a replay must reproduce)."""
        return (got.reward, got.terminated) == (n.result.reward, n.result.terminated) and \
            self._differing(n, got.observation, self._fields(n)) is None

    def _check(self, n: Node, got: dict, keys) -> None:
        key = self._differing(n, got, keys)
        if key is not None:
            self.stats["diverged"] += 1
            raise ReplayDiverged(n, key)

    def _verify_live(self) -> None:
        """Observe the state an unobserved replay reached and check it against the recording (its calls'
        `last_action_error` were checked as they ran); on a difference the live workspace is dropped and
        ReplayDiverged raised."""
        n, self._unverified = self._unverified, None
        if n is None or self.workspace is None:
            return
        method, params = self.adapter.observe_call()
        try:
            got = self.adapter.decode(self._call(self.workspace, method, params), self.task).observation
            self._check(n, got, [k for k in self._fields(n) if k != "last_action_error"])
        except BaseException:
            self._destroy_live()
            raise

    def ensure_initial_standby(self) -> None:
        self.runtime.standby.ensure(self.task_snapshot.snapshot, self.backend)

    # ---- snapshots in the background ---------------------------------------------------------------
    def snapshot_into_tree(self, ws: Workspace, node: Node) -> None:
        """Dump `ws` (holding `node`'s state) and retain it in the tree (a failure only loses a shortcut)."""
        try:
            t0 = time.monotonic()
            snap = ws.snapshot()
            self.tree.attach_snapshot(node, TreeSnapshot(snap, self.runtime.standby), time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - logged; the state can still be re-materialised by replay
            log.warning("snapshot of task %s at depth %d failed: %s", self.tree.task_id, node.depth, e)

    def snapshot_in_background(self) -> None:
        """Retain the live state as a snapshot on the background thread, while the policy thinks."""
        ws, node = self.workspace, self.node
        if ws is not None and node is not None:
            self._submit("snapshot", lambda: self.snapshot_into_tree(ws, node))

    def follow(self, target: Node, kind: str = "sync") -> None:
        """Bring the live workspace to `target` on the background thread, while the policy thinks: after cache
        hits the episode has moved on without executing; materialising `target` now (the tree's cheapest plan:
        usually replaying the hit calls on the live workspace) means a later miss finds the state ready instead
        of restoring and replaying on the critical path. A replay that diverges or fails only discards the
        workspace. `kind` names the job in `wait_background`'s answer ("reset": the initial state's restore)."""
        self._target = target
        self._submit(kind, self._follow_now)

    def _follow_now(self) -> None:
        try:
            self._materialise_now(self._target, None, verify=False)
            if self._sync_abort.is_set():  # its last call may have been killed as it returned
                raise SyncCancelled("the state this sync reached is not needed any more")
            with self._jobs_lock:
                last = not self._jobs
            if last:  # no later sync queued: observe the state now, behind the think time, not on a miss's path
                self._verify_live()
        except Exception as e:  # noqa: BLE001 - the foreground path restores and reports if it needs to
            if self._sync_abort.is_set():
                self.stats["cancelled_syncs"] += 1
            else:
                log.info("background sync of task %s stopped: %s", self.tree.task_id, e)
            self._destroy_live()

    def _submit(self, kind: str, job: Callable[[], None]) -> None:
        with self._jobs_lock:
            self._jobs.append((kind, job))
            if self._bg is None:
                self._bg = threading.Thread(target=self._drain, name="bunshin-restorer", daemon=True)
                self._bg.start()

    def _drain(self) -> None:
        while True:
            with self._jobs_lock:
                if not self._jobs:
                    self._bg = self._running = None
                    return
                self._running, job = self._jobs.popleft()
                self._sync_abort.clear()  # a cancel ends the jobs running or queued before it, no later one
            job()

    def wait_background(self) -> tuple[str, ...]:
        """Wait until the background jobs (snapshot, follow) are done: then the live workspace is ours.
        Returns the kinds of the jobs running or queued when called ("snapshot", "sync", "reset")."""
        with self._jobs_lock:
            if self._bg is None or self._bg is threading.current_thread():
                return ()
            kinds = tuple(k for k in dict.fromkeys([self._running, *(k for k, _ in self._jobs)]) if k)
        while True:
            with self._jobs_lock:
                thread = self._bg
            if thread is None or thread is threading.current_thread():
                return kinds
            thread.join()

    # ---- hand-off ----------------------------------------------------------------------------------
    def lend(self) -> tuple[Workspace | None, Node | None]:
        """Hand the live workspace (and the node it holds) to a borrower; the restorer has none after."""
        self.wait_background()
        if self._unverified is not None:  # nothing builds on a state not yet checked against its recording
            return None, None
        out = (self.workspace, self.node)
        self.workspace, self.node = None, None
        return out

    def adopt(self, ws: Workspace, node: Node) -> None:
        """Take a workspace holding `node`'s state as the live one (a speculative chain's, or a clone's)."""
        self.drop()
        self.workspace, self.node = ws, node

    def cancel_syncs(self) -> None:
        """The episode will not build on its state any more (it ended, or its workspace goes): syncs not yet
        started are dropped and a running one ends at its next call (a call it is running is cut short by
        killing its workspace: on a busy machine the rest of a replay nobody needs takes CPU from the others).
        Snapshots still run; the live workspace, if a sync ended, is gone (materialise restores one)."""
        with self._jobs_lock:
            self._jobs = collections.deque(j for j in self._jobs if j[0] == "snapshot")
            running = self._running in ("sync", "reset")
            if running:  # set under the jobs' lock: `_drain` cannot start another job in between
                self._sync_abort.set()
        if running:
            with self._sync_lock:
                ws = self._sync_ws
            if ws is not None:
                ws.kill()

    def drop(self, background: bool = False) -> None:
        """Destroy the live workspace (on the runtime's reaper thread if `background`); syncs are cancelled
        (`cancel_syncs`: the state they would reach is not needed), snapshots still run."""
        self.cancel_syncs()
        self.wait_background()
        self._destroy_live(background)

    def _destroy_live(self, background: bool = False) -> None:
        self._unverified = None
        if self.workspace is not None:
            if background:
                self.runtime.reaper.destroy(self.workspace)
            else:
                self.workspace.destroy()
        self.workspace, self.node = None, None

