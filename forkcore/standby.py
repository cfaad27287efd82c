"""Fast rollback (DeltaBox): frozen standby clones of a snapshot; rolling back = thawing one.

Restoring a clone takes a CRIU restore (0.1–1 s); thawing a frozen one takes milliseconds. A pool keeps
`size` clones restored and frozen (cgroup freezer: they use memory but no CPU) and refills after a take.
"""
from __future__ import annotations

import threading

from .workspace import Snapshot, Workspace


class StandbyPool:
    """Frozen clones of `snapshot` ready to be swapped in.

    Args:
        snapshot: the state to roll back to; the pool holds a reference until `close()`.
        size: clones kept frozen.
        backend: memory backend for the clones (see Snapshot.fork).
        refill_in_background: refill after `take()` on a thread, so the next rollback is fast too.
    """

    def __init__(self, snapshot: Snapshot, size: int = 1, backend: str = "auto",
                 refill_in_background: bool = True) -> None:
        if size < 1:
            raise ValueError(f"StandbyPool(size={size}): size must be >= 1")
        self.snapshot = snapshot.retain()
        self.size, self.backend, self._bg = size, backend, refill_in_background
        self._frozen: list[Workspace] = []
        self._lock = threading.Lock()
        self._refill_thread: threading.Thread | None = None
        self._closed = False
        self.fill()

    def fill(self) -> None:
        while True:
            with self._lock:
                if self._closed or len(self._frozen) >= self.size:
                    return
            clone = self.snapshot.fork(1, backend=self.backend)[0]
            clone.freeze()
            with self._lock:
                if self._closed:
                    clone.destroy()
                    return
                self._frozen.append(clone)

    def take(self) -> Workspace:
        """A running clone in the snapshot's state (thawed from the pool, or restored if it is empty)."""
        with self._lock:
            clone = self._frozen.pop() if self._frozen else None
        if clone is None:
            clone = self.snapshot.fork(1, backend=self.backend)[0]
        else:
            clone.thaw()
        if self._bg:
            if self._refill_thread is None or not self._refill_thread.is_alive():
                self._refill_thread = threading.Thread(target=self.fill, name="standby-refill", daemon=True)
                self._refill_thread.start()
        else:
            self.fill()
        return clone

    def rollback(self, ws: Workspace) -> Workspace:
        """Destroy `ws` and return a clone of the pool's snapshot in its place."""
        ws.destroy()
        return self.take()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            frozen, self._frozen = self._frozen, []
        if self._refill_thread is not None:
            self._refill_thread.join(timeout=120)
        for c in frozen:
            c.destroy()
        self.snapshot.release()

    def __enter__(self) -> "StandbyPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
