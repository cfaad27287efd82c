"""The state every Bunshin env of a process shares: the prefix cache (one tree per task), the on-disk stores,
the task snapshots, the standby pools, the reaper of discarded workspaces, the truncation memo and the
machine's idle-CPU gauge. One `Runtime` per process (`runtime()`).

A forked child process (e.g. a worker of Gymnasium's AsyncVectorEnv) gets a fresh runtime that restores from
its parent's task snapshots but owns none of them: it never releases them, nor takes the parent's frozen
clones, nor writes to its trees; it keeps no standby clones of its own.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from forkcore import Snapshot, Workspace
from forkcore.standby import StandbyPool

from .cache import CacheConfig, CacheStore, PrefixCache, PrefixTree
from .task_snapshots import TaskSnapshots

log = logging.getLogger("bunshin_gym")


def _env_mb(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name}={raw!r}: expected an integer number of MiB") from None
    if value < 0:
        raise ValueError(f"${name}={raw!r}: expected MiB >= 0")
    return value << 20


#: glibc's mallopt parameter: allocations at least this large are mmapped, and unmapped when freed
_M_MMAP_THRESHOLD = -3
#: observations (a 1280x720 screenshot is 2.7 MB) are far above it; small objects stay in the heap
MMAP_THRESHOLD_BYTES = 256 << 10


def return_large_frees_to_the_os() -> bool:
    """Make glibc mmap every allocation of MMAP_THRESHOLD_BYTES or more (its default threshold grows with the
    largest freed block, up to 32 MB). Without it, screenshots cached and evicted by many threads land in
    malloc's per-thread heaps, whose freed holes the process keeps: in the 8-env soak its RSS crept ~26 MB a
    minute with the cache at its budget (0.6 MB/min with it). False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


@dataclass
class _Kept:
    pool: StandbyPool
    clone_bytes: int
    size: int  #: clones the budget lets it keep
    task: str  #: the id of the initial snapshot of the task whose state it holds


