"""Ray across machines: one host actor per node, GRPO groups placed by task snapshot and free memory, step
records shared by every node.

`Cluster(address)` connects to a running Ray cluster and starts one `NodeHost` actor on every alive node, pinned
there (node affinity). A host owns its node's runtime: task snapshots, standby clones, prefix trees and
workspaces, which never leave the node. `Cluster.run_groups(env_id, tasks, group, policy_factory)` runs one GRPO
group per task: each group runs wholly on one host (so every fork and snapshot restore inside a group is local),
on the host that already built its task snapshot, else on the one with the most free memory after what its
running groups are expected to take. A host whose node dies fails its groups with `RayActorError`; they are run
again on a live host (reported in `placements`), and since a record reaches the hub only after its step
completed, nothing a dead node half-did is ever served.

`RecordHub` is one actor (on the driver's node) holding every step record (observation, reward, termination)
that any host executed, keyed by the prefix tree's key — which includes the task, the workspace spec, the layers
and the host's versions, so nodes with other application versions never share — and the action prefix. A host
asks it at a miss before executing (`Runtime.shared_records`): a record made on node A is a hit on node B at
B's next lookup of that prefix. A group never leaves its node; a single env (`Slot`) forked onto another node
ships its live state there, or replays it where that is cheaper (see `Slot`).
Needs the `ray` extra (`pip install 'bunshin-gym[ray]'`).
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

try:
    import ray
    from ray.exceptions import RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as e:  # pragma: no cover - depends on the installation
    import gymnasium as gym

    raise gym.error.DependencyNotInstalled(
        "bunshin_gym.cluster needs Ray, which is not installed; run `pip install 'bunshin-gym[ray]'` "
        "(or `/opt/bunshin/venv/bin/pip install ray`)") from e

from forkcore import RestoreFailed, SnapshotError, accounting, paths

from .cache import CachedStep
from .cache.tree import result_nbytes
from .rollout import Rollout, ThinkTimeModel, rollout_group

__all__ = ["Cluster", "GroupResult", "NodeHost", "RecordHub", "Slot"]

log = logging.getLogger(__name__)

#: memory a running group is expected to take on its node until measured (a workspace per sample, shared pages)
GROUP_RESERVE_MB = 1536


class RecordHub:
    """Step records of every node: (tree key, action prefix) -> (CachedStep, execution seconds), LRU in bytes."""

    def __init__(self, budget_mb: float = 2048) -> None:
        self.budget = int(budget_mb * 2**20)
        self.used = 0
        self.records: collections.OrderedDict[tuple, tuple[CachedStep, float, int]] = collections.OrderedDict()
        self.counts = {"put": 0, "get": 0, "found": 0, "evicted": 0}

    def put(self, tree_key: str, prefix: tuple[str, ...], step: CachedStep, exec_s: float) -> None:
        key = (tree_key, tuple(prefix))
        if key in self.records:
            return
        size = result_nbytes(step)
        self.records[key] = (step, exec_s, size)
        self.used += size
        self.counts["put"] += 1
        while self.used > self.budget and len(self.records) > 1:
            _, (_, _, s) = self.records.popitem(last=False)
            self.used -= s
            self.counts["evicted"] += 1

    def get(self, tree_key: str, prefix: tuple[str, ...]) -> tuple[CachedStep, float] | None:
        self.counts["get"] += 1
        hit = self.records.get((tree_key, tuple(prefix)))
        if hit is None:
            return None
        self.records.move_to_end((tree_key, tuple(prefix)))
        self.counts["found"] += 1
        return hit[0], hit[1]

    def stats(self) -> dict:
        return {**self.counts, "records": len(self.records), "mb": round(self.used / 2**20, 1)}


class HubRecords:
    """`Runtime.shared_records` of a host: asks the hub at a miss, tells it every executed step (not waited)."""

    def __init__(self, hub) -> None:
        self.hub = hub
        self.asked = self.found = self.told = 0

    def get(self, tree_key: str, prefix: Sequence[str]) -> tuple[CachedStep, float] | None:
        self.asked += 1
        try:
            hit = ray.get(self.hub.get.remote(tree_key, tuple(prefix)), timeout=60)
        except (RayActorError, ray.exceptions.GetTimeoutError) as e:  # the hub's node died: execute here
            log.warning("record hub unreachable (%s): executing locally", type(e).__name__)
            return None
        self.found += hit is not None
        return hit

    def put(self, tree_key: str, prefix: Sequence[str], step: CachedStep, exec_s: float) -> None:
        self.told += 1
        self.hub.put.remote(tree_key, tuple(prefix), step, exec_s)


class NodeHost:
    """The Bunshin runtime of one node (a Ray actor pinned there; threaded: groups run side by side)."""

    def __init__(self, hub=None) -> None:
        from .runtime import runtime

        self.records = HubRecords(hub) if hub is not None else None
        runtime().shared_records = self.records
        self.tasks: set[tuple[str, str]] = set()  # (env id, task id) whose task snapshot this node built
        self.slots: dict[str, Any] = {}  # slot id -> gym env (`Slot`)
        self._lock = threading.Lock()

    def info(self) -> dict:
        from .runtime import runtime

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(),
                "mem_available_mb": round(accounting.meminfo()["MemAvailable"] / 2**20),
                "tasks": sorted(self.tasks), "standby": runtime().standby.stats(), "state_dir": str(paths.STATE_DIR),
                "shared_records": None if self.records is None else
                {"asked": self.records.asked, "found": self.records.found, "told": self.records.told}}

    def rollout_group(self, env_id: str, task_id: str, policy_factory: Callable[[int], Any], group: int,
                      **kwargs: Any) -> list[Rollout]:
        import bunshin_gym  # noqa: F401 - registers the envs

        out = rollout_group(env_id, task_id, policy_factory, group, **kwargs)
        with self._lock:
            self.tasks.add((env_id, task_id))
        return out

    # ---- single envs ("slots") on this node, for `Slot` ----------------------------------------------
    def open(self, slot: str, env_id: str, env_kwargs: dict) -> None:
        import gymnasium as gym

        import bunshin_gym  # noqa: F401 - registers the envs

        self.slots[slot] = gym.make(env_id, **env_kwargs)

    def reset(self, slot: str, seed: int | None, options: dict | None):
        obs, info = self.slots[slot].reset(seed=seed, options=options)
        with self._lock:
            self.tasks.add((self.slots[slot].spec.id, str(info["task_id"])))
        return obs, info

    def step(self, slot: str, action: Any):
        return self.slots[slot].step(action)

    def fork(self, slot: str, new_slots: Sequence[str]) -> None:
        """Local fork: live clones of `slot`'s workspace on this node."""
        for sid, env in zip(new_slots, self.slots[slot].fork(len(new_slots))):
            self.slots[sid] = env

    def position(self, slot: str) -> dict:
        """What another node needs to rebuild `slot`'s state by replay: env, task, actions so far; and what
        building the task snapshot took here (what a replay onto a node without it costs first)."""
        env = self.slots[slot]
        base = env.unwrapped
        return {"env_id": env.spec.id, "env_kwargs": base.config.kwargs(), "task_id": base.task.id,
                "history": list(base.history), "elapsed_steps": base.elapsed_steps,
                "task_build_s": base.episode.task_snapshot.build_s}

    def replay(self, slot: str, position: dict) -> None:
        """`slot` rebuilt from another node's `position`: this node's task snapshot, then the actions (hits
        when the records are shared: the workspace catches up in the background)."""
        self.open(slot, position["env_id"], position["env_kwargs"])
        env = self.slots[slot]
        env.reset(options={"task_id": position["task_id"]})
        for action in position["history"]:
            env.step(action)
        env.unwrapped.episode.elapsed_steps = position["elapsed_steps"]  # malformed steps count, replay none

    def holds_task(self, env_id: str, task_id: str) -> bool:
        """Whether this node has built (or received) the task snapshot of (env id, task id)."""
        return (env_id, str(task_id)) in self.tasks

    def ship(self, slot: str) -> dict:
        """`slot`'s episode packed for another node (bunshin_gym.shipping): its live state and task snapshot."""
        from .shipping import pack_episode

        env = self.slots[slot]
        return {"env_id": env.spec.id, "env_kwargs": env.unwrapped.config.kwargs(), "parcel": pack_episode(env)}

    def receive(self, slot: str, shipped: dict) -> dict:
        """`slot` continues an episode another node shipped (Ray moved its bytes here); returns the timings."""
        from .shipping import unpack_episode

        self.open(slot, shipped["env_id"], shipped["env_kwargs"])
        try:
            timings = unpack_episode(self.slots[slot], shipped["parcel"])
        except BaseException:
            self.close_slot(slot)
            raise
        with self._lock:
            self.tasks.add((shipped["env_id"], str(shipped["parcel"].task.id)))
        snaps = shipped["parcel"].snapshots
        return {**shipped["parcel"].timings, **timings, "mb": round(snaps.nbytes / 2**20, 1),
                "uncompressed_mb": round(snaps.raw_bytes / 2**20, 1)}

    def close_slot(self, slot: str) -> None:
        env = self.slots.pop(slot, None)
        if env is not None:
            env.close()

    def memory_mb(self) -> float:
        """PSS of this host process and of every workspace of this node (live, standby and speculative)."""
        total = (accounting.smaps_rollup(os.getpid()) or {}).get("Pss", 0)
        ws_root = paths.STATE_DIR / "ws"
        for d in ws_root.iterdir() if ws_root.is_dir() else []:
            try:
                total += accounting.tree_memory(int((d / "init.pid").read_text())).pss
            except (OSError, ValueError):
                continue
        return round(total / 2**20, 1)

    def shutdown(self) -> None:
        """Release this node's snapshots and standby clones, then end the actor."""
        from .runtime import runtime

        runtime().close()
        ray.actor.exit_actor()


