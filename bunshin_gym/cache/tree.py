"""The tool-call prefix tree of one task (TVCache's tool call graph; BunshinRL's tool-prefix tree).

Owns: the tree of canonical call signatures observed from one initial state, the recorded step result
and cost of every call, longest-prefix lookup over a whole action history, the read-only ("stateless")
annotation, single-flight execution of identical concurrent misses, and which node holds a retained
snapshot (through `SnapshotPool`). Does not own: executing calls, taking/forking snapshots (forkcore),
canonicalising signatures (the env gives them), episode bookkeeping (step counts, TimeLimit truncation:
the env computes those outside the cache), or persistence (`store.py`).

Correctness contract (TVCache §3.2 / BunshinRL §3.2). A cached result is returned only when the *same
task*, the *same initial state* (one tree per ``(task_id, initial_digest)``) and the *same full prefix*
of state-changing calls led to it. This is exact, not heuristic, provided the env is deterministic given
(initial state, call sequence): fixed clock, seeded data, loopback only.

Read-only calls. The env may supply ``readonly(signature) -> bool``. A signature is read-only iff, for
every reachable state ``s``, executing it leaves the workspace state exactly ``s`` (including clocks,
counters, caches the app keeps, anything a later call could observe) and its step result is a function of
``(s, signature)`` only. Then:

  1. State is unchanged by read-only calls, so by induction over the history the state after history
     ``h`` equals the state after ``h`` with its read-only calls deleted. The tree therefore keys states
     by the subsequence of *stateful* calls only: a read-only call never creates an edge and never
     advances the state path, wherever it appears in the history.
  2. A read-only call's result is a function of (state, signature), so it is cached as a *side entry* on
     the node of the state it ran in, keyed by its own signature (``node.side[signature]``). A lookup
     whose *last* call is read-only is a hit iff that side entry exists at the state reached by the
     stateful calls before it; a read-only call *before* the last one is simply skipped (its result
     was already returned when it was the last call, and it did not change state).
  3. Two histories that differ only in read-only calls therefore share every cached state and result —
     the extra reuse TVCache's annotation buys — and nothing else is shared, so no stale result can be
     served (the `cat foo.py; patch; cat foo.py` example: the second ``cat`` is looked up at the
     post-patch state node, where the pre-patch side entry does not live).

  Mislabelling a state-changing call as read-only breaks rule 1 and *does* serve stale results; when in
  doubt leave a call stateful (only reuse is lost). Step counts differ between histories sharing a node,
  which is why episode-level truncation must not be read from the cache.

Thread safety: every public method is safe to call from many threads; all trees sharing a `SnapshotPool`
share its lock. ``handle.release()`` is always called outside the lock.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from .errors import ClaimStateError, ForeignNodeError, MissExecutionError, SingleFlightTimeout
from .retention import (
    SnapshotDecision,
    SnapshotEntry,
    SnapshotHandle,
    SnapshotPolicy,
    SnapshotPool,
    release_all,
)

ReadonlyPredicate = Callable[[str], bool]


def _never_readonly(_: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class CachedStep:
    """What executing one call returned, as `gymnasium.Env.step` would (minus episode bookkeeping).

    (Not `bunshin_gym.adapter.StepResult`, the decoded executor answer: the env builds a `CachedStep` from
    what its ``step()`` returns, so a hit can return exactly that.)

    Attributes:
        observation: opaque (dict of arrays, bytes, ...); the cache never inspects it. Treat as immutable.
        reward: the call's reward.
        terminated: whether the task reached a terminal state with this call.
        truncated: env-internal truncation *caused by the workspace* (not TimeLimit; see module doc).
        info: extra data; stored as a read-only mapping. Copy it (``dict(result.info)``) before adding
            per-step keys such as timings or ``cache_hit``.
    """

    observation: Any
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.info, MappingProxyType):
            object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    def __reduce__(self):  # MappingProxyType does not pickle; store a dict
        return (CachedStep, (self.observation, self.reward, self.terminated, self.truncated, dict(self.info)))


class Executed(NamedTuple):
    """One call executed for the tree: its result, the seconds executing it took and the seconds replaying it
    costs (what `MissClaim.complete` records)."""

    step: CachedStep
    cost_s: float
    replay_s: float


class SideEntry:
    """A read-only call's cached result, living on the node of the state it ran in."""

    __slots__ = ("signature", "result", "cost_s", "hits", "key")

    def __init__(self, signature: str, result: CachedStep, cost_s: float, key: str):
        self.signature = signature
        self.result = result
        self.cost_s = cost_s
        self.hits = 0
        self.key = key

    def __repr__(self) -> str:
        return f"SideEntry({self.signature!r}, cost_s={self.cost_s:.3f}, hits={self.hits})"


