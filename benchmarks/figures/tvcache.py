"""TVCache: the stateful tool-value cache's hit rate per training step, and tool-call time with vs without it.

Ours: the OSWorld training run Fig 8-11 share (`training.py`: drifting trajectories, the same in every
configuration; OSWorld because its tools — LibreOffice, the desktop — take seconds, as TVCache's do), without
reuse (`base`, kept from Fig 8's run) and with the tool-prefix cache alone (`cache`: a hit needs the whole
action history to match a recorded one, TVCache's longest-prefix rule). Tool-call time is one `env.step()` as
the agent sees it: a hit answers from the cache, a miss restores the nearest cached state and executes.
TVCache's workloads (terminal-bench, SkyRL-SQL, EgoSchema) are not here: the paper's numbers are its best
over those.
"""
from __future__ import annotations

from pathlib import Path

from .training import TrainingArgs as Args, training_run, training_scale

PAPER = {"hit_rate_max": 0.70, "median_tool_time_speedup_max": 6.9, "median_tool_s_without": 18.68,
         "median_tool_s_with": 2.70, "source": "TVCache abstract and Table 2 (best workload: Qwen3-4B-Instruct)"}

__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]

def scale(a: Args) -> str:
    return training_scale(a).split(" (paper")[0] + " (paper: terminal, SQL and video workloads)"


def run(a: Args, out: Path) -> dict:
    cfgs = training_run(a, out, configs=("base", "cache"))
    base, cache = cfgs["configs"]["base"], cfgs["configs"]["cache"]
    return {"hit_rate_per_step": cache["hit_rate_per_iteration"], "hit_rate_max": max(cache["hit_rate_per_iteration"]),
            "median_tool_s": {"without": base["step_exec_s_p50"], "with": cache["step_exec_s_p50"]},
            "median_tool_s_per_step": {"without": base["step_exec_s_p50_per_iteration"],
                                       "with": cache["step_exec_s_p50_per_iteration"]},
            "median_tool_time_speedup": round(base["step_exec_s_p50"] / max(cache["step_exec_s_p50"], 1e-6), 2),
            "reward_per_step": {"without": base["reward_per_iteration"], "with": cache["reward_per_iteration"]}}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [("highest hit rate over training steps", paper["hit_rate_max"], ours["hit_rate_max"]),
            ("median tool-call time, without / with cache (×)", paper["median_tool_time_speedup_max"],
             ours["median_tool_time_speedup"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4))
    hits = ours["hit_rate_per_step"]
    steps = range(1, len(hits) + 1)
    ax.plot(steps, hits, marker="o", color="tab:green", label="ours: cache hit rate")
    ax.axhline(paper["hit_rate_max"], color="k", ls="--", lw=1, label=f"paper: up to {paper['hit_rate_max']:.0%}")
    ax.set(xlabel="training step", ylabel="hit rate", ylim=(0, 1), title="Cache hit rate per training step")
    ax.set_xticks(list(steps))
    ax.legend(fontsize=8)
    for key, color in (("without", "gray"), ("with", "tab:green")):
        bx.plot(steps, ours["median_tool_s_per_step"][key], marker="o", color=color, label=f"ours: {key} cache")
    bx.set_yscale("log")
    bx.set(xlabel="training step", ylabel="median tool-call time (s, log)",
           title=f"ours {ours['median_tool_time_speedup']}× lower "
                 f"(paper: up to {paper['median_tool_time_speedup_max']}×)")
    bx.plot([], [], " ", label=f"paper: {paper['median_tool_s_without']} s → {paper['median_tool_s_with']} s")
    bx.set_xticks(list(steps))
    bx.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