class StandbyPools:
    """Frozen, already-restored clones of hot snapshots (DeltaBox rollback), within a memory budget.

    A pool is asked for (`ensure`) for a task's initial snapshot at its first reset and for a retained
    snapshot once a second restore came from it; it fills in the background. `take` thaws a ready clone or
    answers None (the caller restores as usual). A clone is priced at its snapshot's dump size (what a
    private restore makes resident). When the budget is short, every pool keeps one clone before any keeps
    more: pools give up their extra clones (least recently used first), then the new pool gets fewer, and
    only then is the least recently used pool closed. (Closing whole pools first made an epoch's tasks, which
    come back in turn, close each other's pools: every task's first resets found none ready.)

    A task's pools together keep at most `per_snapshot` clones: a retained snapshot's pool gets one clone,
    taken from the task's own pools (the one with most clones gives it up), and none where they keep one each;
    when the cache drops that snapshot (`discard`), the clone goes back to the task's initial pool.
    So reuse never holds more frozen clones than resetting the task alone would (an epoch with the cache ran
    up to 1 GB above one without, in pools of retained snapshots).

    Args:
        budget_bytes: memory all frozen clones may use ($BUNSHIN_STANDBY_BUDGET_MB, default 2048; 0: off).
        per_snapshot: frozen clones kept per snapshot ($BUNSHIN_STANDBY_PER_SNAPSHOT, default 2).
    """

    #: a refill after a take waits this long, so the env's first step after a reset does not share the CPU
    #: with the restore of the next clone (a policy thinks for seconds before it needs another)
    REFILL_DELAY_S = 0.5

    def __init__(self, budget_bytes: int, per_snapshot: int) -> None:
        if per_snapshot < 0:
            raise ValueError(f"per_snapshot={per_snapshot}: expected >= 0")
        self.budget_bytes, self.per_snapshot = budget_bytes, per_snapshot
        self._pools: OrderedDict[tuple[str, str], _Kept] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.opened = self.shrunk = self.evicted = 0  # pools started; given up clones for another; closed for one

    def ensure(self, snapshot: Snapshot, backend: str, initial: Snapshot | None = None) -> None:
        """Start keeping frozen clones of `snapshot` (no-op if kept already or if the budget allows none).
        `initial`: the task's initial snapshot, where `snapshot` is a retained state of that task."""
        key = (snapshot.id, backend)
        task = (initial or snapshot).id
        clone_bytes = max(1, snapshot.size_bytes())
        with self._lock:
            if key in self._pools:
                self._pools.move_to_end(key)
                return
            size = min(self.per_snapshot, self.budget_bytes // clone_bytes)
            shrinking: dict[StandbyPool, int] = {}  # pool -> the clones it keeps from now on
            closing = []
            if task != snapshot.id and size >= 1:
                siblings = [k for k in self._pools.values() if k.task == task]
                size = 1
                if sum(k.size for k in siblings) + size > self.per_snapshot:
                    donor = max(siblings, key=lambda k: k.size, default=None)
                    if donor is None or donor.size < 2:
                        return
                    donor.size -= 1
                    shrinking[donor.pool] = donor.size
            if size < 1:
                return
            for kept in self._pools.values():
                if self._used() + size * clone_bytes <= self.budget_bytes:
                    break
                if kept.size > 1:
                    kept.size = 1
                    shrinking[kept.pool] = 1
            while size > 1 and self._used() + size * clone_bytes > self.budget_bytes:
                size -= 1
            while self._pools and self._used() + size * clone_bytes > self.budget_bytes:
                closing.append(self._pools.popitem(last=False)[1].pool)
            self.shrunk += len(shrinking)
            self.evicted += len(closing)
        for pool, to in shrinking.items():
            pool.shrink(to)
        for pool in closing:
            pool.close()
        pool = StandbyPool(snapshot, size=size, backend=backend, refill_delay_s=self.REFILL_DELAY_S)
        with self._lock:
            if key in self._pools:  # another thread made one meanwhile
                closing = [pool]
            else:
                self._pools[key] = _Kept(pool, clone_bytes, size, task)
                self.opened += 1
                closing = []
        for p in closing:
            p.close()

    def _used(self) -> int:
        return sum(k.clone_bytes * k.size for k in self._pools.values())

    def ready(self, snapshot: Snapshot, backend: str) -> bool:
        with self._lock:
            entry = self._pools.get((snapshot.id, backend))
        return entry is not None and entry.pool.ready > 0

    def take(self, snapshot: Snapshot, backend: str) -> Workspace | None:
        """A thawed clone in `snapshot`'s state if one is ready (counted as a hit), else None (a miss)."""
        with self._lock:
            entry = self._pools.get((snapshot.id, backend))
            if entry is not None:
                self._pools.move_to_end((snapshot.id, backend))
        clone = entry.pool.take_ready() if entry is not None else None
        with self._lock:
            if clone is None:
                self.misses += 1
            else:
                self.hits += 1
        return clone

    def discard(self, snapshot: Snapshot) -> None:
        """Close the pools of a snapshot the cache no longer retains. A retained state's clone goes back to its
        task's initial pool (which may have given it up for it in `ensure`) where the budget allows."""
        with self._lock:
            keys = [k for k in self._pools if k[0] == snapshot.id]
            gone = [self._pools.pop(k) for k in keys]
            for (_, backend), kept in zip(keys, gone):
                home = self._pools.get((kept.task, backend))
                if home is None or kept.task == snapshot.id:
                    continue
                task_clones = sum(k.size for k in self._pools.values() if k.task == kept.task)
                if task_clones < self.per_snapshot and self._used() + home.clone_bytes <= self.budget_bytes:
                    home.size += 1
                    home.pool.grow(home.size)  # under the lock (it only starts a refill): no shrink between
        for kept in gone:
            kept.pool.close()

    def stats(self) -> dict:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "pools": len(self._pools), "opened": self.opened,
                    "shrunk": self.shrunk, "evicted": self.evicted,
                    "frozen": sum(k.pool.ready for k in self._pools.values()), "reserved_mb": self._used() >> 20}

    def close(self) -> None:
        with self._lock:
            pools = [k.pool for k in self._pools.values()]
            self._pools.clear()
        for p in pools:
            p.close()


