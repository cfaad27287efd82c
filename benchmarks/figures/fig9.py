"""BunshinRL Fig 9: the memory cost of reuse, the working set of all environments for Base, Spec and Full.

Ours: host memory in use above the start of each configuration (every workspace, cached snapshot, standby
clone and speculative run; sampled every 0.5 s) over the shared OSWorld training run (`training.py`). The paper
has Full and Spec about 1 GiB above Base's 69 GiB peak.
"""
from __future__ import annotations

from pathlib import Path

from .training import LABELS, TrainingArgs as Args, bars_vs_paper, training_run, training_scale

PAPER = {"base_peak_gib": 69, "spec_peak_gib": 70, "full_peak_gib": 70,
         "full_over_base_pct": round(100 * (70 / 69 - 1), 1), "source": "BunshinRL §5.3, Figure 9 (one OSWorld epoch)"}
__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]


def scale(a: Args) -> str:
    return training_scale(a)


def run(a: Args, out: Path) -> dict:
    cfgs = training_run(a, out)["configs"]
    peaks = {name: c["peak_memory_mb"] for name, c in cfgs.items()}
    base = peaks["base"]  # 0 when Base never rose above its start: no percentage then
    return {"peak_mb": peaks,
            "over_base_pct": {n: round(100 * (p / base - 1), 1) if base > 0 else None for n, p in peaks.items()},
            "memory_over_time_mb": {n: c["memory_over_time_mb"] for n, c in cfgs.items()}}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("Spec peak memory over Base (%)", paper["full_over_base_pct"], ours["over_base_pct"]["spec"]),
            ("Full peak memory over Base (%)", paper["full_over_base_pct"], ours["over_base_pct"]["cache_spec"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [2.2, 1]})
    for name, pts in ours["memory_over_time_mb"].items():
        ax.plot([p[0] / 60 for p in pts], [p[1] / 1024 for p in pts],
                label=f"{LABELS[name]} (peak {ours['peak_mb'][name] / 1024:.2f} GB)")
    ax.set(xlabel="time (min)", ylabel="host memory above start (GB)", title="Working set over the training run")
    ax.legend(fontsize=8)
    bars_vs_paper(bx, {n: v or 0.0 for n, v in ours["over_base_pct"].items()},
                  {"base": 0.0, "spec": paper["full_over_base_pct"], "cache_spec": paper["full_over_base_pct"]},
                  f"paper (+1 GiB on {paper['base_peak_gib']} GiB)", 0.0, "peak memory over Base (%)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
