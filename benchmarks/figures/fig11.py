"""BunshinRL Fig 11: the average rollout reward per epoch is the same with and without reuse.

Ours: the shared OSWorld training run (`training.py`): each configuration replays the same sampled
trajectories, so the cache and speculation may change time, never a reward. `identical` says whether every
rollout's reward (not only the means) matched across Base, Spec and Full.
"""
from __future__ import annotations

from pathlib import Path

from .training import LABELS, TrainingArgs as Args, training_run, training_scale

PAPER = {"identical_across_configs": True, "source": "BunshinRL §5.3, Figure 11 (OSWorld)"}
__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]


def scale(a: Args) -> str:
    return training_scale(a)


def run(a: Args, out: Path) -> dict:
    cfgs = training_run(a, out)["configs"]
    rewards = [c["rewards"] for c in cfgs.values()]
    differing = sum(len(set(per_rollout)) > 1 for per_rollout in zip(*rewards))
    return {"reward_per_epoch": {n: c["reward_per_iteration"] for n, c in cfgs.items()},
            "identical": differing == 0, "rollouts_with_differing_rewards": differing,
            "rollouts": len(rewards[0])}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("rollouts whose reward differs across configurations", 0, ours["rollouts_with_differing_rewards"])]


def plot(r: dict, plt):
    ours = r["ours"]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for (name, rewards), marker, size in zip(ours["reward_per_epoch"].items(), "osD", (9, 6, 3)):
        ax.plot(range(1, len(rewards) + 1), rewards, marker=marker, ms=size, label=f"ours: {LABELS[name]}")
    verdict = "identical" if ours["identical"] else f"{ours['rollouts_with_differing_rewards']} rollouts differ"
    ax.set(xlabel="epoch", ylabel="average reward", ylim=(-0.05, 1.05),
           title=f"Reward per epoch: {verdict} over {ours['rollouts']} rollouts (paper: identical)")
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