def cpu_times(stat_path: str = "/proc/stat") -> tuple[float, float] | None:
    """(idle, total) jiffies of all CPUs since boot (idle includes iowait; total is user..steal, guest time
    being counted in user already), or None where `stat_path` cannot be read."""
    try:
        with open(stat_path) as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields[:8])


class IdleCpus:
    """How many CPUs the machine left idle recently (from /proc/stat): speculation runs on idle CPU only.

    `__call__` answers the idle CPUs averaged over the last `window_s` (at least the time since the previous
    call; None before two samples exist or where /proc/stat cannot be read).
    """

    def __init__(self, window_s: float = 1.0, stat_path: str = "/proc/stat") -> None:
        self.window_s, self.stat_path = window_s, stat_path
        self._samples: collections.deque[tuple[float, float, float]] = collections.deque()  # (t, idle, total)
        self._lock = threading.Lock()

    def __call__(self) -> float | None:
        now = cpu_times(self.stat_path)
        if now is None:
            return None
        t = time.monotonic()
        with self._lock:
            self._samples.append((t, *now))
            while len(self._samples) > 1 and self._samples[1][0] <= t - self.window_s:
                self._samples.popleft()  # keep one sample at least window_s old
            t0, idle0, total0 = self._samples[0]
        if total0 >= now[1]:
            return None
        return (os.cpu_count() or 1) * (now[0] - idle0) / (now[1] - total0)


