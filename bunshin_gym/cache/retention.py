"""Retained workspace snapshots of the prefix cache: the handle protocol, the selective-snapshot policy
(TVCache §3.3) and the in-memory pool with its byte budget and ancestor-closed LRU (BunshinRL §3.2).

Owns: deciding *whether* a node's state is worth a snapshot, keeping handles within a byte budget, and
calling ``release()`` on every handle it drops. Does not own: taking, restoring or forking snapshots
(forkcore does that; here a snapshot is an opaque `SnapshotHandle`), nor the on-disk store (`store.py`).

Ownership rule: a handle passed to `PrefixTree.attach_snapshot` belongs to the cache from then on. The
cache calls ``handle.release()`` exactly once: when the handle is evicted, dropped, rejected because it
cannot fit the budget, or when the pool is closed. Callers must not release it themselves; a caller that
forks from a handle holds a *pin* (`PrefixTree.checkout`) so the handle is not released mid-fork.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from .tree import Node

log = logging.getLogger(__name__)

GIB = 1 << 30


@runtime_checkable
class SnapshotHandle(Protocol):
    """What the cache needs of a snapshot. forkcore's snapshot objects satisfy it (or a thin adapter does).

    Attributes:
        size_bytes: memory the snapshot keeps resident while retained (its private pages/delta, not
            pages it shares with its parent snapshot). Read once, when the handle is attached.
    """

    @property
    def size_bytes(self) -> int: ...

    def release(self) -> None:
        """Free the snapshot. Called exactly once by the cache; must be idempotent-safe and not block long."""
        ...


# --------------------------------------------------------------------------------------------------
# Selective snapshot policy
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotPolicyConfig:
    """Knobs of the selective-snapshot rule (see `SnapshotPolicy`). Times are seconds of wall time."""

    snapshot_s: float = 0.6
    """Prior for the time one snapshot takes (CRIU dump of Chromium+Xvfb: ~0.55 s idle, 2+ s on a loaded
    2-core machine); replaced by the first observed snapshot time (`observe_timing`; a task's initial snapshot
    counts, `observe_initial`), then an EWMA of them."""
    restore_s: float = 0.5
    """Prior for the time to fork/restore a workspace from a retained snapshot; replaced by the first observed
    restore time, then an EWMA of them."""
    bytes_cost_s_per_gib: float = 2.0
    """Price of keeping 1 GiB of snapshot resident, in seconds of saved execution it must buy back."""
    est_snapshot_bytes: int = 64 << 20
    """Prior for a snapshot's size before any was observed; replaced by the first observed size (a task's
    initial snapshot counts), then an EWMA of attached sizes."""
    size_ewma_alpha: float = 0.2
    """Weight of the newest observation in the EWMAs of size, snapshot and restore time (0 < alpha <= 1)."""
    prior_visits: float = 1.0
    """Expected future materialisations through a node never visited again yet (e.g. G-1 for a GRPO
    group of G rollouts that share a prefix; 1.0 = "one more rollout will come this way")."""
    reuse_factor: float = 1.0
    """Expected future visits per observed past visit (past hits predict future hits, TVCache-style)."""
    min_replay_s: float = 0.0
    """Never snapshot when the re-execution cost it would save is below this (cheap prefixes replay)."""
    use_prior: float | None = 2.0
    """Pseudo-count behind the observed use of retained snapshots: ``prior_visits`` is scaled by
    ``min(1, (restores from retained snapshots + use_prior) / (snapshots retained + use_prior))``. Where live
    workspaces already hold the states rollouts come back to (background sync after hits, speculation), few
    retained snapshots are ever restored, and dumping more of them only costs time and memory. ``None``: no
    scaling (every never-hit node expects ``prior_visits``)."""
    retain_all: bool = False
    """Retain every executed state, whatever it costs (DeltaBox-style checkpoint per step; rollback studies,
    tests). The byte budget still applies."""


def validate_policy_config(cfg: SnapshotPolicyConfig) -> None:
    """Raise ValueError naming the first invalid knob of ``cfg``."""
    checks = [
        ("snapshot_s", cfg.snapshot_s >= 0 and math.isfinite(cfg.snapshot_s), "a finite number >= 0"),
        ("restore_s", cfg.restore_s >= 0 and math.isfinite(cfg.restore_s), "a finite number >= 0"),
        ("bytes_cost_s_per_gib", cfg.bytes_cost_s_per_gib >= 0, "a number >= 0"),
        ("est_snapshot_bytes", cfg.est_snapshot_bytes >= 0, "an integer >= 0"),
        ("size_ewma_alpha", 0 < cfg.size_ewma_alpha <= 1, "in (0, 1]"),
        ("prior_visits", cfg.prior_visits >= 0, "a number >= 0"),
        ("reuse_factor", cfg.reuse_factor >= 0, "a number >= 0"),
        ("min_replay_s", cfg.min_replay_s >= 0, "a number >= 0"),
        ("use_prior", cfg.use_prior is None or cfg.use_prior > 0, "a number > 0 or None"),
    ]
    for name, ok, expected in checks:
        if not ok:
            raise ValueError(f"SnapshotPolicyConfig.{name}={getattr(cfg, name)!r} is invalid: expected {expected}.")


@dataclass(frozen=True)
class SnapshotDecision:
    """Why the policy did or did not ask for a snapshot at a node (all times in seconds)."""

    retain: bool
    replay_s: float
    """Re-execution cost a snapshot here saves per materialisation: sum of ``replay_s`` of the calls since
    the nearest retained ancestor snapshot (inclusive of this node's call), minus ``restore_s``; of each, only
    what exceeds the part hidden behind the policy's think time (``decide(hidden_s=...)``)."""
    expected_visits: float
    """Estimated future materialisations of this node or its subtree."""
    benefit_s: float
    """``expected_visits * replay_s``."""
    cost_s: float
    """``snapshot_s + est_bytes / GiB * bytes_cost_s_per_gib``."""
    reason: str
    possible: bool = True
    """Whether a snapshot here could be retained at all (False: it already is, or it cannot fit the budget)."""


class SnapshotPolicy:
    """TVCache's selective snapshotting, extended with BunshinRL's sparse snapshots + replay.

    At a node ``n`` whose state is live in some workspace (just executed or replayed), retain a snapshot iff

        expected_visits(n) * (replay_s(n) - restore_s)  >  snapshot_s + est_bytes/GiB * bytes_cost_s_per_gib

    where ``snapshot_s``/``restore_s`` are running estimates of measured times (priors from the config) and
    ``replay_s(n)`` is the summed replay cost (`Node.replay_s`) of the calls from the nearest retained ancestor
    snapshot down to ``n`` (what a future materialisation of ``n`` would replay without a snapshot here),
    and ``expected_visits(n) = prior_visits * use_rate + reuse_factor * n.hits`` (past hits predict future
    ones; ``use_rate`` is how often retained snapshots were actually restored, see ``use_prior``). Where a
    background sync follows cache hits, a future visitor replays (or restores) behind its think time, one
    think per call: `PrefixTree.should_snapshot` then counts only the part of replay and restore that
    exceeds it (``decide(hidden_s=...)``).
    With ``prior_visits=1, reuse_factor=0`` and a parent snapshot this is exactly TVCache's rule
    "snapshot iff the call costs more than snapshotting". ``est_bytes`` is an EWMA of attached sizes.
    """

    def __init__(self, config: SnapshotPolicyConfig | None = None):
        self.config = config or SnapshotPolicyConfig()
        validate_policy_config(self.config)
        self._est_bytes = float(self.config.est_snapshot_bytes)
        self._snapshot_s = float(self.config.snapshot_s)
        self._restore_s = float(self.config.restore_s)
        self._think_s = 0.0
        self._retained = self._restored = 0
        self._observed: set[str] = set()  # estimates a measurement has replaced the config's prior of
        self._lock = threading.Lock()

    @property
    def est_snapshot_bytes(self) -> float:
        return self._est_bytes

    @property
    def est_restore_s(self) -> float:
        """Running estimate of one restore from a retained snapshot (seconds)."""
        return self._restore_s

    def _fold(self, name: str, value: float) -> None:
        """EWMA of `value` into estimate `name`; the first measurement replaces the prior (caller holds the lock)."""
        a = self.config.size_ewma_alpha if name in self._observed else 1.0
        self._observed.add(name)
        setattr(self, name, (1 - a) * getattr(self, name) + a * float(value))

    def observe_size(self, size_bytes: int) -> None:
        """Fold an attached snapshot's size into the size estimate."""
        with self._lock:
            self._fold("_est_bytes", size_bytes)

    def observe_timing(self, *, snapshot_s: float | None = None, restore_s: float | None = None) -> None:
        """Fold a measured snapshot or restore time into the estimates the rule uses (same EWMA weight as sizes:
        what these cost depends on the machine and its load, which the priors cannot know)."""
        with self._lock:
            if snapshot_s is not None and snapshot_s > 0:
                self._fold("_snapshot_s", snapshot_s)
            if restore_s is not None and restore_s > 0:
                self._fold("_restore_s", restore_s)

    def observe_initial(self, size_bytes: int, snapshot_s: float) -> None:
        """A task's initial snapshot: a dump of the same workspace the rule will weigh dumping, so a better
        guess of size and dump time than the config's priors before any retained snapshot was measured
        (a browser workspace's dump is ~450 MB here, not the 64 MB prior)."""
        self.observe_size(size_bytes)
        self.observe_timing(snapshot_s=snapshot_s)

    def observe_retained(self) -> None:
        """A snapshot was retained (resident in the pool)."""
        with self._lock:
            self._retained += 1

    def observe_restored(self) -> None:
        """A workspace was restored (or a standby clone thawed) from a retained snapshot."""
        with self._lock:
            self._restored += 1

    @property
    def use_rate(self) -> float:
        """Restores per retained snapshot so far, pulled towards 1 by ``use_prior``, at most 1."""
        prior = self.config.use_prior
        if prior is None:
            return 1.0
        with self._lock:
            return min(1.0, (self._restored + prior) / (self._retained + prior))

    def observe_think(self, think_s: float) -> None:
        """Fold the time the policy took between two steps into the think-time estimate (`est_think_s`)."""
        if think_s >= 0:
            with self._lock:
                self._fold("_think_s", think_s)

    @property
    def est_think_s(self) -> float:
        """Running estimate of the policy's time between two steps (0 until one was observed)."""
        return self._think_s

    def decide(self, replay_s: float, hits: int, hidden_s: float = 0.0) -> SnapshotDecision:
        """Apply the rule to a node with re-execution cost ``replay_s`` and ``hits`` past hits. ``hidden_s``:
        how much of a future materialisation runs behind the policy's think time anyway (a background sync
        replays each hit's call while the policy thinks about the next), so neither replay nor restore costs
        that much of it on the critical path."""
        c = self.config
        saved = max(0.0, replay_s - hidden_s) - max(0.0, self._restore_s - hidden_s)
        visits = c.prior_visits * self.use_rate + c.reuse_factor * hits
        benefit = visits * max(0.0, saved)
        cost = self._snapshot_s + self._est_bytes / GIB * c.bytes_cost_s_per_gib
        if c.retain_all:
            return SnapshotDecision(True, saved, visits, benefit, cost, "retain_all")
        if replay_s < c.min_replay_s:
            return SnapshotDecision(False, saved, visits, benefit, cost, f"replay {replay_s:.3f}s < min_replay_s")
        retain = benefit > cost
        why = f"benefit {benefit:.3f}s {'>' if retain else '<='} cost {cost:.3f}s"
        return SnapshotDecision(retain, saved, visits, benefit, cost, why)


# --------------------------------------------------------------------------------------------------
# In-memory pool: byte budget + ancestor-closed LRU
# --------------------------------------------------------------------------------------------------


class SnapshotEntry:
    """A retained snapshot at one node. Mutable bookkeeping; read it, don't write it."""

    __slots__ = ("node", "handle", "size_bytes", "snapshot_s", "pins", "dependents")

    def __init__(self, node: Node, handle: SnapshotHandle, size_bytes: int, snapshot_s: float):
        self.node = node
        self.handle = handle
        self.size_bytes = size_bytes
        self.snapshot_s = snapshot_s
        self.pins = 0
        """Callers currently forking from this snapshot (`PrefixTree.checkout`); pinned = not evictable."""
        self.dependents = 0
        """Resident snapshots whose *snapshot parent* is this one (see `SnapshotPool`)."""

    def __repr__(self) -> str:
        return (f"SnapshotEntry(depth={self.node.depth}, size_bytes={self.size_bytes}, pins={self.pins}, "
                f"dependents={self.dependents})")


@dataclass(frozen=True)
class PoolStats:
    resident: int
    resident_bytes: int
    budget_bytes: int | None
    attached: int
    evicted: int
    rejected: int
    dropped: int


class SnapshotPool:
    """Resident snapshots of one or more `PrefixTree`s under one byte budget (ancestor-closed LRU).

    Definitions (precise):
      * The *snapshot parent* of a resident snapshot at node ``n`` is the resident snapshot at the nearest
        proper ancestor of ``n`` that has one (none if no ancestor has one). Snapshot parents form a
        forest over the resident snapshots. A snapshot *depends on* its snapshot parent: BunshinRL stores a
        child snapshot as a delta over its parent (and a memory-sharing fork maps the parent's pages), so
        the child is only usable while its parent is resident.
      * Invariant (ancestor-closed, when ``ancestor_closed=True``): every resident snapshot's snapshot
        parent at the time it was attached is still resident. Equivalently, a snapshot is evictable only
        when ``dependents == 0`` (no resident snapshot has it as snapshot parent) and ``pins == 0``.
      * Recency: touching a snapshot (attach, `PrefixTree.plan`/`checkout`) moves it *and all its resident
        snapshot ancestors* to the most-recent end, so ancestors are never older than their descendants.
      * Eviction: while ``resident_bytes > budget_bytes``, evict the least-recently-used evictable
        snapshot. Evicting a leaf can make its parent evictable, so whole cold branches drain leaf-first.
        Pinned snapshots and snapshots with dependents are skipped, so the budget can be exceeded
        temporarily only if everything resident is pinned or depended on; a *new* snapshot that cannot fit
        is rejected (released at once) instead.
      * Attaching at ``n`` when resident snapshots exist below ``n``: those whose snapshot parent was above
        ``n`` now have ``n`` as their snapshot parent (conservative: ``n`` is protected while they live).

    With ``ancestor_closed=False`` (handles are self-contained full snapshots), ``dependents`` is ignored
    for eviction. The pool's ``lock`` is shared by the trees that use it, so eviction never races a lookup.
    """

    def __init__(self, budget_bytes: int | None = None, *, ancestor_closed: bool = True):
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0 or None (unbounded), got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.ancestor_closed = ancestor_closed
        self.lock = threading.RLock()
        self._lru: OrderedDict[int, SnapshotEntry] = OrderedDict()  # id(entry) -> entry, oldest first
        self._bytes = 0
        self._attached = self._evicted = self._rejected = self._dropped = 0
        self._closed = False

    # -- queries -------------------------------------------------------------------------------------
    @property
    def resident_bytes(self) -> int:
        return self._bytes

    def stats(self) -> PoolStats:
        with self.lock:
            return PoolStats(len(self._lru), self._bytes, self.budget_bytes, self._attached, self._evicted,
                             self._rejected, self._dropped)

    def entries(self) -> list[SnapshotEntry]:
        """Resident entries, least recently used first."""
        with self.lock:
            return list(self._lru.values())

    # -- helpers (caller holds self.lock) ------------------------------------------------------------
    @staticmethod
    def _snapshot_parent(node: Node) -> SnapshotEntry | None:
        p = node.parent
        while p is not None:
            if p.snapshot is not None:
                return p.snapshot
            p = p.parent
        return None

    @staticmethod
    def _resident_below(node: Node) -> list[SnapshotEntry]:
        """Resident snapshots in ``node``'s subtree whose nearest resident ancestor is above ``node``."""
        out: list[SnapshotEntry] = []
        stack = list(node.children.values())
        while stack:
            n = stack.pop()
            if n.snapshot is not None:
                out.append(n.snapshot)
            else:
                stack.extend(n.children.values())
        return out

    def _touch_locked(self, entry: SnapshotEntry) -> None:
        chain = [entry]
        p = self._snapshot_parent(entry.node) if self.ancestor_closed else None
        while p is not None:
            chain.append(p)
            p = self._snapshot_parent(p.node)
        for e in chain:  # descendant first, so the root-most ancestor ends up most recent
            self._lru.move_to_end(id(e))

    def _detach_locked(self, entry: SnapshotEntry) -> None:
        parent = self._snapshot_parent(entry.node)
        below = self._resident_below(entry.node) if entry.dependents else []
        del self._lru[id(entry)]
        self._bytes -= entry.size_bytes
        entry.node.snapshot = None
        if parent is not None:
            parent.dependents -= 1
            parent.dependents += len(below)  # re-parent (only happens when not ancestor_closed / cascade)

    def _evictable(self, e: SnapshotEntry) -> bool:
        return e.pins == 0 and (e.dependents == 0 or not self.ancestor_closed)

    def _shrink_locked(self, need: int, released: list[SnapshotHandle]) -> bool:
        """Evict LRU-evictable entries until ``need`` more bytes fit. Returns whether they fit."""
        if self.budget_bytes is None:
            return True
        while self._bytes + need > self.budget_bytes:
            victim = next((e for e in self._lru.values() if self._evictable(e)), None)
            if victim is None:
                return False
            self._detach_locked(victim)
            self._evicted += 1
            released.append(victim.handle)
        return True

    # -- operations ----------------------------------------------------------------------------------
    def attach(self, node: Node, handle: SnapshotHandle, snapshot_s: float = 0.0) -> tuple[bool, list[SnapshotHandle]]:
        """Make ``handle`` the resident snapshot of ``node`` (caller holds ``lock``).

        Returns ``(retained, handles_to_release)``; the caller releases them *after* dropping the lock.
        ``handle`` itself is in the list when it was rejected (too big for the budget).
        """
        if self._closed:
            return False, [handle]
        size = int(handle.size_bytes)
        if size < 0:
            raise ValueError(f"SnapshotHandle.size_bytes must be >= 0, got {size} from {handle!r}")
        released: list[SnapshotHandle] = []
        if node.snapshot is not None:  # replace: the new handle supersedes the old one at this node
            old = node.snapshot
            if old.pins:
                return False, [handle]  # someone is forking from the old one; keep it
            old_handle = old.handle
            dependents = old.dependents
            del self._lru[id(old)]
            self._bytes -= old.size_bytes
            entry = SnapshotEntry(node, handle, size, snapshot_s)
            entry.dependents = dependents
            node.snapshot = entry
            self._lru[id(entry)] = entry
            self._bytes += size
            released.append(old_handle)
            self._shrink_locked(0, released)
            if node.snapshot is not entry:  # evicted itself: the budget is taken by pinned/depended ones
                return False, released
        else:
            if self.budget_bytes is not None and size > self.budget_bytes:
                self._rejected += 1
                return False, [handle]
            # Protect the would-be snapshot parent chain from being evicted to make room for this one.
            parent = self._snapshot_parent(node)
            if parent is not None:
                parent.pins += 1
            try:
                fits = self._shrink_locked(size, released)
            finally:
                if parent is not None:
                    parent.pins -= 1
            if not fits:
                self._rejected += 1
                released.append(handle)
                return False, released
            entry = SnapshotEntry(node, handle, size, snapshot_s)
            below = self._resident_below(node)
            parent = self._snapshot_parent(node)
            if parent is not None:
                parent.dependents += 1 - len(below)
            entry.dependents = len(below)
            node.snapshot = entry
            self._lru[id(entry)] = entry
            self._bytes += size
        self._attached += 1
        self._touch_locked(entry)
        return True, released

    def touch(self, entry: SnapshotEntry) -> None:
        with self.lock:
            if id(entry) in self._lru:
                self._touch_locked(entry)

    def pin(self, entry: SnapshotEntry) -> None:
        with self.lock:
            entry.pins += 1
            self._touch_locked(entry)

    def unpin(self, entry: SnapshotEntry) -> list[SnapshotHandle]:
        """Drop a pin; may evict (the budget could have been exceeded while everything was pinned)."""
        released: list[SnapshotHandle] = []
        with self.lock:
            if entry.pins <= 0:
                raise RuntimeError(f"unpin of {entry!r} which is not pinned")
            entry.pins -= 1
            self._shrink_locked(0, released)
        return released

    def drop(self, node: Node, *, cascade: bool = True) -> list[SnapshotHandle]:
        """Remove ``node``'s snapshot (e.g. forkcore reports it unusable). With ``cascade`` (the default
        under ancestor closure) every resident snapshot that depends on it, transitively, goes too."""
        released: list[SnapshotHandle] = []
        with self.lock:
            if node.snapshot is None:
                return released
            victims = [node.snapshot]
            if cascade and self.ancestor_closed:
                stack = list(node.children.values())
                while stack:
                    n = stack.pop()
                    if n.snapshot is not None:
                        victims.append(n.snapshot)
                    stack.extend(n.children.values())
            for e in reversed(victims):  # deepest first keeps the dependents counts exact
                if e.node.snapshot is e:
                    self._detach_locked(e)
                    self._dropped += 1
                    released.append(e.handle)
        return released

    def shrink_to(self, budget_bytes: int | None) -> list[SnapshotHandle]:
        """Change the budget and evict down to it."""
        released: list[SnapshotHandle] = []
        with self.lock:
            self.budget_bytes = budget_bytes
            self._shrink_locked(0, released)
        return released

    def close(self) -> None:
        """Release every resident snapshot (pinned ones too: call only when no fork is in progress)."""
        with self.lock:
            entries = list(self._lru.values())
            for e in entries:
                e.node.snapshot = None
            self._lru.clear()
            self._bytes = 0
            self._closed = True
        release_all([e.handle for e in entries])


def release_all(handles: list[SnapshotHandle]) -> None:
    """Call ``release()`` on each handle; an exception from one is logged and does not stop the others."""
    for h in handles:
        try:
            h.release()
        except Exception:  # noqa: BLE001 - a failing release must not break the cache
            log.exception("SnapshotHandle.release() failed for %r; continuing", h)