@dataclass
class GroupResult:
    task_id: str
    node: int  #: index of the host that ran it (after any rescheduling)
    rollouts: list[Rollout]
    attempts: list[int] = field(default_factory=list)  #: hosts tried, in order (a died host, then the next)


class Cluster:
    """Bunshin hosts on every node of a Ray cluster.

    Args:
        address: the Ray cluster ("auto": the one this machine belongs to; "127.0.0.1:6379": a head).
        hub_budget_mb: memory of the shared step records (on the driver's node).
        share_records: False: each node keeps its own records only (a baseline).
        node_ip: this driver's address in the cluster (default: $BUNSHIN_RAY_NODE_IP, else Ray's guess, which
            is the host's external address: a driver inside a loopback-only namespace must say 127.0.0.1).
    """

    def __init__(self, address: str = "auto", hub_budget_mb: float = 2048, share_records: bool = True,
                 node_ip: str | None = None) -> None:
        if not ray.is_initialized():
            node_ip = node_ip or os.environ.get("BUNSHIN_RAY_NODE_IP")
            ray.init(address=address, log_to_driver=False, configure_logging=False,
                     **({"_node_ip_address": node_ip} if node_ip else {}))
        here = ray.get_runtime_context().get_node_id()
        self.hub = ray.remote(RecordHub).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(hub_budget_mb) \
            if share_records else None
        nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeManagerPort"])
        host_cls = ray.remote(NodeHost)
        self.hosts = [host_cls.options(num_cpus=0, max_concurrency=64, max_restarts=0,
                                       scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                                       ).remote(self.hub) for n in nodes]
        self.node_ids = [n["NodeID"] for n in nodes]
        self.alive = [True] * len(self.hosts)
        self.ship_s: dict[str, float] = {}  #: env id -> seconds a fork across nodes by shipping took (EWMA)
        self.infos = ray.get([h.info.remote() for h in self.hosts])

    def placement(self, env_id: str, task_id: str, running: dict[int, int]) -> int:
        """The host for a group: a live one that built the task's snapshot (fewest running groups), else the
        one with the most free memory after GROUP_RESERVE_MB per group it runs."""
        live = [i for i, ok in enumerate(self.alive) if ok]
        if not live:
            raise RuntimeError("no live node left in the cluster")
        warm = [i for i in live if [env_id, task_id] in [list(t) for t in self.infos[i]["tasks"]]]
        if warm:
            return min(warm, key=lambda i: running.get(i, 0))
        return max(live, key=lambda i: self.infos[i]["mem_available_mb"] - GROUP_RESERVE_MB * running.get(i, 0))

    def run_groups(self, env_id: str, tasks: Sequence[str], group: int, policy_factory: Callable[[str, int], Any],
                   *, think: ThinkTimeModel = ThinkTimeModel(), seed: int = 0, concurrency: int = 8,
                   env_kwargs: dict | None = None, max_attempts: int = 3,
                   on: Sequence[int] | None = None) -> list[GroupResult]:
        """One group of `group` samples per task, in parallel across the hosts; results in task order.
        `on`: run task k's group on host on[k] (placement and rescheduling off for it: tests, benchmarks)."""
        running: dict[int, int] = {}
        results: dict[int, GroupResult] = {}
        pending: dict[Any, tuple[int, int]] = {}  # object ref -> (task index, host)
        attempts: dict[int, list[int]] = {i: [] for i in range(len(tasks))}

        def submit(k: int) -> None:
            h = on[k] if on is not None else self.placement(env_id, tasks[k], running)
            running[h] = running.get(h, 0) + 1
            attempts[k].append(h)
            ref = self.hosts[h].rollout_group.remote(
                env_id, tasks[k], _bind(policy_factory, tasks[k]), group, think=think, seed=seed,
                concurrency=concurrency, env_kwargs=env_kwargs)
            pending[ref] = (k, h)

        for k in range(len(tasks)):
            submit(k)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            k, h = pending.pop(done[0])
            running[h] -= 1
            try:
                rollouts = ray.get(done[0])
            except RayActorError:
                self.alive[h] = False
                if on is not None or len(attempts[k]) >= max_attempts:
                    raise
                submit(k)
                continue
            results[k] = GroupResult(tasks[k], h, rollouts, attempts[k])
            self.infos[h] = ray.get(self.hosts[h].info.remote())
        return [results[k] for k in range(len(tasks))]

    def make(self, env_id: str, node: int | None = None, **env_kwargs: Any) -> Slot:
        """One env on a node (default: the live one with the most free memory); see `Slot`."""
        if node is None:
            node = self.placement(env_id, str(env_kwargs.get("task_id")), {})
        slot = Slot(self, node, uuid.uuid4().hex[:12])
        ray.get(self.hosts[node].open.remote(slot.id, env_id, env_kwargs))
        return slot

    def hub_stats(self) -> dict | None:
        return None if self.hub is None else ray.get(self.hub.stats.remote())

    def refresh(self) -> list[dict]:
        """Every live host's info (free memory, tasks it holds, shared-record counters)."""
        for i, h in enumerate(self.hosts):
            if self.alive[i]:
                try:
                    self.infos[i] = ray.get(h.info.remote(), timeout=30)
                except (RayActorError, ray.exceptions.GetTimeoutError):
                    self.alive[i] = False
        return self.infos

    def close(self) -> None:
        """End the hosts (their workspaces are destroyed at their exit) and the hub."""
        ends = [h.shutdown.remote() for i, h in enumerate(self.hosts) if self.alive[i]]
        for ref in ends:
            try:
                ray.get(ref, timeout=120)
            except (RayActorError, ray.exceptions.GetTimeoutError):
                pass  # ended (exit_actor) or unreachable
        if self.hub is not None:
            ray.kill(self.hub, no_restart=True)


