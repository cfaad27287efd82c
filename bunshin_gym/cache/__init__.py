"""Tool-prefix cache of Bunshin Gym: prefix tree with longest-prefix lookup, read-only annotation and
single-flight misses; selective snapshots in a byte-budgeted ancestor-closed LRU pool; a persistent,
crash-safe on-disk store. Knows no concrete env and nothing of forkcore: snapshots are `SnapshotHandle`s.
"""

from .errors import (
    CacheError,
    ClaimStateError,
    CorruptEntryError,
    ForeignNodeError,
    MissExecutionError,
    SingleFlightTimeout,
    StoreError,
    StoreFormatError,
    StoreLockTimeout,
)
from .prefix_cache import CacheConfig, PrefixCache, validate_cache_config
from .retention import (
    PoolStats,
    SnapshotDecision,
    SnapshotEntry,
    SnapshotHandle,
    SnapshotPolicy,
    SnapshotPolicyConfig,
    SnapshotPool,
    validate_policy_config,
)
from .store import CacheStore, LoadReport, StoreConfig, validate_store_config
from .tree import CachedStep, Executed, Match, MissClaim, Node, PrefixTree, RestorePlan, SideEntry, TreeStats

__all__ = [
    "CacheConfig",
    "CacheError",
    "CacheStore",
    "CachedStep",
    "ClaimStateError",
    "CorruptEntryError",
    "Executed",
    "ForeignNodeError",
    "LoadReport",
    "Match",
    "MissClaim",
    "MissExecutionError",
    "Node",
    "PoolStats",
    "PrefixCache",
    "PrefixTree",
    "SideEntry",
    "SingleFlightTimeout",
    "SnapshotDecision",
    "SnapshotEntry",
    "SnapshotHandle",
    "RestorePlan",
    "SnapshotPolicy",
    "SnapshotPolicyConfig",
    "SnapshotPool",
    "StoreConfig",
    "StoreError",
    "StoreFormatError",
    "StoreLockTimeout",
    "TreeStats",
    "validate_cache_config",
    "validate_policy_config",
    "validate_store_config",
]
