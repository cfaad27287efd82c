"""`bunshin bench serve`: what a step costs over `bunshin serve` (OpenEnv WebSocket + PNG) vs in-process.

The same task's oracle episode is run `episodes` times by an in-process env and by a `RemoteEnv` against a
server started here (its own process and runtime, so both start cold): episode 1's steps execute (misses),
later episodes are served from each side's prefix cache (hits), where the wire is most of the cost. Also
times one fork of 2 over the server vs in-process.

Writes OUT/serve.json = {"env", "task", "episodes", "configs": {"local"|"server": {"reset_p50_s",
"miss_p50_s", "hit_p50_s", "fork2_s", "rewards"}}, "server_vs_local": {ratios of those p50s}} + OUT/serve.png.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym.cli_options import ENV_NAMES

DEFAULT_TASK = {"BunshinWebArena-v0": "5", "BunshinOSWorld-v0": "calc-rename-header"}


@dataclass
class Args:
    env: str = "BunshinWebArena-v0"
    task: str | None = None
    """task id (default: WebArena 5, OSWorld calc-rename-header)"""
    episodes: int = 6
    """oracle episodes per side: the first executes, the rest are cache hits"""
    out: str = "bench-out/serve"


def _episodes(env: gym.Env, actions: list[str], n: int, label: str) -> dict:
    resets, misses, hits, rewards = [], [], [], []
    for i in tqdm(range(n), desc=label, leave=False):
        t0 = time.perf_counter()
        env.reset(seed=i)
        resets.append(time.perf_counter() - t0)
        reward = 0.0
        for a in actions:
            t0 = time.perf_counter()
            _, reward, *_ = env.step(a)
            (misses if i == 0 else hits).append(time.perf_counter() - t0)
        rewards.append(reward)
    env.reset(seed=n)
    env.step(actions[0])
    t0 = time.perf_counter()
    clones = env.unwrapped.fork(2)
    fork_s = time.perf_counter() - t0
    for c in clones:
        c.close()
    med = statistics.median
    return {"reset_p50_s": round(med(resets), 4), "miss_p50_s": round(med(misses), 4),
            "hit_p50_s": round(med(hits), 4) if hits else None, "fork2_s": round(fork_s, 4), "rewards": rewards}


def run(a: Args, progress: bool = True) -> dict:
    from bunshin_gym.server import ServerProcess

    task = a.task or DEFAULT_TASK[a.env]
    adapter = bunshin_gym.adapter_for(a.env)
    actions = adapter.oracle_actions(adapter.load_task(task))
    short = {v: k for k, v in ENV_NAMES.items()}.get(a.env, a.env)
    configs = {}
    local = gym.make(a.env, task_id=task)
    try:
        configs["local"] = _episodes(local, actions, a.episodes, "local")
    finally:
        local.close()
    with ServerProcess(short, "--no-auth", "--max-sessions", "4") as server:
        remote = gym.make("BunshinRemote-v0", url=server.url, task_id=task)
        try:
            configs["server"] = _episodes(remote, actions, a.episodes, "server")
        finally:
            remote.close()
    ratios = {k: round(configs["server"][k] / configs["local"][k], 3)
              for k in ("reset_p50_s", "miss_p50_s", "hit_p50_s", "fork2_s") if configs["local"][k]}
    result = {"env": a.env, "task": task, "episodes": a.episodes, "configs": configs, "server_vs_local": ratios,
              "args": asdict(a)}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "serve.png")
    return result


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("reset_p50_s", "reset"), ("miss_p50_s", "step (miss)"), ("hit_p50_s", "step (hit)"),
            ("fork2_s", "fork(2)")]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    width = 0.38
    for j, (name, color) in enumerate((("local", "tab:blue"), ("server", "tab:orange"))):
        vals = [(result["configs"][name][k] or 0) * 1000 for k, _ in keys]
        bars = ax.bar([i + (j - 0.5) * width for i in range(len(keys))], vals, width, label=name, color=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(keys)), [label for _, label in keys])
    ax.set_yscale("log")
    ax.set_ylabel("median latency (ms, log)")
    ax.set_title(f"{result['env']} task {result['task']}: in-process vs `bunshin serve` (loopback)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