class Reaper:
    """Destroys discarded workspaces on a thread: killing, reaping and unmounting one takes ~50 ms that a
    reset need not wait for. `flush()` waits until every workspace handed over is gone (env.close does)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Workspace] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def destroy(self, ws: Workspace) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="bunshin-reaper", daemon=True)
                self._thread.start()
        self._queue.put(ws)

    def _run(self) -> None:
        while True:
            ws = self._queue.get()
            try:
                ws.destroy()
            except Exception as e:  # noqa: BLE001 - logged; forkcore's exit handler destroys what is left
                log.warning("destroying workspace %s failed: %s", ws.id, e)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        self._queue.join()


class TreeSnapshot:
    """A forkcore Snapshot as the prefix tree's SnapshotHandle; when the tree evicts it, its standby pool
    goes too (else the pool's reference would keep the evicted snapshot's memory)."""

    def __init__(self, snapshot: Snapshot, standby: StandbyPools) -> None:
        self.snapshot, self._standby = snapshot, standby
        self.size_bytes = snapshot.size_bytes()
        self.restores = 0  #: clones restored from it: a second one makes it worth a standby pool

    def release(self) -> None:
        self._standby.discard(self.snapshot)
        self.snapshot.release()


class Runtime:
    """Process-wide state of the Bunshin envs (see the module docstring).

    Args:
        snapshot_budget_bytes: memory retained prefix-tree snapshots may use ($BUNSHIN_SNAPSHOT_BUDGET_MB,
            default 8192).
        result_budget_bytes: memory the prefix trees' recorded step results may use
            ($BUNSHIN_RESULT_BUDGET_MB, default 4096).
        standby_budget_bytes, standby_per_snapshot: see `StandbyPools`.
    """

    def __init__(self, snapshot_budget_bytes: int | None = None, standby_budget_bytes: int | None = None,
                 standby_per_snapshot: int | None = None, result_budget_bytes: int | None = None) -> None:
        if snapshot_budget_bytes is None:
            snapshot_budget_bytes = _env_mb("BUNSHIN_SNAPSHOT_BUDGET_MB", 8192)
        if result_budget_bytes is None:
            result_budget_bytes = _env_mb("BUNSHIN_RESULT_BUDGET_MB", 4096)
        if standby_budget_bytes is None:
            standby_budget_bytes = _env_mb("BUNSHIN_STANDBY_BUDGET_MB", 2048)
        if standby_per_snapshot is None:
            standby_per_snapshot = int(os.environ.get("BUNSHIN_STANDBY_PER_SNAPSHOT", "2"))
        self.pid = os.getpid()
        return_large_frees_to_the_os()
        self.prefix_cache = PrefixCache(CacheConfig(snapshot_budget_bytes=snapshot_budget_bytes,
                                                    result_budget_bytes=result_budget_bytes))
        self.task_snapshots = TaskSnapshots()
        self.standby = StandbyPools(standby_budget_bytes, standby_per_snapshot)
        self.reaper = Reaper()
        self.idle_cpus = IdleCpus()
        #: (tree key, node key) -> the evaluation of an empty answer there (truncation reward)
        self.truncation_rewards: dict[tuple[str, str], float] = {}
        #: step records shared with other processes or nodes (bunshin_gym.cluster.HubRecords): asked at a miss
        #: before executing, told every executed step; None: this process's trees only
        self.shared_records = None
        self._stores: dict[str, CacheStore] = {}
        self._store_loaded: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def tree(self, task_id: str, digest: str, readonly: Callable[[str], bool],
             cache_dir: str | None) -> tuple[PrefixTree, CacheStore | None]:
        """The task's shared tree, first loaded from the on-disk store of `cache_dir` (once per process)."""
        if cache_dir is None:
            return self.prefix_cache.tree(task_id, digest, readonly=readonly), None
        cache_dir = os.path.abspath(cache_dir)
        with self._lock:
            store = self._stores.get(cache_dir)
            if store is None:
                store = self._stores[cache_dir] = CacheStore(cache_dir)
            if (cache_dir, task_id, digest) not in self._store_loaded:
                tree, report = store.load_tree(task_id, digest, readonly=readonly,
                                               tree_factory=self.prefix_cache.new_tree)
                if report.dropped:
                    log.warning("cache store %s: %d corrupt or stale entries of task %s dropped", cache_dir,
                                report.dropped, task_id)
                if all(t.key != tree.key for t in self.prefix_cache.trees()):  # else keep the tree built here
                    self.prefix_cache.adopt(tree)
                else:
                    self.prefix_cache.discard(tree)
                self._store_loaded.add((cache_dir, task_id, digest))
        return self.prefix_cache.tree(task_id, digest, readonly=readonly), store

    def reset_cache(self, config: CacheConfig | None = None) -> None:
        """Forget every recorded step and retained snapshot; keep task snapshots and initial standbys
        (benchmarks: each configuration starts with a cold cache). `config` replaces the cache's settings."""
        self.prefix_cache.close()
        self.prefix_cache = PrefixCache(config or self.prefix_cache.config)
        self.truncation_rewards.clear()
        self._close_stores()

    def _close_stores(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._store_loaded.clear()

    def close(self) -> None:
        """Release everything (at interpreter exit; only in the process that made this runtime)."""
        if os.getpid() != self.pid:
            return
        self.reaper.flush()
        self.standby.close()
        self.prefix_cache.close()
        self._close_stores()
        self.task_snapshots.release_all()


_RUNTIME: Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime (made at first use; a forked child makes its own)."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is None or _RUNTIME.pid != os.getpid():
            parent = _RUNTIME
            if parent is None:
                _RUNTIME = Runtime()
            else:  # forked: restore from the parent's task snapshots, own nothing else of it, and keep no
                # frozen clones (a worker process ends with os._exit: nothing would destroy them)
                _RUNTIME = Runtime(standby_budget_bytes=0)
                _RUNTIME.task_snapshots = parent.task_snapshots.borrowed()
            atexit.register(_RUNTIME.close)
        return _RUNTIME
