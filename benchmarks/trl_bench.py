"""`bunshin bench trl`: environment seconds per GRPO step and peak memory of the group's envs, Bunshin vs
BrowserGym on the same site, actions and group sizes, in the same run.

One GRPO step, as TRL's GRPOTrainer(environment_factory=...) drives it: G env instances stay alive (TRL pools
one per rollout); every step resets each one to the task and runs its rollout's tool calls, rollouts one after
another (TRL's tool loop calls them in turn). Every rollout runs the first `actions` steps of webarena_bench's
scripted sequence (goto, click a category, scroll, click a product, go_back, ...) on the shopping site; rollout
g>0 takes a scroll at action 1 + g % (actions - 1) instead, so a group shares a prefix and then diverges, as
sampled rollouts do. Env seconds per step: the summed wall time of those resets and actions (what the trainer
waits for). Memory: peak PSS with the group alive (Bunshin: every live workspace plus this process; BrowserGym:
its process tree, both Chromiums per env and Playwright's driver; the site is not counted in either).

Bunshin runs the env of `WebArenaToolEnv` in this process (gym.make with the prefix cache and diagnostics on;
the tool env adds only text rendering); its task snapshot is built before timing (a cold start is once per
process, not per step), and the first timed step is a cold cache. BrowserGym (browsergym-core, tuned:
slow_mo=0, no delay) runs `benchmarks/browsergym_baseline.py --grpo` in its own venv and loopback-only namespace
beside a fresh copy of the same site (webarena_bench.measure_browsergym).

Writes OUT/trl.json = {"args", "groups": {G: {"bunshin": {"env_s_per_step", "pss_mb", "hits", "steps",
"sources"}, "browsergym": {...}, "env_time_ratio", "memory_ratio"}}} and OUT/trl.png.
Full scale: bunshin bench trl --groups 4,8 --steps 3 --out bench-out/trl
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym

import bunshin_gym  # noqa: F401 - registers the envs


@dataclass
class Args:
    groups: tuple[int, ...] = (4, 8)
    """group sizes G (rollouts per prompt)"""
    steps: int = 2
    """GRPO steps per group size (the first one starts with a cold prefix cache)"""
    actions: int = 6
    """actions per rollout (a prefix of webarena_bench's scripted sequence)"""
    task: str = "40"
    """Bunshin's task (its start page is the site's front page, as BrowserGym's openended task's)"""
    browsergym: str = "auto"
    """baseline: auto (if installed), on, off"""
    backend: str = "auto"
    """Bunshin's memory backend (gym.make's `backend`): auto, ksm, memfile, private, kmod"""
    out: str = "bench-out/trl"
    extra: dict = field(default_factory=dict)


def _self_pss() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def measure_bunshin(a: Args, group: int) -> dict:
    from benchmarks.webarena_bench import scripted_sequence
    from bunshin_gym.env import reset_prefix_cache

    reset_prefix_cache()  # every group size starts with a cold cache
    seq = scripted_sequence()[: a.actions]
    envs = [gym.make("BunshinWebArena-v0", task_id=a.task, diagnostics=True, max_steps=a.actions + 1,
                     backend=a.backend) for _ in range(group)]
    out: dict = {"env_s_per_step": [], "pss_mb": [], "hits": 0, "steps": 0, "sources": {}, "errors": []}
    try:
        envs[0].reset()  # the task snapshot, built once per process: outside the timing
        for _ in range(a.steps):
            total = 0.0
            for g, env in enumerate(envs):
                t0 = time.perf_counter()
                obs, _ = env.reset()
                for i, (_kind, action) in enumerate(seq):
                    if g and i == 1 + g % max(1, a.actions - 1):
                        action = "scroll [down]"
                    if callable(action):
                        try:
                            action = action(obs)
                        except RuntimeError as e:  # the page after a detour lacks the element
                            out["errors"].append(str(e)[:200])
                            action = "noop()"
                    obs, _, _, _, info = env.step(action)
                    out["steps"] += 1
                    out["hits"] += info["bunshin"].get("cache") == "hit"
                total += time.perf_counter() - t0
            for env in envs:  # each rollout's workspace at the end of the step (a hit's sync finished first)
                ep = env.unwrapped.episode
                ep.restorer.wait_background()
                for k, v in ep.restorer.stats.items():
                    if k in ("live", "standby", "snapshot", "initial"):
                        out["sources"][k] = out["sources"].get(k, 0) + v
            pss = sum(env.unwrapped.workspace.memory().pss for env in envs if env.unwrapped.workspace is not None)
            out["env_s_per_step"].append(round(total, 3))
            out["pss_mb"].append(round((pss + _self_pss()) / 2**20, 1))
            print(json.dumps({"system": "bunshin", "G": group, "env_s": total, "pss_mb": out["pss_mb"][-1]}),
                  flush=True)
    finally:
        for env in envs:
            env.close()
    return out


def measure_browsergym(a: Args, out: Path) -> dict | None:
    from benchmarks import webarena_bench as wb

    wa = wb.Args(out=str(out), resets=0, rounds=0, env_counts=(), browsergym=a.browsergym,
                 browsergym_configs=("tuned",), baseline_timeout_s=3600)
    problem = wb.browsergym_problem(wa)
    if problem:
        if a.browsergym == "on":
            raise RuntimeError(f"BrowserGym baseline requested but unavailable: {problem}")
        print(f"browsergym baseline skipped: {problem}", flush=True)
        return None
    res = wb.measure_browsergym(wa, out, extra=("--grpo", ",".join(map(str, a.groups)), "--grpo-steps",
                                                str(a.steps), "--grpo-actions", str(a.actions)))
    return res["grpo"]


def run(a: Args) -> dict:
    if a.steps < 1 or a.actions < 2 or not a.groups or min(a.groups) < 1:
        raise ValueError(f"steps={a.steps}, actions={a.actions}, groups={a.groups}: expected steps >= 1, "
                         "actions >= 2 and group sizes >= 1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bun = {g: measure_bunshin(a, g) for g in a.groups}
    bg = measure_browsergym(a, out) if a.browsergym != "off" else None
    groups = {}
    for g in a.groups:
        row = {"bunshin": bun[g], "browsergym": (bg or {}).get(str(g))}
        b = row["bunshin"]
        b["env_s_per_step_mean"] = round(statistics.mean(b["env_s_per_step"]), 3)
        b["pss_mb_peak"] = max(b["pss_mb"])
        if row["browsergym"]:
            r = row["browsergym"]
            r["env_s_per_step_mean"] = round(statistics.mean(r["env_s_per_step"]), 3)
            r["pss_mb_peak"] = max(r["pss_mb"])
            row["env_time_ratio"] = round(b["env_s_per_step_mean"] / r["env_s_per_step_mean"], 3)
            row["memory_ratio"] = round(b["pss_mb_peak"] / r["pss_mb_peak"], 3)
        groups[str(g)] = row
    result = {"args": asdict(a), "targets": {"env_time_ratio": 0.3, "memory_ratio": 0.5}, "groups": groups}
    (out / "trl.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "trl.png")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gs = list(result["groups"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((ax1, "env_s_per_step_mean", "env seconds per GRPO step"),
                           (ax2, "pss_mb_peak", "peak PSS (MiB)")):
        for i, system in enumerate(("bunshin", "browsergym")):
            ys = [(result["groups"][g][system] or {}).get(key, 0) for g in gs]
            ax.bar([j + (i - 0.5) * 0.4 for j in range(len(gs))], ys, 0.4, label=system)
        ax.set_xticks(range(len(gs)), [f"G={g}" for g in gs])
        ax.set_ylabel(label)
    ax1.legend()
    fig.suptitle("TRL GRPO step: env time and memory, Bunshin vs BrowserGym")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
