"""BunshinRL Fig 8: how many rollouts are still running over time, for Base, Spec and Full.

Ours: the shared OSWorld training run (`training.py`: the same drifting trajectories and think times replayed in
each configuration, at most `concurrency` workspaces alive), all its epochs back to back. The paper's numbers
are one epoch's wall (Base 20.8, Spec 19.2, Full 17.0 min); ours are compared as speed-ups over Base, per
epoch and over the run.
"""
from __future__ import annotations

from pathlib import Path

from .training import LABELS, TrainingArgs as Args, bars_vs_paper, training_run, training_scale

PAPER = {"base_min": 20.8, "spec_min": 19.2, "full_min": 17.0, "spec_speedup": round(20.8 / 19.2, 2),
         "full_speedup": round(20.8 / 17.0, 2), "source": "BunshinRL §5.3, Figure 8 (one OSWorld epoch)"}
__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]


def scale(a: Args) -> str:
    return training_scale(a)


def run(a: Args, out: Path) -> dict:
    cfgs = training_run(a, out)["configs"]
    base_walls = [i["wall_s"] for i in cfgs["base"]["iterations"]]
    ours = {"wall_s": {}, "speedup": {}, "speedup_per_epoch": {}, "running_over_time": {}, "epoch_ends_s": {}}
    for name, c in cfgs.items():
        walls = [i["wall_s"] for i in c["iterations"]]
        ours["wall_s"][name] = c["wall_s"]
        ours["speedup"][name] = round(cfgs["base"]["wall_s"] / c["wall_s"], 3)
        ours["speedup_per_epoch"][name] = [round(b / w, 3) for b, w in zip(base_walls, walls)]
        ours["running_over_time"][name] = c["running_over_time"]
        ours["epoch_ends_s"][name] = [round(sum(walls[:i + 1]), 1) for i in range(len(walls))]
    return ours


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("Spec speed-up over Base (×, wall)", paper["spec_speedup"], ours["speedup"]["spec"]),
            ("Full speed-up over Base (×, wall)", paper["full_speedup"], ours["speedup"]["cache_spec"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [2.2, 1]})
    for name, pts in ours["running_over_time"].items():
        ax.step([p[0] / 60 for p in pts], [p[1] for p in pts], where="post",
                label=f"{LABELS[name]} ({ours['wall_s'][name] / 60:.1f} min)")
    for t in ours["epoch_ends_s"]["base"][:-1]:
        ax.axvline(t / 60, color="0.8", lw=0.8, ls=":")
    ax.set(xlabel="time (min; dotted: Base's epoch ends)", ylabel="rollouts running",
           title="Rollouts still running over the training run")
    ax.legend(fontsize=8)
    bars_vs_paper(bx, {n: ours["speedup"][n] for n in ("spec", "cache_spec") if n in ours["speedup"]},
                  {"spec": paper["spec_speedup"], "cache_spec": paper["full_speedup"]},
                  "paper (one OSWorld epoch)", 1.0, "speed-up over Base (wall)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
