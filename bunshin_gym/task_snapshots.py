"""Initial snapshots: one base snapshot per env workspace, one task snapshot per task (held by the Runtime).

Building a workspace cold (start services, launch a browser) takes seconds; forking a snapshot takes a
fraction of that. The first reset of a task builds: base workspace → warm-up call → base snapshot; fork →
the task's reset call → task snapshot (with the initial observation it produced). Every later reset of that
task, in any env object of this process with the same adapter settings (`EnvAdapter.identity`: viewport,
screen size, ...), forks the task snapshot. Both are keyed by the host's versions too
(forkcore.versions): after an upgrade of Chromium, LibreOffice, the venv, CRIU or the kernel the next
reset builds new ones, under a new prefix-tree identity. Released at interpreter exit.
"""
from __future__ import annotations

import hashlib
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkcore import Snapshot, Workspace, host_versions

from .adapter import EnvAdapter, Task


@dataclass
class TaskSnapshot:
    snapshot: Snapshot
    initial_raw: Any  #: the executor's answer to the reset call (the initial observation)
    build_s: float
    initial_digest: str  #: task + workspace spec + adapter settings + layers + host versions: the tree's identity
    _decoded: Any = None

    def initial_result(self, adapter: EnvAdapter, task: Task):
        """The decoded reset answer (decoded once: the snapshot's key fixes adapter settings and task).
        Callers must copy the observation before handing it out."""
        if self._decoded is None:
            self._decoded = adapter.decode(self.initial_raw, task)
        return self._decoded


class TaskSnapshots:
    """Builds each base and task snapshot once (thread-safe: concurrent first resets build it once)."""

    def __init__(self) -> None:
        self._base: dict[str, Snapshot] = {}
        self._tasks: dict[tuple[str, str, str], TaskSnapshot] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()
        self._borrowed: set[int] = set()  # ids of snapshots another process owns: never released here

    def borrowed(self) -> "TaskSnapshots":
        """For a forked child process: the same snapshots, usable (forked from) but never released here,
        while the parent that owns them lives (an AsyncVectorEnv worker does not cold-start the desktop)."""
        child = TaskSnapshots()
        child._base, child._tasks = dict(self._base), dict(self._tasks)
        child._borrowed = {id(s) for s in self._base.values()} | {id(t.snapshot) for t in self._tasks.values()}
        return child

    def _lock(self, key) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def base(self, adapter: EnvAdapter) -> Snapshot:
        spec = adapter.workspace_spec()
        key = spec.to_json() + adapter.identity() + host_versions().digest()
        with self._lock(("base", key)):
            if key not in self._base:
                ws = Workspace.start(spec)
                try:
                    warm = adapter.warmup_call()
                    if warm:
                        ws.call(warm[0], **warm[1])
                    self._base[key] = ws.snapshot()
                finally:
                    ws.destroy()
            return self._base[key]

    @staticmethod
    def _task_key(adapter: EnvAdapter, task: Task) -> tuple[str, str, str, str, str]:
        return adapter.workspace_spec().to_json(), adapter.identity(), task.id, task.digest, host_versions().digest()

    def adopt(self, adapter: EnvAdapter, task: Task, received: TaskSnapshot) -> TaskSnapshot:
        """A task snapshot received from another machine becomes this process's, unless one was built here
        meanwhile (then that one stays, and the caller's reference to the received one is its own)."""
        key = self._task_key(adapter, task)
        with self._lock(("task", key)):
            if key not in self._tasks:
                self._tasks[key] = received
                received.snapshot.retain()  # the registry's reference; the caller keeps its own
            return self._tasks[key]

    def task(self, adapter: EnvAdapter, task: Task, backend: str) -> TaskSnapshot:
        key = self._task_key(adapter, task)
        with self._lock(("task", key)):
            if key not in self._tasks:
                t0 = time.monotonic()
                ws = self.base(adapter).fork(1, backend=backend)[0]
                try:
                    for inside, src in adapter.host_files(task).items():
                        dst = Path(ws.host_path(inside))
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src, dst)
                        dst.chmod(0o444)
                    method, params = adapter.reset_call(task)
                    raw = ws.call(method, **params)
                    snap = ws.snapshot()
                finally:
                    ws.destroy()
                layers = "|".join(p.name for p in snap.lowers)
                host = snap.recorded_host_versions().digest()
                digest = hashlib.sha256(f"{task.digest}|{key[0]}|{key[1]}|{layers}|{host}".encode()).hexdigest()[:16]
                self._tasks[key] = TaskSnapshot(snap, raw, time.monotonic() - t0, digest)
            return self._tasks[key]

    def discard(self, ts: TaskSnapshot) -> None:
        """Forget a task snapshot that failed to restore, so the next reset of the task builds a new one."""
        with self._guard:
            keys = [k for k, v in self._tasks.items() if v is ts]
            for k in keys:
                del self._tasks[k]
        if keys and id(ts.snapshot) not in self._borrowed:
            ts.snapshot.release()

    def release_all(self) -> None:
        for snap in [t.snapshot for t in self._tasks.values()] + list(self._base.values()):
            if id(snap) not in self._borrowed:
                snap.release()
        self._tasks.clear()
        self._base.clear()

