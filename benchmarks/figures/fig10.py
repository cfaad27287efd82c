"""BunshinRL Fig 10: the share of tool calls served from a cached snapshot or a speculative run, per epoch.

Ours: the shared OSWorld training run (`training.py`), whose policy drifts as a training policy does: it
detours less each epoch (`drift_step`) and makes calls no earlier epoch made from epoch `novel_from` on. The
paper: Full 40% in epoch 1, 65% by epoch 3, a drop in epoch 5; Spec 41-53%; Full 10-13 points above Spec from
epoch 2.
"""
from __future__ import annotations

from pathlib import Path

from .training import LABELS, TrainingArgs as Args, training_run, training_scale

PAPER = {"full_epoch1": 0.40, "full_epoch3": 0.65, "spec_min": 0.41, "spec_max": 0.53,
         "full_minus_spec_points_from_epoch2": [10, 13], "drop_in_epoch": 5,
         "source": "BunshinRL §5.3, Figure 10 (OSWorld)"}
__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]


def scale(a: Args) -> str:
    return (f"{training_scale(a)}; drift: detour p {a.perturb_p} - {a.drift_step}/epoch, new calls from epoch "
            f"{a.novel_from}")


def run(a: Args, out: Path) -> dict:
    cfgs = training_run(a, out)["configs"]
    hits = {n: cfgs[n]["hit_rate_per_iteration"] for n in ("spec", "cache_spec")}
    return {"hit_rate_per_epoch": hits,
            "full_minus_spec_points": [round(100 * (f - s), 1) for f, s in zip(hits["cache_spec"], hits["spec"])],
            "base_hit_rate_per_epoch": cfgs["base"]["hit_rate_per_iteration"]}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    full, spec = ours["hit_rate_per_epoch"]["cache_spec"], ours["hit_rate_per_epoch"]["spec"]
    rows = [("Full hit rate, epoch 1", paper["full_epoch1"], full[0])]
    if len(full) >= 3:
        rows.append(("Full hit rate, epoch 3", paper["full_epoch3"], full[2]))
    spec_mid = round((paper["spec_min"] + paper["spec_max"]) / 2, 2)
    rows.append(("Spec hit rate, mean over epochs (paper: 41-53%)", spec_mid, round(sum(spec) / len(spec), 3)))
    return rows


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for name, rates in ours["hit_rate_per_epoch"].items():
        ax.plot(range(1, len(rates) + 1), rates, marker="o", label=f"ours: {LABELS[name]}")
    ax.scatter([1, 3], [paper["full_epoch1"], paper["full_epoch3"]], marker="x", s=70, color="tab:green",
               label="paper: Full (epoch 1, epoch 3)", zorder=3)
    ax.axhspan(paper["spec_min"], paper["spec_max"], color="tab:blue", alpha=0.12, label="paper: Spec range")
    ax.set(xlabel="epoch", ylabel="hit rate (cached or speculated)", ylim=(0, 1), title="Hit rate over training")
    ax.set_xticks(range(1, len(next(iter(ours["hit_rate_per_epoch"].values()))) + 1))
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