def result_nbytes(obj: Any) -> int:
    """About how many bytes a recorded result holds: arrays by ``nbytes``, strings and bytes by length,
    containers by their items (the only look the cache takes inside an observation)."""
    n = getattr(obj, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(obj, CachedStep):
        return result_nbytes(obj.observation) + result_nbytes(obj.info)
    if isinstance(obj, (bytes, bytearray, str)):
        return len(obj)
    if isinstance(obj, Mapping):
        return sum(result_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(result_nbytes(v) for v in obj)
    return 64


class ResultLedger:
    """Bytes of the step results recorded in the trees that share it (one per `PrefixCache`), within a budget.

    Past ``budget_bytes`` the least recently used leaves are forgotten (a later lookup of one misses and
    executes again: only reuse is lost), and a node whose last child went becomes a leaf in turn, oldest
    first. Nodes holding a retained snapshot or an in-flight miss are kept. Every method runs under the
    trees' shared lock.
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.used = 0
        self.evicted = 0
        self._leaves: OrderedDict[Node, None] = OrderedDict()  # least recently used first

    def charge(self, node: Node, nbytes: int) -> None:
        node.nbytes += nbytes
        self.used += nbytes
        if node.parent is not None and not node.children:
            self._leaves[node] = None
            self._leaves.move_to_end(node)

    def touch(self, node: Node) -> None:
        if node in self._leaves:
            self._leaves.move_to_end(node)

    def gained_child(self, node: Node) -> None:
        self._leaves.pop(node, None)

    def lost_children(self, node: Node) -> None:
        if node.parent is not None and not node.children:
            self._leaves[node] = None
            self._leaves.move_to_end(node, last=False)

    def discharge(self, node: Node) -> None:
        self.used -= node.nbytes
        node.nbytes = 0
        self._leaves.pop(node, None)

    def clear(self) -> None:
        """Forget every node (the cache is closing): the leaf list must not keep the trees' results alive."""
        self._leaves.clear()
        self.used = 0

    def drop_tree(self, tree: PrefixTree) -> None:
        """Stop counting a tree that is being let go (e.g. replaced by another of the same task)."""
        nodes = list(tree.iter_nodes())
        with tree._lock:
            for node in nodes:
                self.discharge(node)

    def evict(self, keep: Node) -> None:
        """Forget least recently used leaves until within budget (or nothing more may go); `keep` (the node
        just recorded) stays."""
        if self.budget_bytes is None:
            return
        skipped: list[Node] = []
        while self.used > self.budget_bytes and self._leaves:
            node, _ = self._leaves.popitem(last=False)
            if node is keep or node.snapshot is not None or node.tree._is_flight_parent(node):
                skipped.append(node)
                continue
            node.tree._remove_leaf(node)
            self.evicted += 1
        for node in reversed(skipped):
            self._leaves[node] = None
            self._leaves.move_to_end(node, last=False)


def node_key(parent_key: str, signature: str) -> str:
    """Content key of the node reached from ``parent_key`` by ``signature`` (stable across processes)."""
    return hashlib.sha256(f"{parent_key}\n{signature}".encode()).hexdigest()


def root_key(task_id: str, initial_digest: str) -> str:
    return hashlib.sha256(f"bunshin-prefix-root\n{task_id}\n{initial_digest}".encode()).hexdigest()


class Node:
    """One workspace state: the root (initial state) or the state after a stateful call.

    Attributes (read them; mutate only through `PrefixTree`):
        signature: the stateful call on the edge from the parent (``None`` at the root).
        parent, depth: tree position; ``depth`` counts stateful calls from the initial state.
        children: ``signature -> Node`` for stateful calls recorded from this state.
        side: ``signature -> SideEntry`` for read-only calls recorded in this state.
        result: the `CachedStep` of ``signature`` (``None`` at the root unless set with `set_root_result`).
        cost_s: seconds executing ``signature`` took.
        replay_s: seconds replaying it costs (less than ``cost_s`` where a replay skips the observation).
        snapshot: the resident `SnapshotEntry` or ``None``; ``snapshot_handle`` is its handle.
        hits: lookups that ended here as a hit; ``visits = hits + 1`` (the recording run).
        key: a sha256 of the path (stable across processes; the store's node id).
    """

    __slots__ = ("signature", "parent", "depth", "children", "side", "result", "cost_s", "replay_s", "snapshot",
                 "hits", "key", "tree", "nbytes", "__weakref__")

    def __init__(self, tree: PrefixTree, parent: Node | None, signature: str | None, result: CachedStep | None,
                 cost_s: float, key: str, replay_s: float | None = None):
        self.tree = tree
        self.parent = parent
        self.signature = signature
        self.depth = 0 if parent is None else parent.depth + 1
        self.children: dict[str, Node] = {}
        self.side: dict[str, SideEntry] = {}
        self.result = result
        self.cost_s = cost_s
        self.replay_s = cost_s if replay_s is None else replay_s
        self.snapshot: SnapshotEntry | None = None
        self.hits = 0
        self.key = key
        self.nbytes = 0  # its result's and side entries' (ResultLedger)

    @property
    def visits(self) -> int:
        return self.hits + (0 if self.parent is None else 1)

    @property
    def snapshot_handle(self) -> SnapshotHandle | None:
        s = self.snapshot
        return None if s is None else s.handle

    def path(self) -> tuple[str, ...]:
        """Stateful signatures from the initial state to this node."""
        out: list[str] = []
        n: Node | None = self
        while n is not None and n.signature is not None:
            out.append(n.signature)
            n = n.parent
        return tuple(reversed(out))

    def __repr__(self) -> str:
        return (f"Node(depth={self.depth}, signature={self.signature!r}, children={len(self.children)}, "
                f"side={len(self.side)}, snapshot={self.snapshot is not None}, hits={self.hits})")


@dataclass(frozen=True, slots=True)
class Match:
    """Result of `PrefixTree.lookup` (longest-prefix match of a whole history).

    Attributes:
        node: the deepest state reached: the state after ``history[:depth]`` (read-only calls skipped).
        depth: how many leading history entries are matched; read-only entries before the last are always
            matched (they don't change state), the last one only if its side entry exists.
        hit: ``depth == len(history) > 0``: the full history is cached.
        result: on a hit, the cached `CachedStep` of ``history[-1]``; else ``None``.
        remaining: ``history[depth:]``, the calls to execute (from ``node``'s state) on a miss.
    """

    node: Node
    depth: int
    hit: bool
    result: CachedStep | None
    remaining: tuple[str, ...]


@dataclass(frozen=True)
class RestorePlan:
    """The cheapest way to bring a workspace to a node's state: start from ``ancestor``'s state, then replay
    ``calls`` (BunshinRL: replaying a few cheap calls often beats restoring a deeper snapshot).

    Attributes:
        source: ``"live"`` (go on from the live workspace, which holds ``ancestor``'s state), ``"standby"``
            (thaw a frozen clone already restored from ``ancestor``'s state), ``"snapshot"`` (restore
            ``ancestor``'s retained snapshot) or ``"initial"`` (restore the task's initial snapshot;
            ``ancestor`` is the root).
        ancestor: the node started from.
        handle: ``ancestor``'s retained snapshot handle (``None`` at the root); pinned inside `checkout`.
        calls: stateful signatures to replay after it, in order.
        est_s: estimated seconds: the start's cost + the recorded ``replay_s`` of the calls.
    """

    source: str
    ancestor: Node
    handle: SnapshotHandle | None
    calls: tuple[str, ...]
    est_s: float


@dataclass(frozen=True)
class TreeStats:
    nodes: int
    side_entries: int
    max_depth: int
    snapshots: int
    lookups: int
    hits: int
    records: int
    coalesced: int
    """Misses that waited on an identical in-flight execution instead of executing."""
    evicted: int = 0
    """Nodes forgotten to keep the results of all trees sharing its `ResultLedger` within budget."""


class _Flight:
    __slots__ = ("event", "node", "result", "error", "abandoned")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.node: Node | None = None
        self.result: CachedStep | None = None
        self.error: BaseException | None = None
        self.abandoned = False


class MissClaim:
    """Outcome of `PrefixTree.acquire_miss`.

    If ``leader`` is true this caller must execute the call and then call `complete` (or `fail`); use it as
    a context manager so an exception or an early exit fails the claim and wakes the waiters. If
    ``leader`` is false the call is already recorded (by another caller) and ``node``/``result`` are set.

    Attributes:
        leader: whether this caller executes.
        node: the state node after the call (the parent itself for a read-only call); set once done.
        result: the call's `CachedStep`; set once done.
        waited: a follower that blocked on the leader (for stats / info).
    """

    __slots__ = ("_tree", "_parent", "signature", "leader", "node", "result", "waited", "_flight", "_done")

    def __init__(self, tree: PrefixTree, parent: Node, signature: str, leader: bool, flight: _Flight | None,
                 node: Node | None = None, result: CachedStep | None = None, waited: bool = False):
        self._tree = tree
        self._parent = parent
        self.signature = signature
        self.leader = leader
        self._flight = flight
        self.node = node
        self.result = result
        self.waited = waited
        self._done = not leader

    def complete(self, result: CachedStep, cost_s: float, replay_s: float | None = None) -> Node:
        """Record the executed call's result (leader only) and hand it to every waiter (see `PrefixTree.record`
        for ``cost_s`` and ``replay_s``)."""
        if not self.leader:
            raise ClaimStateError(f"complete() on a non-leader claim for {self.signature!r}: only the caller "
                                  f"with claim.leader == True executes; followers read claim.result.")
        if self._done:
            raise ClaimStateError(f"claim for {self.signature!r} was already completed or failed")
        try:
            node = self._tree.record(self._parent, self.signature, result, cost_s, replay_s)
        except BaseException as e:
            self.fail(e)
            raise
        self.node = node
        self.result = self._tree._result_of(self._parent, self.signature, node)
        self._done = True
        self._tree._finish_flight(self._parent, self.signature, self._flight, node, self.result, None)
        return node

    def fail(self, error: BaseException) -> None:
        """Give up (leader only): nothing is recorded; waiters raise `MissExecutionError` from ``error``."""
        if not self.leader or self._done:
            return
        self._done = True
        self._tree._finish_flight(self._parent, self.signature, self._flight, None, None, error)

    def abandon(self) -> None:
        """Give up without a verdict on the call (leader only; e.g. a speculative run aborted mid-call): nothing
        is recorded and the waiters claim it again, one of them as the new leader."""
        if not self.leader or self._done:
            return
        self._done = True
        self._flight.abandoned = True
        self._tree._finish_flight(self._parent, self.signature, self._flight, None, None, None)

    def __enter__(self) -> MissClaim:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.leader and not self._done:
            self.fail(exc if exc is not None else ClaimStateError(
                f"the executing caller left the claim for {self.signature!r} without complete()"))


class PrefixTree:
    """Tool-call prefix tree of one ``(task_id, initial_digest)``; see the module docstring for semantics.

    Args:
        task_id: the task's id.
        initial_digest: digest of the initial state (task config + seed + env version): a hit requires
            the same initial state, so a different digest must get a different tree.
        readonly: predicate marking read-only signatures (default: none are). Must be pure and stable for
            the tree's lifetime (its answers are memoised).
        pool: the `SnapshotPool` holding this tree's snapshots (share one pool between the trees of a
            process to share a byte budget). Default: a private unbounded pool.
        policy: the selective-snapshot `SnapshotPolicy`. Default: `SnapshotPolicy()`.
        miss_timeout_s: default wait for `acquire_miss` followers (``None`` = forever).
        results: the `ResultLedger` bounding the bytes of recorded results (share one between the trees of a
            process, with the pool). Default: a private unbounded one.

    Example::

        m = tree.lookup(history)                     # history = every call so far, incl. the new one
        if m.hit:
            return m.result
        with tree.acquire_miss(m.node, m.remaining[0]) as claim:   # usually len(m.remaining) == 1
            if claim.leader:
                with tree.checkout(m.node) as plan:  # pins plan.handle while restoring from it
                    ws = restore(plan.handle) if plan.handle else restore_initial(); replay(ws, plan.calls)
                t0 = time.perf_counter(); res = ws.execute(sig); claim.complete(res, time.perf_counter() - t0)
                if tree.should_snapshot(claim.node).retain: tree.attach_snapshot(claim.node, ws.snapshot())
        return claim.result
    """

    def __init__(self, task_id: str, initial_digest: str, *, readonly: ReadonlyPredicate | None = None,
                 pool: SnapshotPool | None = None, policy: SnapshotPolicy | None = None,
                 miss_timeout_s: float | None = 600.0, results: ResultLedger | None = None):
        if not isinstance(task_id, str) or not isinstance(initial_digest, str):
            raise TypeError(f"task_id and initial_digest must be str, got {type(task_id).__name__} and "
                            f"{type(initial_digest).__name__}")
        self.task_id = task_id
        self.initial_digest = initial_digest
        self.key = root_key(task_id, initial_digest)
        self.pool = pool if pool is not None else SnapshotPool(None)
        self.policy = policy if policy is not None else SnapshotPolicy()
        self.miss_timeout_s = miss_timeout_s
        self.results = results if results is not None else ResultLedger()
        self._readonly_fn = readonly or _never_readonly
        self._ro_memo: dict[str, bool] = {}
        self._lock = self.pool.lock
        self._flights: dict[tuple[int, str], _Flight] = {}
        self.root = Node(self, None, None, None, 0.0, self.key)
        self._nodes = 1
        self._sides = 0
        self._max_depth = 0
        self._lookups = self._hits = self._records = self._coalesced = self._evicted = 0
        self._signature_costs: dict[str, tuple[float, int]] = {}  # signature -> (total s, executions)
        #: (signature, observation before the call) -> the kind of call as far as its cost goes, or None
        #: (`EnvAdapter.cost_class`); set by the env that creates the tree
        self.cost_class: Callable[[str, dict], str | None] | None = None
        self._class_costs: dict[str, tuple[float, int]] = {}  # cost class -> (total s, executions)
        #: stateful paths at and below which records made elsewhere (`Runtime.shared_records`) are not taken:
        #: replaying one here gave something else, so this machine executes those calls itself
        self.local_only: set[tuple[str, ...]] = set()

    # -- read-only annotation ------------------------------------------------------------------------
    def is_readonly(self, signature: str) -> bool:
        r = self._ro_memo.get(signature)
        if r is None:
            r = bool(self._readonly_fn(signature))
            if len(self._ro_memo) < 1_000_000:
                self._ro_memo[signature] = r
        return r

    # -- lookup ----------------------------------------------------------------------------------------
    def lookup(self, history: Sequence[str], *, count: bool = True) -> Match:
        """Longest-prefix match of the whole ``history`` (every call so far, including the one asked about).

        Args:
            history: canonical signatures, oldest first.
            count: update hit counters (set False for peeking, e.g. by the speculation driver).

        Returns:
            `Match`; ``match.hit`` iff every call of ``history`` is cached for this exact prefix.
        """
        is_ro = self.is_readonly
        with self._lock:
            node = self.root
            n = len(history)
            i = 0
            side: SideEntry | None = None
            while i < n:
                sig = history[i]
                if is_ro(sig):
                    if i == n - 1:
                        side = node.side.get(sig)
                        if side is None:
                            break
                    i += 1
                    continue
                child = node.children.get(sig)
                if child is None:
                    break
                node = child
                i += 1
            hit = n > 0 and i == n
            result = None
            if hit:
                if side is not None:
                    result = side.result
                    if count:
                        side.hits += 1
                else:
                    result = node.result
                    if count:
                        node.hits += 1
                if count:
                    self.results.touch(node)
            if count:
                self._lookups += 1
                self._hits += hit
            return Match(node, i, hit, result, tuple(history[i:]) if i < n else ())

    def child(self, node: Node, signature: str) -> tuple[Node, CachedStep] | None:
        """One-step lookup from a known state (an incremental cursor): ``(next_state, result)`` or None."""
        self._check_node(node)
        with self._lock:
            if self.is_readonly(signature):
                s = node.side.get(signature)
                return None if s is None else (node, s.result)
            c = node.children.get(signature)
            return None if c is None else (c, c.result)  # type: ignore[return-value]

    # -- record ---------------------------------------------------------------------------------------
    def record(self, parent: Node, signature: str, result: CachedStep, cost_s: float,
               replay_s: float | None = None) -> Node:
        """Record that executing ``signature`` in ``parent``'s state returned ``result`` after ``cost_s`` s;
        replaying it costs ``replay_s`` s (default ``cost_s``; less where a replay does not observe).

        Returns:
            the state node after the call: a new or existing child for a stateful call, ``parent`` itself
            for a read-only one (its result becomes ``parent.side[signature]``). Recording an already
            recorded call keeps the first result (the env is deterministic) and returns the existing node.
        """
        self._check_node(parent)
        if not isinstance(signature, str) or not signature:
            raise TypeError(f"signature must be a non-empty str (tool name + normalised args), got {signature!r}")
        if not isinstance(result, CachedStep):
            raise TypeError(f"result must be a bunshin_gym.cache.CachedStep, got {type(result).__name__}; "
                            f"wrap it: CachedStep(observation, reward, terminated, truncated, info)")
        cost_s = float(cost_s)
        replay_s = cost_s if replay_s is None else float(replay_s)
        for name, value in (("cost_s", cost_s), ("replay_s", replay_s)):
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")
        ro = self.is_readonly(signature)
        nbytes = result_nbytes(result)
        with self._lock:
            self._records += 1
            if ro:
                if signature not in parent.side:
                    parent.side[signature] = SideEntry(signature, result, cost_s, node_key(parent.key, "\x00side\x00" + signature))
                    self._sides += 1
                    self.results.charge(parent, nbytes)
                    self.results.evict(keep=parent)
                return parent
            child = parent.children.get(signature)
            if child is None:
                child = Node(self, parent, signature, result, cost_s, node_key(parent.key, signature), replay_s)
                parent.children[signature] = child
                self._nodes += 1
                self.results.gained_child(parent)
                self.results.charge(child, nbytes)
                total, n = self._signature_costs.get(signature, (0.0, 0))
                self._signature_costs[signature] = (total + cost_s, n + 1)
                cls = self._cost_class(signature, parent)
                if cls is not None:
                    total, n = self._class_costs.get(cls, (0.0, 0))
                    self._class_costs[cls] = (total + cost_s, n + 1)
                if child.depth > self._max_depth:
                    self._max_depth = child.depth
                self.results.evict(keep=child)
            return child

    def forget(self, node: Node) -> int:
        """Remove ``node`` and its subtree (their results and snapshots), e.g. when replaying its call no longer
        gives what was recorded; the next lookup through it misses and executes again. Returns the number of
        nodes removed. The root cannot be forgotten."""
        self._check_node(node)
        if node.parent is None:
            raise ValueError("forget(): the root is the task's initial state; make a new tree instead")
        released = self.pool.drop(node) if node.snapshot is not None else []
        with self._lock:
            if node.parent.children.get(node.signature) is not node:
                return 0  # forgotten already
            del node.parent.children[node.signature]
            self.results.lost_children(node.parent)
            removed, stack = 0, [node]
            while stack:
                n = stack.pop()
                removed += 1
                self._sides -= len(n.side)
                self.results.discharge(n)
                if n.snapshot is not None:  # left over if it was attached after the drop above
                    released += self.pool.drop(n, cascade=False)
                stack.extend(n.children.values())
            self._nodes -= removed
        release_all(released)
        return removed

    def _remove_leaf(self, node: Node) -> None:
        """Forget a leaf that holds no snapshot (`ResultLedger.evict`, under the lock)."""
        del node.parent.children[node.signature]
        self._nodes -= 1
        self._sides -= len(node.side)
        self._evicted += 1
        self.results.discharge(node)
        self.results.lost_children(node.parent)

    def _is_flight_parent(self, node: Node) -> bool:
        return any(parent_id == id(node) for parent_id, _ in self._flights)

    def record_path(self, calls: Sequence[tuple[str, CachedStep, float]], start: Node | None = None) -> Node:
        """Record a sequence of ``(signature, result, cost_s)`` from ``start`` (default: root)."""
        node = start or self.root
        for sig, res, cost in calls:
            node = self.record(node, sig, res, cost)
        return node

    def set_root_result(self, result: CachedStep) -> None:
        """Cache the reset observation of the initial state (optional)."""
        with self._lock:
            self.root.result = result

    # -- single flight ---------------------------------------------------------------------------------
    def acquire_miss(self, parent: Node, signature: str, timeout: float | None = ...) -> MissClaim:  # type: ignore[assignment]
        """Claim the execution of ``signature`` from ``parent``'s state; identical concurrent misses run once.

        The first caller gets ``claim.leader == True`` at once and must execute, then
        ``claim.complete(result, cost_s)`` (or ``claim.fail(exc)``; leaving a ``with`` block does that). Other
        callers for the same ``(parent, signature)`` block until then and get a non-leader claim with
        ``node``/``result`` set; after ``claim.abandon()`` they claim it again (one becomes the leader). If the
        call is already recorded, a non-leader claim returns immediately.

        Args:
            timeout: seconds a follower waits (default: the tree's ``miss_timeout_s``; None = forever).

        Raises:
            SingleFlightTimeout: a follower waited ``timeout`` s.
            MissExecutionError: the leader failed (its exception is the ``__cause__``); nothing was recorded.
        """
        self._check_node(parent)
        if timeout is ...:
            timeout = self.miss_timeout_s
        ro = self.is_readonly(signature)
        key = (id(parent), signature)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                done = parent.side.get(signature) if ro else parent.children.get(signature)
                if done is not None:
                    node = parent if ro else done
                    return MissClaim(self, parent, signature, False, None, node, done.result)
                flight = self._flights.get(key)
                if flight is None:
                    flight = _Flight()
                    self._flights[key] = flight
                    return MissClaim(self, parent, signature, True, flight)
                self._coalesced += 1
            if not flight.event.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                raise SingleFlightTimeout(signature, float(timeout))  # type: ignore[arg-type]
            if flight.abandoned:  # its leader gave up without running it to the end: claim it again
                continue
            if flight.error is not None:
                raise MissExecutionError(signature, flight.error) from flight.error
            return MissClaim(self, parent, signature, False, None, flight.node, flight.result, waited=True)

    def execute(self, parent: Node, signature: str, fn: Callable[[], tuple[CachedStep, float]],
                timeout: float | None = ...) -> MissClaim:  # type: ignore[assignment]
        """`acquire_miss` + run ``fn() -> (result, cost_s)`` if leader + `complete`. Returns the done claim."""
        claim = self.acquire_miss(parent, signature, timeout)
        if claim.leader:
            with claim:
                result, cost_s = fn()
                claim.complete(result, cost_s)
        return claim

    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)

    def is_in_flight(self, parent: Node, signature: str) -> bool:
        """Whether a leader is executing ``signature`` from ``parent``'s state now (see `acquire_miss`)."""
        with self._lock:
            return (id(parent), signature) in self._flights

    def _result_of(self, parent: Node, signature: str, node: Node) -> CachedStep:
        if node is parent and signature in parent.side:
            return parent.side[signature].result
        return node.result  # type: ignore[return-value]

    def _finish_flight(self, parent: Node, signature: str, flight: _Flight | None, node: Node | None,
                       result: CachedStep | None, error: BaseException | None) -> None:
        if flight is None:
            return
        with self._lock:
            flight.node, flight.result, flight.error = node, result, error
            if self._flights.get((id(parent), signature)) is flight:
                del self._flights[(id(parent), signature)]
        flight.event.set()

    # -- snapshots -------------------------------------------------------------------------------------
    def expected_cost_s(self, signature: str, default: float, at: Node | None = None) -> float:
        """Expected execution time of ``signature``: run in ``at``'s state, the mean of the calls of its cost
        class (`cost_class`) where two or more were recorded; else its mean in any state of this tree (a call
        not run yet here is likely to cost what it cost elsewhere); else ``default``."""
        cls = self._cost_class(signature, at) if at is not None else None
        with self._lock:
            total, n = self._class_costs.get(cls, (0.0, 0)) if cls is not None else (0.0, 0)
            if n < 2:
                total, n = self._signature_costs.get(signature, (0.0, 0))
        return total / n if n else default

    def _cost_class(self, signature: str, node: Node) -> str | None:
        result = node.result
        if self.cost_class is None or result is None:
            return None
        try:
            return self.cost_class(signature, result.observation)
        except Exception:  # noqa: BLE001 - an unparsable call has no class; its cost is still recorded
            return None

    def replay_cost_s(self, node: Node) -> float:
        """Seconds of calls to replay to materialise ``node`` from its nearest retained snapshot (or reset)."""
        self._check_node(node)
        with self._lock:
            return self._unretained_calls(node)[0]

    @staticmethod
    def _unretained_calls(node: Node) -> tuple[float, int]:
        """Seconds and number of the calls from the nearest retained snapshot (or reset) down to ``node``
        (the caller holds the lock)."""
        total, calls, n = 0.0, 0, node
        while n.parent is not None and n.snapshot is None:
            total, calls, n = total + n.replay_s, calls + 1, n.parent
        return total, calls

    def plan(self, node: Node, *, restore_s: float | None = None, initial_s: float | None = None,
             standby_s: float = 0.02, has_standby: Callable[[Node], bool] | None = None,
             live: Node | None = None) -> RestorePlan:
        """The one restore planner: cheapest of going on from the live workspace (at ``live``), thawing a
        standby clone (``has_standby(n)``), restoring a retained snapshot, or restoring the initial state, at
        ``node`` or an ancestor, each followed by replaying the recorded calls down to ``node``. Touches the
        chosen snapshot (LRU). Use `checkout` to act on the plan: it pins the snapshot so eviction cannot
        release it mid-restore.

        Args:
            live: the node whose state a live workspace holds (free to start from if it is an ancestor).
            restore_s: cost of restoring a retained snapshot (default: the policy's EWMA ``est_restore_s``).
            initial_s: cost of restoring the initial state (default: ``restore_s``).
            standby_s: cost of thawing a standby clone.
            has_standby: whether a frozen clone of a node's state is ready (the root: of the initial state).
        """
        self._check_node(node)
        mem_s = self.policy.est_restore_s if restore_s is None else restore_s
        initial = mem_s if initial_s is None else initial_s
        with self._lock:
            best: tuple[float, str, Node] | None = None

            def consider(cost: float, source: str, at: Node) -> None:
                nonlocal best
                if best is None or cost < best[0]:
                    best = (cost, source, at)

            replay = 0.0
            n: Node = node
            while True:
                if n is live:
                    consider(replay, "live", n)
                retained = n.snapshot is not None or n.parent is None
                if retained and has_standby is not None and has_standby(n):
                    consider(standby_s + replay, "standby", n)
                if n.snapshot is not None:
                    consider(mem_s + replay, "snapshot", n)
                if n.parent is None:
                    consider(initial + replay, "initial", n)
                    break
                replay += n.replay_s
                n = n.parent
                if best is not None and replay >= best[0]:
                    break  # any higher ancestor costs at least this much in replay alone
            assert best is not None
            est, source, anc = best
            if anc.snapshot is not None:
                self.pool.touch(anc.snapshot)
            calls: list[str] = []
            m = node
            while m is not anc:
                calls.append(m.signature)  # type: ignore[arg-type]
                m = m.parent  # type: ignore[assignment]
            calls.reverse()
            handle = anc.snapshot.handle if anc.snapshot is not None else None
            return RestorePlan(source, anc, handle, tuple(calls), est)

    @contextmanager
    def checkout(self, node: Node, **plan_kwargs: Any) -> Iterator[RestorePlan]:
        """`plan` with the ancestor's snapshot pinned (not evictable) for the ``with`` body."""
        with self._lock:
            plan = self.plan(node, **plan_kwargs)
            entry = plan.ancestor.snapshot
            if entry is not None:
                self.pool.pin(entry)
        try:
            yield plan
        finally:
            if entry is not None:
                release_all(self.pool.unpin(entry))

    def should_snapshot(self, node: Node, think_per_call_s: float = 0.0) -> SnapshotDecision:
        """Ask the `SnapshotPolicy` whether to snapshot ``node``'s state now (the caller has it live).
        ``think_per_call_s``: the policy's think time a background sync replays each call behind (0: none)."""
        self._check_node(node)
        budget = self.pool.budget_bytes
        with self._lock:
            if node.snapshot is not None:
                return SnapshotDecision(False, 0.0, 0.0, 0.0, 0.0, "already retained", possible=False)
            if budget is not None and self.policy.est_snapshot_bytes > budget:  # its dump would only be rejected
                why = f"a snapshot (~{self.policy.est_snapshot_bytes:.0f} bytes) exceeds the budget of {budget} bytes"
                return SnapshotDecision(False, 0.0, 0.0, 0.0, 0.0, why, possible=False)
            replay, calls = self._unretained_calls(node)
            hits = node.hits
        return self.policy.decide(replay, hits, hidden_s=think_per_call_s * calls)

    def attach_snapshot(self, node: Node, handle: SnapshotHandle, snapshot_s: float = 0.0) -> bool:
        """Retain ``handle`` as ``node``'s snapshot; the cache now owns it (see `snapshots` module doc).

        Returns:
            whether it is resident; if False it was already released (it did not fit the budget).
        """
        self._check_node(node)
        if not isinstance(handle, SnapshotHandle):
            raise TypeError(f"handle must have size_bytes and release() (SnapshotHandle), got {type(handle).__name__}")
        with self._lock:
            retained, released = self.pool.attach(node, handle, snapshot_s)
        if retained:
            self.policy.observe_size(int(handle.size_bytes))
            self.policy.observe_retained()
        self.policy.observe_timing(snapshot_s=snapshot_s)
        release_all(released)
        return retained

    def drop_snapshot(self, node: Node, *, cascade: bool = True) -> None:
        """Release ``node``'s snapshot (and, with ``cascade``, every snapshot depending on it)."""
        self._check_node(node)
        release_all(self.pool.drop(node, cascade=cascade))

    # -- introspection ---------------------------------------------------------------------------------
    def iter_nodes(self) -> Iterator[Node]:
        """Every node, parents before children (breadth-first). Snapshot of the structure under the lock."""
        with self._lock:
            out = [self.root]
            i = 0
            while i < len(out):
                out.extend(out[i].children.values())
                i += 1
        return iter(out)

    def __len__(self) -> int:
        return self._nodes

    def stats(self) -> TreeStats:
        with self._lock:
            snaps = sum(1 for e in self.pool.entries() if e.node.tree is self)
            return TreeStats(self._nodes, self._sides, self._max_depth, snaps, self._lookups, self._hits,
                             self._records, self._coalesced, self._evicted)

    def _check_node(self, node: Node) -> None:
        if not isinstance(node, Node):
            raise TypeError(f"expected a Node of this PrefixTree, got {type(node).__name__}")
        if node.tree is not self:
            raise ForeignNodeError(
                f"node {node!r} belongs to the tree of task {node.tree.task_id!r}, not {self.task_id!r}: "
                f"look the history up in the tree of the env's own (task_id, initial_digest).")

    def __repr__(self) -> str:
        return f"PrefixTree(task_id={self.task_id!r}, nodes={self._nodes}, side={self._sides})"
