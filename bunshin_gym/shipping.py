"""An episode moved to another machine: the env there continues it from the exact live state, with no replay.

`pack_episode(env)` snapshots the live workspace and packs it (forkcore.shipping) above the task snapshot, which
travels in the same parcel: a live layer is a diff of the very task snapshot it was dumped above, so the
receiver stacks it on that copy, never on a task snapshot it built itself (and the two share most memory
pages, which the parcel's compression finds). With them go the episode's
position (history, step count, last observation) and the tree path to it (each step's recorded result), so
the receiving tree holds the position even when records are not shared. `unpack_episode(env, parcel)` makes
that the env's episode; the received task snapshot becomes the receiver's own for later resets, unless it
built one meanwhile. Used by `cluster.Slot.fork` across nodes (the bytes move through Ray).

What cannot ship (SnapshotError from `pack_episode`): a workspace whose lineage maps memfile pages (they live
in the sender's shared memory) and a position whose path results were evicted from the tree; the caller
replays instead.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from forkcore import SnapshotError, layers
from forkcore.shipping import SnapshotParcel, pack_snapshots, unpack_snapshots

from .adapter import Task
from .cache import CachedStep
from .env import _mark_reset
from .runtime import runtime
from .task_snapshots import TaskSnapshot

__all__ = ["EpisodeParcel", "pack_episode", "unpack_episode"]


@dataclass
class EpisodeParcel:
    task: Task
    identity: str  #: the adapter settings (`EnvAdapter.identity`): the receiving env must have the same
    history: list[str]
    elapsed_steps: int
    done: bool
    last_obs: dict
    path: list[tuple[str, CachedStep, float]]  #: (signature, result, cost) from the task's initial state
    snapshots: SnapshotParcel  #: the task snapshot, then the live state above it
    initial_raw: Any
    initial_digest: str
    task_build_s: float  #: what building the task snapshot took the sender
    timings: dict  #: dump_s (the live snapshot), pack_s


def pack_episode(env: gym.Env) -> EpisodeParcel:
    """Everything another machine needs to continue `env`'s episode (env goes on unchanged).

    Raises gym.error.ResetNeeded before a reset; SnapshotError when the state cannot ship (see module doc)."""
    base = env.unwrapped
    ep = base.episode
    if ep is None:
        raise gym.error.ResetNeeded("call reset() before shipping an episode")
    path, node = [], ep.node
    while node.parent is not None:
        if node.result is None:
            raise SnapshotError(f"task {ep.task.id}: the result at depth {node.depth} was evicted from the tree; "
                                "the position cannot be shipped")
        path.append((node.signature, node.result, node.cost_s))
        node = node.parent
    path.reverse()
    ws = base.live_workspace()
    t0 = time.perf_counter()
    snap = ws.snapshot()
    dump_s = time.perf_counter() - t0
    try:
        ts = ep.task_snapshot
        parcel = pack_snapshots([ts.snapshot, snap])
    finally:
        snap.release()
    return EpisodeParcel(ep.task, base.adapter.identity(), list(ep.history), ep.elapsed_steps, ep.done,
                         copy.deepcopy(ep.last_obs), path, parcel, ts.initial_raw, ts.initial_digest, ts.build_s,
                         {"dump_s": round(dump_s, 3), "pack_s": round(time.perf_counter() - t0 - dump_s, 3)})


def unpack_episode(env: gym.Env, parcel: EpisodeParcel) -> dict:
    """Make `env` (of the same env id and settings as the sender's) continue the parcel's episode; its own
    episode, if any, ends. Returns the unpack and restore times.

    Raises ValueError (other adapter settings), SnapshotError / RestoreFailed (see forkcore.shipping); `env`
    is then unchanged."""
    base = env.unwrapped
    if base.adapter.identity() != parcel.identity:
        raise ValueError(f"the episode was shipped from an env with settings {parcel.identity!r}; this one has "
                         f"{base.adapter.identity()!r}: make the receiving env with the sender's kwargs")
    t0 = time.perf_counter()
    spec = base.adapter.workspace_spec()
    task_snap, live = unpack_snapshots(parcel.snapshots, spec, layers.stack(spec.layers))
    task_snap.release()  # the live snapshot holds it (and the registry, if it adopts it)
    unpack_s = time.perf_counter() - t0
    try:
        ws = live.fork(1, backend=base.config.backend)[0]
        received = TaskSnapshot(task_snap, parcel.initial_raw, parcel.task_build_s, parcel.initial_digest)
        ts = runtime().task_snapshots.adopt(base.adapter, parcel.task, received)
    finally:
        live.release()  # the clone holds it
    base._end_episode(background=True)
    ep = base.new_episode(parcel.task, ts)
    ep.node = ep.tree.record_path(parcel.path)
    ep.history, ep.elapsed_steps, ep.done = list(parcel.history), parcel.elapsed_steps, parcel.done
    ep.last_obs = copy.deepcopy(parcel.last_obs)
    ep.restorer.adopt(ws, ep.node)
    base.episode = ep
    _mark_reset(env)
    return {"unpack_s": round(unpack_s, 3), "restore_s": round(time.perf_counter() - t0 - unpack_s, 3)}
