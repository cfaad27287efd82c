"""`bunshin bench reset`: how long a reset keeps a policy waiting, with and without standby clones, beside
BrowserGym (WebArena) in the same run.

A reset is timed from `env.reset()` until the first `step()` has run on the live workspace (cache off, so
the step really executes; a cheap action: WebArena `scroll [down]`, OSWorld a mouse move), so a lazy reset
cannot hide its cost. Resets are spaced by the think-time model (a policy generating its first action),
the time in which the standby pool refills, so back-to-back calls cannot fake it either.

Configurations (one process, the task snapshot built once before timing):
  standby   the default runtime: a reset thaws a frozen clone of the task's initial snapshot when one is
            ready (`runtime.StandbyPools`), else restores
  restore   standby clones off: every reset is a CRIU restore of the task snapshot
  browsergym  (webarena) BrowserGym tuned (slow_mo=0, no delay), `browsergym/openended` on the same site, in
            its own virtualenv and loopback-only namespace: every reset launches Chromium

Writes OUT/reset.json = {"env", "task", "n", "think_time", "standby_p50_s", "restore_p50_s",
"browsergym_p50_s", "standby_vs_browsergym", "configs": {name: {"samples_s", "p50_s", "p90_s",
"reset_call_p50_s" (reset() alone), "sources" (how each reset got its workspace)}}}
and OUT/reset.png (the distributions).
"""
from __future__ import annotations

import json
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym.rollout import ThinkTimeModel
from bunshin_gym.runtime import StandbyPools, runtime

CHEAP_ACTION = {"BunshinWebArena-v0": "scroll [down]", "BunshinOSWorld-v0": "pyautogui.moveTo(10, 10)"}
DEFAULT_TASK = {"BunshinWebArena-v0": "40", "BunshinOSWorld-v0": "edit-type-unsaved"}


@dataclass
class Args:
    env: str = "BunshinWebArena-v0"
    n: int = 20
    """resets timed per configuration (>= 20 for the issue's p50s)"""
    task: str | None = None
    """task id (default: WebArena 40, OSWorld edit-type-unsaved)"""
    think_median_s: float = 1.5
    """think-time model before each reset (lognormal, sigma 0.5)"""
    browsergym: str = "auto"
    """baseline (webarena): auto (if installed), on, off"""
    out: str = "bench-out/reset"
    seed: int = 0


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))], 4)


def time_resets(a: Args, task: str, progress: bool) -> dict:
    env = gym.make(a.env, task_id=task, cache=False, diagnostics=True)
    think, rng = ThinkTimeModel(a.think_median_s, 0.5), random.Random(a.seed)
    samples, calls, sources = [], [], {}
    try:
        env.reset()  # builds the task snapshot once, outside the timing
        env.step(CHEAP_ACTION[a.env])
        for _ in tqdm(range(a.n), desc="resets", disable=not progress, leave=False):
            time.sleep(think.sample(rng))
            t0 = time.monotonic()
            _, info = env.reset()
            calls.append(time.monotonic() - t0)
            env.step(CHEAP_ACTION[a.env])
            samples.append(time.monotonic() - t0)
            src = info["bunshin"].get("restore", {}).get("source", "?")
            sources[src] = sources.get(src, 0) + 1
    finally:
        env.close()
    return {"samples_s": [round(x, 4) for x in samples], "p50_s": round(statistics.median(samples), 4),
            "p90_s": _p(samples, 0.9), "reset_call_p50_s": round(statistics.median(calls), 4), "sources": sources}


def measure_browsergym(a: Args, out: Path) -> dict | None:
    from benchmarks import webarena_bench as wb

    wa = wb.Args(out=str(out), resets=a.n, rounds=0, env_counts=(), browsergym=a.browsergym,
                 browsergym_configs=("tuned",))
    problem = wb.browsergym_problem(wa)
    if problem:
        if a.browsergym == "on":
            raise RuntimeError(f"BrowserGym baseline requested but unavailable: {problem}")
        print(f"browsergym baseline skipped: {problem}", flush=True)
        return None
    res = wb.measure_browsergym(wa, out, extra=("--think-median-s", str(a.think_median_s)))
    xs, calls = res["configs"]["tuned"]["reset_step_s"], res["configs"]["tuned"]["reset_s"]
    return {"samples_s": [round(x, 4) for x in xs], "p50_s": round(statistics.median(xs), 4),
            "p90_s": _p(xs, 0.9), "reset_call_p50_s": round(statistics.median(calls), 4),
            "sources": {"launch": len(xs)}, "versions": res.get("versions")}


def run(a: Args, progress: bool = True) -> dict:
    if a.n < 1:
        raise ValueError(f"n={a.n}: expected >= 1 resets")
    if a.env not in CHEAP_ACTION:
        raise ValueError(f"env={a.env!r}: expected one of {sorted(CHEAP_ACTION)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    task = a.task or DEFAULT_TASK[a.env]
    rt = runtime()
    # start cold: pools left by earlier envs in this process would share the budget with this task's pool
    rt.standby.close()
    configs = {"standby": time_resets(a, task, progress)}
    pools = rt.standby
    rt.standby = StandbyPools(0, 0)  # standby clones off
    pools.close()
    try:
        configs["restore"] = time_resets(a, task, progress)
    finally:
        rt.standby = StandbyPools(pools.budget_bytes, pools.per_snapshot)
    if a.env == "BunshinWebArena-v0" and a.browsergym != "off":
        bg = measure_browsergym(a, out)
        if bg is not None:
            configs["browsergym"] = bg
    p50 = {k: v["p50_s"] for k, v in configs.items()}
    result = {"env": a.env, "task": task, "n": a.n, "think_time": {"median_s": a.think_median_s, "sigma": 0.5},
              "args": asdict(a), "standby_p50_s": p50["standby"], "restore_p50_s": p50["restore"],
              "browsergym_p50_s": p50.get("browsergym"),
              "standby_vs_restore": round(p50["standby"] / p50["restore"], 4),
              "standby_vs_browsergym": round(p50["standby"] / p50["browsergym"], 4) if "browsergym" in p50 else None,
              "configs": configs}
    (out / "reset.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "reset.png")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["configs"])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.boxplot([result["configs"][n]["samples_s"] for n in names], showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_yscale("log")
    for i, n in enumerate(names, 1):
        ax.text(i, result["configs"][n]["p50_s"], f" p50 {result['configs'][n]['p50_s'] * 1000:.0f} ms", va="bottom")
    ax.set(ylabel="reset until first step ran (s, log)",
           title=f"{result['env']} task {result['task']}: reset latency, n={result['n']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