def _bind(policy_factory: Callable[[str, int], Any], task_id: str) -> Callable[[int], Any]:
    return lambda g: policy_factory(task_id, g)


class Slot:
    """One env living on a node's host (made by `Cluster.make`): reset/step/close as a gym env, and `fork`.

    `fork(n, node)` onto the slot's own node is a local fork (live clones of its workspace). Onto another node
    it *replays* (restores that node's task snapshot and runs the slot's actions, which are hits there when
    records are shared, the workspace catching up behind them) or *ships* (bunshin_gym.shipping: the live state
    and its task snapshot, packed by the slot's host and moved by Ray; the clone holds the exact state, which a
    replay of a timing-dependent app may not reach, and the node holds the task snapshot after), whichever
    costs less by what was measured: a node holding the task snapshot replays (a tenth of a second in
    `bench scale`'s `fork_across_nodes`); one without it would first build the task snapshot, which took the
    slot's node `task_build_s`, so it ships unless this cluster's earlier ships of the env took longer. A state
    that cannot ship (memfile backend) is replayed. `via` forces one way; each new slot's `.via` says which
    ran ("local", "ship" or "replay") and `.fork_timings` what it cost.
    """

    def __init__(self, cluster: Cluster, node: int, slot_id: str) -> None:
        self.cluster, self.node, self.id = cluster, node, slot_id
        self.via: str | None = None  #: how a fork made it: "local", "ship" or "replay" (None: made by `make`)
        self.fork_timings: dict = {}

    @property
    def _host(self):
        return self.cluster.hosts[self.node]

    def reset(self, seed: int | None = None, options: dict | None = None):
        return ray.get(self._host.reset.remote(self.id, seed, options))

    def step(self, action: Any):
        return ray.get(self._host.step.remote(self.id, action))

    def fork(self, n: int = 1, node: int | None = None, via: str = "auto") -> list[Slot]:
        if via not in ("auto", "ship", "replay"):
            raise ValueError(f"via={via!r}: expected 'auto', 'ship' or 'replay'")
        node = self.node if node is None else node
        new = [Slot(self.cluster, node, uuid.uuid4().hex[:12]) for _ in range(n)]
        target = self.cluster.hosts[node]
        timings: dict = {}
        if node == self.node:
            via = "local"
            ray.get(self._host.fork.remote(self.id, [s.id for s in new]))
        else:
            where = ray.get(self._host.position.remote(self.id))
            if via == "auto":
                shipped_s = self.cluster.ship_s.get(where["env_id"])
                via = "replay" if ray.get(target.holds_task.remote(where["env_id"], where["task_id"])) or (
                    shipped_s is not None and shipped_s >= where["task_build_s"]) else "ship"
            if via == "ship":
                try:  # the parcel's ref goes host to host: Ray moves the bytes, the driver never holds them
                    t0 = time.perf_counter()
                    timings = ray.get(target.receive.remote(new[0].id, self._host.ship.remote(self.id)))
                    took = time.perf_counter() - t0
                    prev = self.cluster.ship_s.get(where["env_id"])
                    self.cluster.ship_s[where["env_id"]] = took if prev is None else 0.5 * prev + 0.5 * took
                    if n > 1:
                        ray.get(target.fork.remote(new[0].id, [s.id for s in new[1:]]))
                except ray.exceptions.RayTaskError as e:
                    if not isinstance(e.cause, (SnapshotError, RestoreFailed)):
                        raise
                    log.warning("shipping slot %s to node %d failed, replaying there: %s", self.id, node, e.cause)
                    via = "replay"
            if via == "replay":
                ray.get([target.replay.remote(s.id, where) for s in new])
        for s in new:
            s.via, s.fork_timings = via, timings
        return new

    def close(self) -> None:
        ray.get(self._host.close_slot.remote(self.id))
