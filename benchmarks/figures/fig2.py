"""BunshinRL Fig 2: memory as the number of concurrent rollouts grows, CRIU-private vs ours.

At each count n, one GRPO group of n samples of one task is live at once: each sample's env resets (its
workspace restored from the task's snapshot, no prefix cache) and steps through its trajectory (the oracle with
detours, as in the epoch benchmark), and with all n still open, memory settles (KSM merges asynchronously:
until ksmd has scanned everything twice and pages_sharing holds still) and the summed PSS of the n
workspaces is taken (immune to other programs on a shared machine; host memory above the start is recorded
beside it). CRIU-private is the `private` backend
(each restore a private copy); ours is this machine's best backend (`auto`). Counts that would not fit in 85%
of the memory available (projected from the previous count) are skipped and listed: "as many as fit".
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from benchmarks.fork_bench import settle
from bunshin_gym import adapter_for
from bunshin_gym.rollout import StochasticTracePolicy
from forkcore.accounting import host_memory_used, meminfo
from forkcore.backends import get_backend

PAPER = {"counts": [8, 16, 32, 64, 128, 256], "criu_over_ours_at_256": 1.8,
         "source": "BunshinRL §2.3, Figure 2 (peak CPU memory, BunshinRL vs CRIU)"}


@dataclass
class Args:
    env: str = "BunshinWebArena-v0"
    """env id (a WebArena env: Chromium + the shop and its database)"""
    task_id: str = "0"
    """task every rollout runs"""
    counts: tuple[int, ...] = (8, 16, 32)
    """concurrent rollouts measured (a count that would not fit is skipped)"""
    perturb_p: float = 0.3
    """probability of a detour instead of the oracle's action"""
    settle_max_s: float = 180.0
    """longest wait for memory to settle at each count (KSM merging)"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(counts=(2, 4), settle_max_s=20.0)


def scale(a: Args) -> str:
    return f"{'/'.join(map(str, a.counts))} concurrent rollouts of {a.env} task {a.task_id} (paper: 8-256)"


def _live_group(n: int, backend: str, a: Args, oracle: list[str], bar) -> dict:
    start = host_memory_used()
    envs = []
    try:
        for g in range(n):
            env = gym.make(a.env, task_id=a.task_id, cache=False, backend=backend)
            envs.append(env)
            obs, _ = env.reset(seed=g)
            policy, rng, done = StochasticTracePolicy(oracle, a.perturb_p), random.Random(g), False
            while not done:
                obs, _, term, trunc, _ = env.step(policy.act(obs, env, rng))
                done = term or trunc
            bar.update(1)
        settle(backend, a.settle_max_s)
        pss = sum(e.unwrapped.live_workspace().memory().pss for e in envs)
        return {"rollouts": n, "pss_gb": round(pss / 2**30, 3),
                "host_gb_above_start": round((host_memory_used() - start) / 2**30, 3)}
    finally:
        for env in envs:
            env.close()


def run(a: Args, out: Path) -> dict:
    best = get_backend("auto").name
    adapter = adapter_for(a.env)
    oracle = adapter.oracle_actions(adapter.load_task(a.task_id))
    backends = list(dict.fromkeys(("private", best)))
    curves, skipped = {}, {}
    with tqdm(total=len(backends) * sum(a.counts), desc="fig2 rollouts", unit="rollout") as bar:
        for backend in backends:
            rows = curves[backend] = []
            for n in a.counts:
                available_gb = meminfo()["MemAvailable"] / 2**30
                if rows and rows[-1]["pss_gb"] / rows[-1]["rollouts"] * n > 0.85 * available_gb:
                    skipped.setdefault(backend, []).append(n)
                    bar.update(n)
                    continue
                rows.append(_live_group(n, backend, a, oracle, bar))
    common = [r["rollouts"] for r in curves["private"] if any(o["rollouts"] == r["rollouts"] for o in curves[best])]
    at = {b: next(r["pss_gb"] for r in curves[b] if r["rollouts"] == max(common)) for b in curves}
    return {"criu_backend": "private", "ours_backend": best, "curves": curves, "skipped_did_not_fit": skipped,
            "max_rollouts": max(common), "criu_over_ours_at_max": round(at["private"] / at[best], 3)}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [(f"CRIU / ours at {ours['max_rollouts']} rollouts (paper: peak at 256)", paper["criu_over_ours_at_256"],
             ours["criu_over_ours_at_max"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4))
    for backend, rows in ours["curves"].items():
        label = "CRIU-private" if backend == "private" else f"ours: {backend}"
        ax.plot([x["rollouts"] for x in rows], [x["pss_gb"] for x in rows], marker="o", label=label)
    ax.set(xlabel="concurrent rollouts", ylabel="memory of the live rollouts (GB, PSS)", title="Memory (measured)")
    ax.legend(fontsize=8)
    best = {x["rollouts"]: x["pss_gb"] for x in ours["curves"][ours["ours_backend"]]}
    ratio = [(x["rollouts"], x["pss_gb"] / best[x["rollouts"]]) for x in ours["curves"]["private"]
             if best.get(x["rollouts"])]
    bx.plot([n for n, _ in ratio], [q for _, q in ratio], marker="o", color="tab:green", label="ours")
    bx.scatter([256], [paper["criu_over_ours_at_256"]], marker="x", s=70, color="k",
               label=f"paper: {paper['criu_over_ours_at_256']}× at 256")
    bx.axhline(1.0, color="0.5", lw=0.8, ls="--")
    bx.set_xscale("log", base=2)
    bx.set(xlabel="concurrent rollouts", ylabel="CRIU / ours", title="CRIU over ours, vs the paper")
    bx.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
