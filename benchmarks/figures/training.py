"""The replayed training runs several figures share (`benchmarks.epoch_bench` epochs), run once and kept.

A run is kept as OUT/runs/epoch-KEY/kept.json, KEY a hash of its epoch_bench arguments, so that Fig 8, 9, 10
and 11 (one OSWorld training run, three configurations) pay for it once, and a run that spans sessions keeps
what it finished: the configurations already in the file are not run again. Delete OUT/runs to rerun.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks import epoch_bench

#: the paper's three configurations of BunshinRL (§5.3): Base, Spec (speculation only), Full (cache + speculation)
LABELS = {"base": "Base", "cache": "Cache", "spec": "Spec", "cache_spec": "Full"}
COLORS = {"base": "gray", "cache": "tab:blue", "spec": "tab:orange", "cache_spec": "tab:green"}


@dataclass
class TrainingArgs:
    """One OSWorld training run replayed: `epochs` epochs of T tasks × G samples, the policy drifting."""

    env: str = "BunshinOSWorld-v0"
    """env id (OSWorld picks Calc and Writer tasks, whose tools are slow)"""
    tasks: int = 2
    """tasks T per epoch"""
    group: int = 4
    """GRPO group size G"""
    epochs: int = 5
    """training epochs replayed (the paper's Fig 10 and 11 show 5)"""
    perturb_p: float = 0.45
    """detour probability in epoch 1 (a detour: a candidate action instead of the oracle's)"""
    drift_step: float = 0.08
    """the detour probability drops by this each epoch: the policy follows the oracle more as it trains"""
    novel_from: int = 5
    """from this epoch on, the policy makes calls no earlier epoch made (the paper's epoch-5 drop)"""
    novel_p: float = 0.25
    """from `novel_from` on, the probability that a step is such a new call"""
    think_median_s: float = 2.0
    """think-time model median (s per action; stands for LLM generation)"""
    concurrency: int = 8
    """most workspaces alive at once"""
    seed: int = 0
    """seed of the sampled trajectories (the same in every configuration)"""
    settle_max_s: float = 45.0
    """most seconds each configuration waits for host memory to stop falling (epoch_bench.Args.settle_max_s)"""

    @classmethod
    def quick(cls) -> "TrainingArgs":
        return cls(tasks=1, group=3, epochs=3, novel_from=3, settle_max_s=5.0)


def training_scale(a: TrainingArgs) -> str:
    return (f"{a.epochs} epochs × {a.tasks} tasks × G={a.group} on {a.env}, ≤{a.concurrency} workspaces, "
            f"think p50 {a.think_median_s}s (paper: 5 epochs of 128 OSWorld rollouts on 64 threads)")


def training_run(a: TrainingArgs, out: Path, configs=("base", "spec", "cache_spec"), backend: str = "auto") -> dict:
    """The epoch_bench result of this run (its "configs" hold each configuration's curves), from OUT/runs when
    kept there."""
    args = epoch_bench.Args(env=a.env, tasks=a.tasks, group=a.group, iterations=a.epochs, perturb_p=a.perturb_p,
                            drift_step=a.drift_step, novel_from=a.novel_from, novel_p=a.novel_p,
                            think_median_s=a.think_median_s, concurrency=a.concurrency, seed=a.seed,
                            backend=backend, configs=tuple(configs), settle_max_s=a.settle_max_s)
    identity = {k: v for k, v in asdict(args).items() if k not in ("configs", "out")}
    key = hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    run_dir = Path(out) / "runs" / f"epoch-{key}"
    kept_path, latest_path = run_dir / "kept.json", run_dir / "epoch.json"  # epoch.json: epoch_bench's latest
    kept = {"configs": {}}
    for path in (kept_path, latest_path):  # an interrupted run leaves its finished configurations in epoch.json
        if path.exists():
            found = json.loads(path.read_text())
            kept = {**found, "configs": {**kept["configs"], **found["configs"]}}
    missing = tuple(c for c in configs if c not in kept["configs"])
    if missing:
        fresh = epoch_bench.run(replace(args, configs=missing, out=str(run_dir)))
        kept = {**fresh, "configs": {**kept["configs"], **fresh["configs"]}}
    run_dir.mkdir(parents=True, exist_ok=True)
    kept_path.write_text(json.dumps(kept, indent=1))
    return {**kept, "configs": {c: kept["configs"][c] for c in configs}, "run": str(kept_path)}


def bars_vs_paper(ax, ours: dict, paper: dict, paper_label: str, baseline: float, ylabel: str) -> None:
    """Ours per configuration as bars, the paper's as black ticks, a dashed line at Base's value."""
    names = list(ours)
    xs = range(len(names))
    ax.bar(xs, [ours[n] for n in names], color=[COLORS[n] for n in names], label="ours")
    ax.scatter(xs, [paper[n] for n in names], marker="_", s=900, color="k", zorder=3, label=paper_label)
    ax.axhline(baseline, color="0.5", lw=0.8, ls="--")
    ax.set_xticks(list(xs), [LABELS[n] for n in names])
    ax.set(ylabel=ylabel, title="vs the paper")
    ax.legend(fontsize=8)
