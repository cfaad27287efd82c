"""DeltaBox: per-event checkpoint and rollback blocking times over replayed trajectories, ours vs CRIU.

Each task's oracle trajectory is replayed in a live BunshinWebArena-v0 env (Chromium, the shop's server and
its database); after every step (an event) the live workspace is checkpointed and rolled back:
- checkpoint: `Workspace.snapshot()`. Its blocking time is how long the source's process tree stood frozen,
  as CRIU measured it (`Snapshot.frozen_s`, from CRIU's stats); the dump's wall is recorded beside it. Ours is
  a CRIU dump that leaves the workspace running (no incremental dump), so ours and CRIU's coincide.
- rollback, ours: a standby clone of that checkpoint (restored and frozen beforehand, DeltaBox's "template")
  thawed, from the take until it answers its first command.
- rollback, CRIU: a plain restore (`private` backend), from the call until the clone answers.
The figure is the CDF of each over all events.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from benchmarks.epoch_bench import pick_tasks
from benchmarks.fork_bench import standby_takes_s
from bunshin_gym import adapter_for
from forkcore.backends import get_backend

PAPER = {"deltabox_checkpoint_ms": 10.83, "deltabox_rollback_ms": 1.86, "v1_checkpoint_ms": 14.0,
         "v1_rollback_ms": 5.0, "source": "DeltaBox v2 (v1 abstract: 14 ms checkpoint, 5 ms rollback); "
                                          "SWE-bench sandboxes"}
ENV = "BunshinWebArena-v0"


@dataclass
class Args:
    tasks: int = 8
    """WebArena tasks whose oracle trajectories are replayed (spread over the task list)"""
    max_events: int = 8
    """most events (steps) per task"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(tasks=1, max_events=3)


def scale(a: Args) -> str:
    return f"{a.tasks} WebArena oracle trajectories (Chromium + shop + database), ≤{a.max_events} events each"


def _event(ws, best: str) -> dict:
    snap = ws.snapshot()
    try:
        rollback_s = standby_takes_s(snap, best, 1, method="ping")[0]
        t0 = time.monotonic()
        clone = snap.fork(1, backend="private")[0]
        try:
            clone.call("ping")
            restore_s = time.monotonic() - t0
        finally:
            clone.destroy()
        return {"checkpoint_ms": snap.frozen_s * 1e3, "dump_ms": snap.dump_s * 1e3, "rollback_ms": rollback_s * 1e3,
                "criu_restore_ms": restore_s * 1e3}
    finally:
        snap.release()


def run(a: Args, out: Path) -> dict:
    best = get_backend("auto").name
    adapter = adapter_for(ENV)
    tasks = pick_tasks(adapter, a.tasks)
    events = []
    with tqdm(total=len(tasks) * a.max_events, desc="deltabox events", unit="event") as bar:
        for task in tasks:
            actions = adapter.oracle_actions(adapter.load_task(task))[: a.max_events]
            env = gym.make(ENV, task_id=task, cache=False)
            try:
                env.reset(seed=0)
                for action in actions:
                    env.step(action)
                    events.append({"task": task, **_event(env.unwrapped.live_workspace(), best)})
                    bar.update(1)
            finally:
                env.close()
    series = {k: [round(e[k], 2) for e in events] for k in ("checkpoint_ms", "dump_ms", "rollback_ms",
                                                              "criu_restore_ms")}
    ours = {f"{k}_p50": round(statistics.median(v), 1) for k, v in series.items()}
    ours.update(series, events=len(events), tasks=tasks, rollback_backend=best,
                rollback_speedup_vs_criu=round(ours["criu_restore_ms_p50"] / ours["rollback_ms_p50"], 1))
    return ours


def _cdf(ax, values, **kw):
    xs = sorted(values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", **kw)


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("checkpoint blocking time p50 (ms)", paper["deltabox_checkpoint_ms"], ours["checkpoint_ms_p50"]),
            ("rollback blocking time p50 (ms)", paper["deltabox_rollback_ms"], ours["rollback_ms_p50"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    _cdf(ax, ours["checkpoint_ms"], color="tab:orange",
         label=f"ours = CRIU dump: tree frozen (p50 {ours['checkpoint_ms_p50']} ms)")
    _cdf(ax, ours["dump_ms"], color="tab:blue", ls="--", label=f"CRIU dump wall (p50 {ours['dump_ms_p50']} ms)")
    ax.axvline(paper["deltabox_checkpoint_ms"], ls=":", color="tab:red",
               label=f"paper: DeltaBox {paper['deltabox_checkpoint_ms']} ms")
    ax.set(xscale="log", xlabel="checkpoint blocking time (ms, log)", ylabel="share of events",
           title=f"Checkpoint ({ours['events']} events)")
    ax.legend(fontsize=7)
    _cdf(bx, ours["rollback_ms"], color="tab:orange",
         label=f"ours: standby thaw, {ours['rollback_backend']} (p50 {ours['rollback_ms_p50']} ms)")
    _cdf(bx, ours["criu_restore_ms"], color="tab:blue",
         label=f"CRIU restore (p50 {ours['criu_restore_ms_p50']} ms)")
    bx.axvline(paper["deltabox_rollback_ms"], ls=":", color="tab:red",
               label=f"paper: DeltaBox {paper['deltabox_rollback_ms']} ms")
    bx.set(xscale="log", xlabel="rollback blocking time (ms, log)",
           title=f"Rollback: ours {ours['rollback_speedup_vs_criu']}× faster than a CRIU restore")
    bx.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
