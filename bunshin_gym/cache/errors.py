"""Typed errors of the prefix cache (`bunshin_gym.cache`). Every message says what failed, what was
expected, what was found, and what to do about it."""

from __future__ import annotations


class CacheError(Exception):
    """Base class of every error `bunshin_gym.cache` raises."""


class ForeignNodeError(CacheError, ValueError):
    """A node of one `PrefixTree` was passed to another tree (or a node was detached)."""


class SingleFlightTimeout(CacheError, TimeoutError):
    """A waiter on an identical in-flight miss gave up before the executing caller finished."""

    def __init__(self, signature: str, timeout_s: float):
        super().__init__(
            f"waited {timeout_s:.3f}s for the in-flight execution of {signature!r} (another env of the same "
            f"task is executing the identical call from the identical state) and it has not finished. "
            f"Raise CacheConfig.miss_timeout_s / pass a larger timeout= to acquire_miss, or check that the "
            f"executing env is not stuck."
        )
        self.signature = signature
        self.timeout_s = timeout_s


class MissExecutionError(CacheError):
    """The caller that executed an identical in-flight miss failed; nothing was recorded.

    The leader's exception is chained as ``__cause__`` (and kept at ``.leader_error``)."""

    def __init__(self, signature: str, leader_error: BaseException):
        super().__init__(
            f"the concurrent execution of {signature!r} that this call waited on failed with "
            f"{type(leader_error).__name__}: {leader_error}. Nothing was cached; retry the call "
            f"(acquire_miss again makes this caller the executor)."
        )
        self.signature = signature
        self.leader_error = leader_error


class ClaimStateError(CacheError, RuntimeError):
    """A `MissClaim` was used against its contract (completed twice, completed by a waiter, ...)."""


class StoreError(CacheError):
    """The on-disk cache store failed an operation (I/O, locking, format)."""


class StoreFormatError(StoreError):
    """The directory is not a Bunshin cache store of a version this code reads."""


class StoreLockTimeout(StoreError, TimeoutError):
    """Another process held the store's writer lock longer than the timeout."""


class CorruptEntryError(StoreError):
    """A stored blob or record failed its hash check (or is missing). It is dropped, never served."""
