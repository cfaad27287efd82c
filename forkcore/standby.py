"""Fast rollback (DeltaBox): frozen standby clones of a snapshot; rolling back = thawing one.

Restoring a clone takes a CRIU restore (0.1–1 s); thawing a frozen one takes milliseconds. A pool keeps
`size` clones restored and frozen (cgroup freezer: they use memory but no CPU) and refills after a take.
"""
from __future__ import annotations

import logging
import threading

from .workspace import Snapshot, Workspace

log = logging.getLogger("forkcore")


class StandbyPool:
    """Frozen clones of `snapshot` ready to be swapped in.

    Args:
        snapshot: the state to roll back to; the pool holds a reference until `close()`.
        size: clones kept frozen.
        backend: memory backend for the clones (see Snapshot.fork).
        refill_in_background: fill (at construction too) and refill after `take()` on a thread, so the
            caller never waits for a restore it did not ask for.
        refill_delay_s: a background refill after a take first waits this long: the taker's first commands
            (an env's first step) run before the restore competes with them for the CPU.
    """

    def __init__(self, snapshot: Snapshot, size: int = 1, backend: str = "auto",
                 refill_in_background: bool = True, refill_delay_s: float = 0.0) -> None:
        if size < 1:
            raise ValueError(f"StandbyPool(size={size}): size must be >= 1")
        if refill_delay_s < 0:
            raise ValueError(f"StandbyPool(refill_delay_s={refill_delay_s}): expected >= 0")
        self.snapshot = snapshot.retain()
        self.size, self.backend, self._bg = size, backend, refill_in_background
        self._frozen: list[Workspace] = []
        self._lock = threading.Lock()
        self._refill_thread: threading.Thread | None = None
        self._closed = threading.Event()  # set by close(): a waiting refill gives up at once
        self.refill_delay_s = refill_delay_s
        self.last_error: Exception | None = None
        self._refill()

    def fill(self) -> None:
        """Restore and freeze clones until `size` are ready (a failed restore is kept in `last_error`)."""
        while True:
            with self._lock:
                if self._closed.is_set() or len(self._frozen) >= self.size:
                    return
            try:
                clone = self.snapshot.fork(1, backend=self.backend, background=self._bg)[0]
                clone.freeze()
            except Exception as e:  # noqa: BLE001 - a standby is only a shortcut; take() falls back to a restore
                self.last_error = e
                log.warning("standby clone of snapshot %s failed: %s", self.snapshot.id, e)
                return
            with self._lock:
                unwanted = self._closed.is_set() or len(self._frozen) >= self.size  # closed or shrunk meanwhile
                if not unwanted:
                    self._frozen.append(clone)
            if unwanted:
                clone.destroy()
                return

    def _refill(self, delay_s: float = 0.0) -> None:
        if not self._bg:
            self.fill()
            return

        def delayed_fill() -> None:
            if not self._closed.wait(delay_s):
                self.fill()

        with self._lock:
            if self._closed.is_set() or (self._refill_thread is not None and self._refill_thread.is_alive()):
                return
            self._refill_thread = threading.Thread(target=delayed_fill, name="standby-refill", daemon=True)
            self._refill_thread.start()

    @property
    def ready(self) -> int:
        """Frozen clones ready to be taken now."""
        with self._lock:
            return len(self._frozen)

    def shrink(self, size: int) -> None:
        """Keep at most `size` (>= 1) clones from now on; frozen ones beyond it are destroyed."""
        if size < 1:
            raise ValueError(f"StandbyPool.shrink({size}): size must be >= 1")
        with self._lock:
            self.size = min(self.size, size)
            extra, self._frozen = self._frozen[self.size:], self._frozen[:self.size]
        for c in extra:
            c.destroy()

    def grow(self, size: int) -> None:
        """Keep `size` clones from now on if that is more than now; the new ones are restored like a refill."""
        with self._lock:
            self.size = max(self.size, size)
        self._refill()

    def take_ready(self) -> Workspace | None:
        """A thawed standby clone if one is ready (then a refill starts), else None."""
        with self._lock:
            clone = self._frozen.pop() if self._frozen else None
        if clone is not None:
            try:
                clone.thaw()
            except Exception:  # noqa: BLE001 - died while frozen: discard it, the caller restores instead
                clone.destroy()
                clone = None
        self._refill(self.refill_delay_s if clone is not None else 0.0)
        return clone

    def take(self) -> Workspace:
        """A running clone in the snapshot's state (thawed from the pool, or restored if none is ready)."""
        clone = self.take_ready()
        return clone if clone is not None else self.snapshot.fork(1, backend=self.backend)[0]

    def rollback(self, ws: Workspace) -> Workspace:
        """Destroy `ws` and return a clone of the pool's snapshot in its place."""
        ws.destroy()
        return self.take()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            frozen, self._frozen = self._frozen, []
            thread = self._refill_thread
        if thread is not None:
            thread.join(timeout=120)
        for c in frozen:
            c.destroy()
        self.snapshot.release()

    def __enter__(self) -> "StandbyPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
