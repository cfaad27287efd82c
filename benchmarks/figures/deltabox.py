"""DeltaBox's headline: checkpoint and rollback latency of a live sandbox, ours vs CRIU dump/restore.

The sandbox is a live BunshinWebArena-v0 env after reset (Chromium, the shop's server and its database).
- checkpoint: `Workspace.snapshot()`, timed as the CRIU dump during which the workspace is seized (ours is a
  CRIU dump that leaves the workspace running; there is no incremental dump, so ours and CRIU's coincide).
- rollback, ours: a standby clone (restored and frozen beforehand, DeltaBox's "template") thawed until it
  answers its first command.
- rollback, CRIU: a plain restore (`private` backend) until the clone answers.
Each is the median of `repeats` runs.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from benchmarks.fork_bench import standby_takes_s
from forkcore.backends import get_backend

PAPER = {"deltabox_checkpoint_ms": 10.83, "deltabox_rollback_ms": 1.86, "v1_checkpoint_ms": 14.0,
         "v1_rollback_ms": 5.0, "source": "DeltaBox v2 (v1 abstract: 14 ms checkpoint, 5 ms rollback); "
                                          "SWE-bench sandboxes"}


@dataclass
class Args:
    task_id: str = "0"
    """WebArena task whose live env is checkpointed and rolled back"""
    repeats: int = 10
    """runs of each operation (the median is reported)"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(repeats=3)


def scale(a: Args) -> str:
    return f"one WebArena env (task {a.task_id}: Chromium + shop + database), {a.repeats} runs each"


def _first_answer_ms(t0: float, ws) -> float:
    ws.call("ping")
    return (time.monotonic() - t0) * 1e3


def run(a: Args) -> dict:
    best = get_backend("auto").name
    env = gym.make("BunshinWebArena-v0", task_id=a.task_id, cache=False)
    checkpoint, restore = [], []
    try:
        env.reset(seed=0)
        ws = env.unwrapped.live_workspace()
        with tqdm(total=2 * a.repeats + 1, desc="deltabox", unit="op") as bar:
            for _ in range(a.repeats):
                snap = ws.snapshot()
                checkpoint.append(snap.dump_s * 1e3)
                snap.release()
                bar.update(1)
            snap = ws.snapshot()
            try:
                standby = [s * 1e3 for s in standby_takes_s(snap, best, a.repeats, method="ping")]
                bar.update(1)
                for _ in range(a.repeats):
                    t0 = time.monotonic()
                    clone = snap.fork(1, backend="private")[0]
                    restore.append(_first_answer_ms(t0, clone))
                    clone.destroy()
                    bar.update(1)
            finally:
                snap.release()
    finally:
        env.close()
    ours = {"checkpoint_ms_p50": round(statistics.median(checkpoint), 1),
            "rollback_ms_p50": round(statistics.median(standby), 1),
            "criu_restore_ms_p50": round(statistics.median(restore), 1),
            "rollback_backend": best, "checkpoint_ms": [round(x, 1) for x in checkpoint],
            "rollback_ms": [round(x, 1) for x in standby], "criu_restore_ms": [round(x, 1) for x in restore]}
    ours["rollback_speedup_vs_criu"] = round(ours["criu_restore_ms_p50"] / ours["rollback_ms_p50"], 1)
    return ours


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    bars = [("checkpoint\nours = CRIU dump", ours["checkpoint_ms_p50"], "tab:orange"),
            ("rollback\nours (standby thaw)", ours["rollback_ms_p50"], "tab:orange"),
            ("rollback\nCRIU restore", ours["criu_restore_ms_p50"], "tab:blue")]
    ax.bar(range(3), [b[1] for b in bars], color=[b[2] for b in bars])
    for i, (_, v, _) in enumerate(bars):
        ax.annotate(f"{v:.1f} ms", (i, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(3), [b[0] for b in bars], fontsize=8)
    ax.axhline(paper["deltabox_checkpoint_ms"], ls="--", color="tab:red",
               label=f"paper: DeltaBox checkpoint {paper['deltabox_checkpoint_ms']} ms")
    ax.axhline(paper["deltabox_rollback_ms"], ls=":", color="tab:red",
               label=f"paper: DeltaBox rollback {paper['deltabox_rollback_ms']} ms")
    ax.set_yscale("log")
    ax.set_ylabel("latency, p50 (ms, log)")
    ax.set_title(f"DeltaBox: rollback {ours['rollback_speedup_vs_criu']}x faster than a CRIU restore here",
                 fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
