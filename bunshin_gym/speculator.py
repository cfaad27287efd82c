"""Speculator: runs an episode's predicted next calls on its own thread while the policy thinks (BunshinRL §3.3).

It borrows the live workspace from the `Restorer` (no fork: a CRIU dump + restore per speculation costs more
than the think time it hides on small machines), runs the chain there and records each result in the
prefix tree. Every actual call is checked against the chain (`SpeculativeChain`): a match is served from
the tree (waiting for the in-flight call if needed) and the workspace is handed back when the episode next
needs a live one. A mismatch aborts the chain: a call it is running is cut short (its workspace is killed,
the call abandoned in the tree: nothing recorded, a waiting env claims it again) instead of being waited for
on the episode's critical path; a chain stopped between calls keeps its workspace for adoption where it holds
the episode's state. `stop()` always joins the thread before returning, so nothing it runs can land in a tree
after the episode moved on (reset to another task, close).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from forkcore import Workspace

from .cache import Executed, Node, PrefixTree
from .speculation import ChainOutcome, SpeculationStats, SpeculativeChain


class _Run:
    """One in-flight chain: its bookkeeping, workspace and the node it reached."""

    def __init__(self, chain: SpeculativeChain, workspace: Workspace, node: Node) -> None:
        self.chain, self.workspace, self.node = chain, workspace, node
        self.abort = threading.Event()
        self.lock = threading.Lock()  # orders `abort` against `executing`: a call is killed only while it runs
        self.executing = False
        self.killed = False
        self.error: Exception | None = None
        self.thread: threading.Thread | None = None


class Speculator:
    """Speculation of one env (its settings survive resets; `stop()` ends the current chain).

    Args:
        selector: a trained `SpecToolSelector` (`predict_chain(history, k, task_id)`).
        k: length of a chain.
        min_idle_cpus: start a chain only while at least this many CPUs were idle over the last second
            (`idle_cpus()`, e.g. `Runtime.idle_cpus`): a chain uses CPU the policy leaves idle (the GPU thinks);
            on a saturated machine it would slow every other rollout down. 0: always.
        discard: destroys a workspace the speculator no longer needs (e.g. `Reaper.destroy`, off the critical
            path). Default: `Workspace.destroy`.
    Attributes:
        enabled: toggled per env (the rollout driver's tail selection does).
        filter: signature -> bool: worth running ahead? A chain stops at the first call that is not.
    """

    def __init__(self, selector: Any, k: int, min_idle_cpus: float = 0.0,
                 idle_cpus: Callable[[], float | None] | None = None,
                 discard: Callable[[Workspace], None] | None = None) -> None:
        self.selector, self.k = selector, k
        self.discard = discard if discard is not None else Workspace.destroy
        self.min_idle_cpus, self.idle_cpus = min_idle_cpus, idle_cpus
        self.enabled = selector is not None
        self.filter: Callable[[str], bool] | None = None
        self.stats = SpeculationStats()
        self.adopted = 0
        self.skipped = 0  # chains not started: a mismatch was expected to cost more than a match saves
        self.retained_first = 0  # chains started after retaining their start state (see `start`'s `retain`)
        self._run: _Run | None = None

    def start(self, tree: PrefixTree, task_id: str, history: list[str], node: Node, lend: Callable,
              execute: Callable[[Workspace, str], Executed], readonly: Callable[[str], bool],
              replay_s: float, diag: dict, before: Callable[[Workspace, Node], None] | None = None,
              retain: Callable[[Workspace, Node], None] | None = None) -> bool:
        """Start the predicted chain from `node` (the live state) if it is expected to pay; `lend()` hands
        over the live workspace and `before(ws, node)` runs on the thread first (retaining the state the
        chain starts from). `retain(ws, node)`, where given, can retain that state when the episode did not
        plan to: it runs first when the chain pays only if a mismatch costs a bare restore (no replay).
        Returns whether a chain started."""
        self.stop()
        idle = self.idle_cpus() if self.idle_cpus is not None and self.min_idle_cpus > 0 else None
        if idle is not None and idle < self.min_idle_cpus:
            diag["speculation"] = {"skipped": f"{idle:.2f} idle CPUs < {self.min_idle_cpus}"}
            return False
        preds = self.selector.predict_chain(history, self.k, task_id)
        if not preds:
            return False
        # Expected value of running ahead: a match hides the call's execution (what calls of its cost class
        # or the same call cost elsewhere in the tree; unknown: what the last call cost); a mismatch costs a
        # restore plus the replay from the nearest retained snapshot.
        p = preds[0].prob
        exec_s = tree.expected_cost_s(preds[0].signature, node.cost_s, at=node)

        def pays(mismatch_s: float) -> bool:
            return p * exec_s > (1.0 - p) * mismatch_s

        restore_s = tree.policy.est_restore_s
        mismatch_s = restore_s + replay_s
        retained_first = before is None and retain is not None and not pays(mismatch_s) and pays(restore_s)
        if retained_first:  # a snapshot first makes it pay
            before, mismatch_s = retain, restore_s
        if not pays(mismatch_s):
            self.skipped += 1
            diag["speculation"] = {"skipped": f"p={p:.2f} x exec {exec_s:.2f}s <= {1 - p:.2f} x mismatch "
                                              f"{mismatch_s:.2f}s"}
            return False
        calls = [pr.signature for pr in preds if not readonly(pr.signature)]
        if self.filter is not None:
            worth = [self.filter(s) for s in calls]
            calls = calls[:worth.index(False)] if False in worth else calls
        if not calls:
            return False
        ws, ws_node = lend()
        if ws is None:
            return False
        run = _Run(SpeculativeChain(tuple(calls), base=ws_node), ws, ws_node)
        self.stats.start(run.chain)

        def body() -> None:
            if before is not None:
                before(run.workspace, run.node)
            try:
                for sig in run.chain.calls:
                    if tree.is_in_flight(run.node, sig):  # another env runs it: stop at the last state held
                        return
                    with tree.acquire_miss(run.node, sig) as claim:
                        if not claim.leader:  # already known (another env ran it): stop at the last state held
                            return
                        with run.lock:
                            if run.abort.is_set():
                                claim.abandon()
                                return
                            run.executing = True
                        try:
                            ran = execute(run.workspace, sig)
                        finally:
                            with run.lock:
                                run.executing = False
                        if run.abort.is_set():  # maybe killed mid-call: what it returned is not the call's result
                            claim.abandon()
                            return
                        run.node = claim.complete(*ran)
                    if ran.step.terminated:
                        return
            except Exception as e:  # noqa: BLE001 - a failed speculation only costs its time
                if not run.killed:
                    run.error = e

        run.thread = threading.Thread(target=body, name="bunshin-speculation", daemon=True)
        self._run = run
        run.thread.start()
        diag["speculation"] = {"started": calls, "retained_first": retained_first}
        self.retained_first += retained_first
        return True

    def on_action(self, signature: str, is_recorded: Callable[[], bool], diag: dict) -> None:
        """Check the policy's actual call against the chain; on a match wait until the chain has recorded it."""
        run = self._run
        if run is None:
            return
        outcome = run.chain.check(signature)
        self.stats.observe(outcome, run.chain)
        if outcome is ChainOutcome.MATCH:
            diag["speculation_match"] = True
            t0 = time.monotonic()  # the chain is running this call: wait for it instead of running it twice
            while run.thread.is_alive() and not is_recorded():
                time.sleep(0.005)
            diag["speculation_wait_s"] = time.monotonic() - t0
        elif outcome is ChainOutcome.MISMATCH:
            t0 = time.monotonic()
            self._halt(run)  # its workspace stays for `take_workspace` (where it holds the episode's state)
            diag["speculation_match"] = False
            diag["speculation_stop_s"] = round(time.monotonic() - t0, 4)
        # EXHAUSTED: the chain ran out; keep its workspace for adoption at the next miss

    @property
    def holds_workspace(self) -> bool:
        """Whether a chain (running or finished, not yet adopted) holds the episode's live workspace."""
        return self._run is not None

    def take_workspace(self, node: Node) -> Workspace | None:
        """The finished chain's workspace if it holds `node`'s state (the speculation is over after)."""
        run = self._run
        if (run is None or run.thread.is_alive() or run.node is not node or run.error is not None
                or run.killed):
            return None
        ws, run.workspace, self._run = run.workspace, None, None
        self.adopted += 1
        return ws

    def stop(self) -> None:
        """Abort the chain (a call it is running is cut short), wait for its thread, destroy its workspace."""
        run, self._run = self._run, None
        if run is None:
            return
        self._halt(run)
        if run.workspace is not None:
            self.discard(run.workspace)

    @staticmethod
    def _halt(run: _Run) -> None:
        """Abort `run` and join its thread; a call it is executing is ended by killing its workspace (waiting
        for it would put the rest of a call nobody asked for on the episode's critical path)."""
        with run.lock:
            run.abort.set()
            run.killed = run.executing
        if run.killed:
            run.workspace.kill()
        run.thread.join()

    @property
    def counters(self) -> dict:
        """`BunshinEnv.spec_stats`: chains started ("predicted"), calls matched, chains aborted, adopted, and
        chains not started because they were not expected to pay ("skipped"), chains whose start state was
        retained first so that a mismatch costs no replay ("retained_first")."""
        return {"adopted": self.adopted, "aborted": self.stats.aborted, "predicted": self.stats.chains,
                "matched": self.stats.matched, "skipped": self.skipped, "retained_first": self.retained_first}
