"""The process-wide prefix cache: one `PrefixTree` per ``(task_id, initial_digest)``, all sharing one
`SnapshotPool` (one in-memory snapshot byte budget) and one `SnapshotPolicy`.

Owns: creating/finding trees and the shared configuration. Does not own: persistence (`store.py`; use
`CacheStore.load_tree` / `save_tree`, then `PrefixCache.adopt`), or anything env-specific.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .retention import SnapshotPolicy, SnapshotPolicyConfig, SnapshotPool
from .tree import PrefixTree, ResultLedger


@dataclass(frozen=True)
class CacheConfig:
    """Configuration of a `PrefixCache`."""

    snapshot_budget_bytes: int | None = 8 << 30
    """In-memory bytes all retained snapshots may keep resident (``None``: unbounded)."""
    result_budget_bytes: int | None = 4 << 30
    """In-memory bytes the recorded step results (observations: screenshots, pages) of all trees may hold;
    past it the least recently used leaves are forgotten (``None``: unbounded)."""
    ancestor_closed: bool = True
    """Keep a snapshot's ancestors resident while it is (snapshots are deltas over their parents)."""
    policy: SnapshotPolicyConfig = field(default_factory=SnapshotPolicyConfig)
    """Selective-snapshot knobs."""
    miss_timeout_s: float | None = 600.0
    """How long an env waits on an identical in-flight miss before `SingleFlightTimeout`."""


def validate_cache_config(cfg: CacheConfig) -> None:
    """Raise ValueError naming the first invalid field of ``cfg``."""
    if cfg.snapshot_budget_bytes is not None and cfg.snapshot_budget_bytes < 0:
        raise ValueError(f"CacheConfig.snapshot_budget_bytes={cfg.snapshot_budget_bytes} is invalid: "
                         f"expected bytes >= 0 or None for unbounded")
    if cfg.result_budget_bytes is not None and cfg.result_budget_bytes < 0:
        raise ValueError(f"CacheConfig.result_budget_bytes={cfg.result_budget_bytes} is invalid: "
                         f"expected bytes >= 0 or None for unbounded")
    if cfg.miss_timeout_s is not None and not cfg.miss_timeout_s > 0:
        raise ValueError(f"CacheConfig.miss_timeout_s={cfg.miss_timeout_s} is invalid: expected seconds > 0 or None")


class PrefixCache:
    """Trees of all tasks in this process. Thread-safe.

    Args:
        config: `CacheConfig`.
        readonly: default read-only predicate for new trees (the env's stateless-action annotation).
    """

    def __init__(self, config: CacheConfig | None = None, *, readonly: Callable[[str], bool] | None = None):
        self.config = config or CacheConfig()
        validate_cache_config(self.config)
        self.pool = SnapshotPool(self.config.snapshot_budget_bytes, ancestor_closed=self.config.ancestor_closed)
        self.policy = SnapshotPolicy(self.config.policy)
        self.results = ResultLedger(self.config.result_budget_bytes)
        self._readonly = readonly
        self._trees: dict[tuple[str, str], PrefixTree] = {}
        self._lock = threading.Lock()

    def tree(self, task_id: str, initial_digest: str, *, readonly: Callable[[str], bool] | None = None) -> PrefixTree:
        """The tree of ``(task_id, initial_digest)``, created empty on first use."""
        key = (task_id, initial_digest)
        with self._lock:
            t = self._trees.get(key)
            if t is None:
                t = PrefixTree(task_id, initial_digest, readonly=readonly or self._readonly, pool=self.pool,
                               policy=self.policy, miss_timeout_s=self.config.miss_timeout_s, results=self.results)
                self._trees[key] = t
            return t

    def new_tree(self, task_id: str, initial_digest: str, *, readonly: Callable[[str], bool] | None = None) -> PrefixTree:
        """A detached tree wired to this cache's pool and policy (e.g. for `CacheStore.load_tree`), not registered."""
        return PrefixTree(task_id, initial_digest, readonly=readonly or self._readonly, pool=self.pool,
                          policy=self.policy, miss_timeout_s=self.config.miss_timeout_s, results=self.results)

    def adopt(self, tree: PrefixTree) -> PrefixTree:
        """Register a tree built elsewhere (e.g. loaded from disk); it must use this cache's pool."""
        if tree.pool is not self.pool or tree.results is not self.results:
            raise ValueError("adopt(): the tree uses another SnapshotPool or ResultLedger; build it with "
                             "PrefixCache.new_tree or pass tree_factory=cache.new_tree to CacheStore.load_tree")
        with self._lock:
            old = self._trees.get((tree.task_id, tree.initial_digest))
            self._trees[(tree.task_id, tree.initial_digest)] = tree
        if old is not None and old is not tree:
            self.results.drop_tree(old)
        return tree

    def discard(self, tree: PrefixTree) -> None:
        """Let go of a tree made with `new_tree` and not adopted (its results no longer count)."""
        self.results.drop_tree(tree)

    def trees(self) -> list[PrefixTree]:
        with self._lock:
            return list(self._trees.values())

    def close(self) -> None:
        """Release every retained snapshot and forget every tree and the results they recorded."""
        self.pool.close()
        with self._lock:
            self._trees.clear()
            self.results.clear()
