"""BunshinOSWorld-v0 latencies and memory: desktop cold start vs fork of a task snapshot, per-action and
observation latency, workspace PSS.

    python -m benchmarks.osworld_bench [--tasks edit-type-unsaved,calc-sum-total] [--out bench-out/osworld]

Cold start = Workspace.start(spec) (home seeding, Xvfb, dbus, AT-SPI, openbox, executor) + the warm-up call
(attach the session). Reset = fork of the task snapshot (what `env.reset()` + first step cost after the
first episode of a task). Writes OUT/osworld.json and OUT/osworld.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from forkcore import Workspace

from envs.osworld.env import OSWorldAdapter


def _mb(x: int) -> float:
    return round(x / 2**20, 1)


def _timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def run(tasks: list[str], forks: int, backend: str, out: str) -> dict:
    ad = OSWorldAdapter()
    res: dict = {"screen_size": ad.screen_size, "backend": backend, "tasks": {}}
    ws, res["cold_start_s"] = _timed(lambda: Workspace.start(ad.workspace_spec()))
    try:
        m, p = ad.warmup_call()
        _, res["warmup_s"] = _timed(lambda: ws.call(m, **p))
        res["cold_total_s"] = res["cold_start_s"] + res["warmup_s"]
        res["idle_desktop_pss_mb"] = _mb(ws.memory().pss)
        base, res["base_snapshot_s"] = _timed(ws.snapshot)
    finally:
        ws.destroy()
    try:
        for tid in tasks:
            task = ad.load_task(tid)
            row: dict = {}
            (tws,), row["fork_base_s"] = _timed(lambda: base.fork(1, backend=backend))
            m, p = ad.reset_call(task)
            raw, row["task_setup_call_s"] = _timed(lambda: tws.call(m, **p))
            row["setup_seconds"] = raw["seconds"]
            row["task_ws_pss_mb"] = _mb(tws.memory().pss)
            snap, row["task_snapshot_s"] = _timed(tws.snapshot)
            row["task_snapshot_mb"] = _mb(snap.size_bytes())
            tws.destroy()
            fork_s, obs_s, shot_s, a11y_s, step_s, act_s = [], [], [], [], [], []
            clones = []
            for _ in range(forks):
                (c,), dt = _timed(lambda: snap.fork(1, backend=backend))
                fork_s.append(dt)
                clones.append(c)
            c = clones[0]
            for _ in range(3):
                o, dt = _timed(lambda: c.call("osworld.observe"))
                obs_s.append(dt)
                shot_s.append(o["obs_seconds"]["screenshot"])
                a11y_s.append(o["obs_seconds"]["a11y"])
            for code in ("pass", "pyautogui.press('shift')", "pyautogui.typewrite('ab', interval=0.01)"):
                m, p = ad.step_call(ad.canonical_action(code))
                o, dt = _timed(lambda: c.call(m, **p))
                step_s.append(dt)
                act_s.append(o["seconds"]["action"])
            row.update(
                fork_from_task_snapshot_s=[round(x, 3) for x in fork_s],
                fork_p50_s=round(statistics.median(fork_s), 3),
                observe_rpc_s=round(statistics.median(obs_s), 3),
                screenshot_s=round(statistics.median(shot_s), 3),
                a11y_s=round(statistics.median(a11y_s), 3),
                a11y_chars=len(o["accessibility_tree"]),
                step_rpc_s=[round(x, 3) for x in step_s],
                action_exec_s=[round(x, 3) for x in act_s],
                clone_pss_mb=[_mb(x.memory().pss) for x in clones],
            )
            for x in clones:
                x.destroy()
            snap.release()
            res["tasks"][tid] = row
            print(tid, json.dumps(row), flush=True)
    finally:
        base.release()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "osworld.json").write_text(json.dumps(res, indent=1))
    _plot(res, Path(out) / "osworld.png")
    return res


def _plot(res: dict, path: Path) -> None:
    """Per task: cold start (desktop + task set-up) vs fork of the task snapshot; and PSS source vs clones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tids = list(res["tasks"])
    cold = [res["cold_total_s"] + res["tasks"][t]["fork_base_s"] + res["tasks"][t]["task_setup_call_s"] for t in tids]
    fork = [res["tasks"][t]["fork_p50_s"] for t in tids]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(tids))
    ax1.bar([i - 0.2 for i in x], cold, 0.4, label="cold start + task set-up")
    ax1.bar([i + 0.2 for i in x], fork, 0.4, label="fork of the task snapshot (p50)")
    ax1.set(xticks=list(x), xticklabels=tids, ylabel="seconds", title="Reset: cold vs fork")
    ax1.legend()
    ax2.bar([i - 0.2 for i in x], [res["tasks"][t]["task_ws_pss_mb"] for t in tids], 0.4, label="task workspace")
    ax2.bar([i + 0.2 for i in x], [statistics.median(res["tasks"][t]["clone_pss_mb"]) for t in tids], 0.4,
            label="clone (median)")
    ax2.set(xticks=list(x), xticklabels=tids, ylabel="PSS (MB)", title="Desktop memory")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="edit-type-unsaved,calc-sum-total")
    ap.add_argument("--forks", type=int, default=3)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="bench-out/osworld")
    a = ap.parse_args()
    r = run([t for t in a.tasks.split(",") if t], a.forks, a.backend, a.out)
    print(json.dumps({k: v for k, v in r.items() if k != "tasks"}, indent=1))


if __name__ == "__main__":
    main()
