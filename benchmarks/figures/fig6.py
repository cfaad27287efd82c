"""BunshinRL Fig 6: the memory of all environments over one OSWorld epoch, CRIU-private vs ours.

One epoch (T tasks × G samples, at most `concurrency` workspaces alive, the paper's Full configuration:
prefix cache + speculation) replayed twice with the same trajectories: once with every workspace a private
CRIU restore (`private`, the paper's CRIU) and once with this machine's best backend (`auto`). The curves are host
memory in use above the epoch's start (MemTotal - MemAvailable, every program), sampled every 0.5 s. The peaks
(peak_mb, peak_reduction_vs_criu_pct) are the accounted peak: the largest growth, over the same 0.5 s samples, of
the memory processes and their kernel objects hold (meminfo's AnonPages + Shmem + SUnreclaim + PageTables +
KernelStack; epoch_bench's peak_memory_accounted_mb), so memory the host frees slowly after earlier work does not
count; peak_host_mb keeps the host-used peak. The private epoch runs with KSM off and its clones unmergeable
("ksm" per backend: pages_sharing_max 0 proves nothing was merged; epoch_bench). AgentENV (Firecracker microVMs) is not available
here: its numbers are the paper's only.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkcore.backends import get_backend

from .training import TrainingArgs, training_run

PAPER = {"peak_reduction_vs_criu_pct": 30, "peak_reduction_vs_agentenv_pct": 26, "criu_epoch_longer_x": 1.3,
         "source": "BunshinRL §5.2, Figure 6 (one OSWorld epoch)"}


@dataclass
class Args:
    env: str = "BunshinOSWorld-v0"
    """env id"""
    tasks: int = 4
    """tasks T in the epoch"""
    group: int = 4
    """GRPO group size G"""
    concurrency: int = 8
    """most workspaces alive at once"""
    think_median_s: float = 2.0
    """think-time model median (s per action)"""
    perturb_p: float = 0.3
    """probability of a detour instead of the oracle's action"""
    config: str = "cache_spec"
    """epoch_bench configuration replayed with each backend (cache_spec: the paper's Full)"""
    settle_max_s: float = 45.0
    """most seconds each configuration waits for host memory to stop falling (epoch_bench.Args.settle_max_s)"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(tasks=1, group=4, concurrency=4, settle_max_s=5.0)


def scale(a: Args) -> str:
    return f"one epoch of {a.tasks} tasks × G={a.group} on {a.env}, ≤{a.concurrency} workspaces, config {a.config}"


def run(a: Args, out: Path) -> dict:
    best = get_backend("auto").name
    epoch = TrainingArgs(env=a.env, tasks=a.tasks, group=a.group, epochs=1, perturb_p=a.perturb_p, drift_step=0.0,
                         novel_from=0, think_median_s=a.think_median_s, concurrency=a.concurrency,
                         settle_max_s=a.settle_max_s)
    runs = {b: training_run(epoch, out, configs=(a.config,), backend=b)["configs"][a.config]
            for b in dict.fromkeys(("private", best))}
    peak = {b: r["peak_memory_accounted_mb"] for b, r in runs.items()}
    return {"criu_backend": "private", "ours_backend": best, "peak_mb": peak,
            "peak_host_mb": {b: r["peak_memory_mb"] for b, r in runs.items()},
            "ksm": {b: r.get("ksm") for b, r in runs.items()},
            "peak_reduction_vs_criu_pct": round(100 * (1 - peak[best] / peak["private"]), 1),
            "wall_s": {b: r["wall_s"] for b, r in runs.items()},
            "criu_epoch_longer_x": round(runs["private"]["wall_s"] / runs[best]["wall_s"], 3),
            "memory_over_time_mb": {b: r["memory_over_time_mb"] for b, r in runs.items()}}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("peak memory reduction vs CRIU (%)", paper["peak_reduction_vs_criu_pct"],
             ours["peak_reduction_vs_criu_pct"]),
            ("CRIU's epoch / ours (×)", paper["criu_epoch_longer_x"], ours["criu_epoch_longer_x"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [2.2, 1]})
    for backend, pts in ours["memory_over_time_mb"].items():
        label = "CRIU-private" if backend == "private" else f"ours: {backend}"
        ax.plot([p[0] / 60 for p in pts], [p[1] / 1024 for p in pts],
                label=f"{label} (peak {ours['peak_mb'][backend] / 1024:.2f} GB, {ours['wall_s'][backend]:.0f} s)")
    ax.set(xlabel="time since the epoch started (min)", ylabel="host memory above start (GB)",
           title="Memory of all environments over one epoch")
    ax.legend(fontsize=8)
    bars = [("vs CRIU", ours["peak_reduction_vs_criu_pct"], paper.get("peak_reduction_vs_criu_pct")),
            ("vs AgentENV\n(paper only: not here)", None, paper.get("peak_reduction_vs_agentenv_pct"))]
    for i, (_, mine, theirs) in enumerate(bars):
        if mine is not None:
            bx.bar(i, mine, color="tab:green", label="ours" if i == 0 else None)
        if theirs is not None:
            bx.scatter(i, theirs, marker="_", s=900, color="k", zorder=3, label="paper" if i == 0 else None)
            bx.annotate(f"paper {theirs}%", (i, theirs), textcoords="offset points", xytext=(0, 5), ha="center",
                        fontsize=8)
    bx.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    bx.axhline(0, color="0.5", lw=0.8)
    bx.set(ylabel="peak memory reduction (%)", title="vs the paper")
    bx.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
