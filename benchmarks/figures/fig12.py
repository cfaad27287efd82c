"""BunshinRL Fig 12: total memory of one source OSWorld environment and its forks, CRIU-private vs ours.

The source is a live BunshinOSWorld-v0 env after reset (Xvfb, the desktop session, the executor, and
LibreOffice where the task opens it). It is snapshotted once, then forked one clone at a time; at each count
in `forks` memory settles (KSM: pages_sharing stable) and the summed PSS of source + clones is taken (immune
to other programs on a shared machine), beside host memory in use above the start. CRIU-private is the
`private` backend (each clone a private copy); ours is the best backend this machine has (`auto`).
No peak: each point is one sample at its fork count, after memory settled, with every clone alive. The private
curve runs with KSM off (run=2 unmerges everything, then 0) and its clones unmergeable; "ksm" per backend records
pages_sharing at each point (pages_sharing_max 0: the private curve shared nothing through KSM) and the settings
put back after the curve (ksm_restored_to); "run_order" the order the curves ran in.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from benchmarks.fork_bench import ksm_leg, settle
from forkcore.accounting import host_memory_used
from forkcore.backends import get_backend

PAPER = {"forks": 16, "ours_gb": 10.0, "criu_gb": 17.8, "agentenv_gb": 12.3, "criu_gb_per_fork": 1.0,
         "ours_gb_per_fork": 0.5, "ours_vs_criu_at_16": round(10.0 / 17.8, 3),
         "source": "BunshinRL §5.4, Figure 12 (OSWorld VM environments)"}


@dataclass
class Args:
    task_id: str = "edit-append-line"
    """OSWorld task whose env is forked (edit-append-line opens LibreOffice Writer)"""
    forks: tuple[int, ...] = (2, 4, 8, 16)
    """fork counts at which memory is measured (clones are added one at a time)"""
    settle_max_s: float = 60.0
    """longest wait for memory to settle at each count (KSM merging)"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(forks=(2, 4), settle_max_s=15.0)


def scale(a: Args) -> str:
    return f"one OSWorld env ({a.task_id}) forked up to {max(a.forks)} times (paper: 16 forks of an OSWorld VM)"


def _curve(snap, source_ws, backend: str, a: Args, bar, leg) -> list[dict]:
    start = host_memory_used()
    clones, rows = [], []
    try:
        while len(clones) < max(a.forks):
            clones += snap.fork(1, backend=backend)
            bar.update(1)
            if len(clones) in a.forks:
                settle(backend, a.settle_max_s)
                leg.sample()
                pss = source_ws.memory().pss + sum(c.memory().pss for c in clones)
                rows.append({"forks": len(clones), "pss_gb": round(pss / 2**30, 3),
                             "host_gb_above_start": round((host_memory_used() - start) / 2**30, 3)})
    finally:
        for c in clones:
            c.destroy()
    return rows


def run(a: Args, out: Path) -> dict:
    best = get_backend("auto").name
    env = gym.make("BunshinOSWorld-v0", task_id=a.task_id, cache=False)
    try:
        env.reset(seed=0)
        ws = env.unwrapped.live_workspace()
        source_gb = round(ws.memory().pss / 2**30, 3)
        snap = ws.snapshot()
        try:
            backends = ["private"] + ([best] if best != "private" else [])
            with tqdm(total=len(backends) * max(a.forks), desc="fig12 forks", unit="fork") as bar:
                curves, ksm = {}, {}
                for b in backends:
                    with ksm_leg(b) as leg:
                        curves[b] = _curve(snap, ws, b, a, bar, leg)
                    ksm[b] = leg.record()
        finally:
            snap.release()
    finally:
        env.close()
    last = max(a.forks)
    at = {b: next(r["pss_gb"] for r in rows if r["forks"] == last) for b, rows in curves.items()}
    per_fork = {b: round((rows[-1]["pss_gb"] - rows[0]["pss_gb"]) / max(1, rows[-1]["forks"] - rows[0]["forks"]), 3)
                for b, rows in curves.items()}
    return {"source_gb": source_gb, "criu_backend": "private", "ours_backend": best, "curves": curves,
            "gb_per_fork": per_fork, "ours_vs_criu_at_max": round(at[best] / at["private"], 3),
            "max_forks": last, "ksm": ksm, "run_order": backends}


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    return [(f"ours / CRIU at {ours['max_forks']} forks (paper: 16)", paper["ours_vs_criu_at_16"],
             ours["ours_vs_criu_at_max"]),
            ("CRIU GB per fork", paper["criu_gb_per_fork"], ours["gb_per_fork"]["private"]),
            ("ours GB per fork", paper["ours_gb_per_fork"], ours["gb_per_fork"][ours["ours_backend"]])]


def plot(r: dict, plt):
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    ours, paper = r["ours"], r["paper"]
    for backend, rows in ours["curves"].items():
        label = "CRIU-private (measured)" if backend == "private" else f"ours: {backend} (measured)"
        ax.plot([x["forks"] for x in rows], [x["pss_gb"] for x in rows], marker="o", label=label)
    for key, label, color in (("criu_gb", "paper: CRIU", "tab:blue"), ("ours_gb", "paper: BunshinRL", "tab:orange"),
                              ("agentenv_gb", "paper: AgentENV (not available here)", "tab:gray")):
        ax.scatter([paper["forks"]], [paper[key]], marker="x", s=70, color=color, label=f"{label} {paper[key]} GB")
    ax.set_xlabel("forks")
    ax.set_ylabel("total memory of source + forks (GB, PSS)")
    ax.set_title(f"Fig 12: ours/CRIU at {ours['max_forks']} forks = {ours['ours_vs_criu_at_max']} "
                 f"(paper at 16: {paper['ours_vs_criu_at_16']})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
