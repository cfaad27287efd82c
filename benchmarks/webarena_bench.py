"""BunshinWebArena-v0 vs BrowserGym on the same shopping site: reset latency, step latency per action type,
memory (PSS) per env at 1/4/8 envs alive.

Bunshin (this process, `gym.make("BunshinWebArena-v0", cache=False)` so every step executes):
  - fresh reset: what a cold start costs, `Workspace.start(adapter.workspace_spec())` (site + executor)
    + the adapter's warm-up call (Chromium + first page) — what bunshin_gym.task_snapshots.TaskSnapshots.base does
    before its snapshot, timed directly, `cold_resets` times;
  - fork reset: `env.reset()` after the first, i.e. a fork of the task snapshot (info["bunshin"]["reset_s"]);
  - step latency per action type (click, type, press, scroll, goto, go_back, select_option, stop): the
    oracle trajectories of `tasks` plus `rounds` rounds of a scripted sequence (goto, click, scroll,
    click, go_back ×2, type, press, scroll, go_back, goto), info["bunshin"]["step_s"];
  - PSS per env: N envs alive at once (each its own forked workspace after reset + one step),
    `workspace.memory().pss` summed / N, for N in `env_counts`.
BrowserGym (baseline, same run): benchmarks/browsergym_baseline.py in its own virtualenv
(scripts/install_browsergym.sh), started together with a fresh copy of the site inside one `unshare -n`
namespace (loopback only). It measures reset (a new browser each time: BrowserGym has no fork), the same
scripted sequence through HighLevelActionSet, and PSS of N env processes (process trees summed / N), for
BrowserGym's defaults (slow_mo=1000 ms, 0.5 s pre-observation delay) and tuned (slow_mo=0, no delay).

Writes OUT/webarena.json ({"args", "bunshin", "browsergym", "table"}; every latency list raw, plus
{"n", "p50", "p90"} summaries), OUT/webarena.png (side-by-side bars) and OUT/browsergym.json (raw baseline).
Not equal work per env: a Bunshin workspace holds its own site + database + Chromium; a BrowserGym env
holds two Chromiums (page + chat window) and shares one site, which is not counted in its PSS.

Full run:  bunshin bench webarena --out bench-out/webarena
           (python -c "from benchmarks.webarena_bench import Args, run; run(Args())")
CI scale:  bunshin bench webarena --quick --out /tmp/webarena   (1 env, 2 resets; BrowserGym only if installed)
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym

import bunshin_gym  # noqa: F401 - registers BunshinWebArena-v0
from envs.webarena import parse_action
from envs.webarena.env import SITE_URL, WebArenaAdapter
from forkcore import Workspace

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BG_PYTHON = "/opt/bunshin/browsergym-venv/bin/python"


@dataclass(frozen=True)
class Args:
    out: str = "bench-out/webarena"
    """output directory for webarena.json, webarena.png and browsergym.json"""
    quick: bool = False
    """CI scale: 1 cold start, 2 resets, task 40 only, 1 round, PSS at 1 env; BrowserGym tuned only (if installed)"""
    tasks: tuple[str, ...] = ("0", "16", "21", "40", "50")
    """tasks whose oracle trajectories are stepped (covers scroll, type, click, select_option, stop)"""
    resets: int = 5
    """fork resets of Bunshin and resets per BrowserGym configuration"""
    cold_resets: int = 5
    """Bunshin fresh (cold) starts: Workspace.start + warm-up call"""
    rounds: int = 2
    """rounds of the scripted action sequence (both systems)"""
    env_counts: tuple[int, ...] = (1, 4, 8)
    """numbers of envs alive at once for the PSS measurement (both systems)"""
    backend: str = "auto"
    """forkcore memory backend for Bunshin's forks (auto, memfile, ksm, private)"""
    browsergym: str = "auto"
    """baseline: "auto" runs it when the venv exists, "on" requires it, "off" skips it"""
    browsergym_python: str = DEFAULT_BG_PYTHON
    """python of the BrowserGym virtualenv (scripts/install_browsergym.sh)"""
    browsergym_configs: tuple[str, ...] = ("default", "tuned")
    """BrowserGym configurations: default (slow_mo=1000 ms, 0.5 s delay), tuned (slow_mo=0, no delay)"""
    baseline_port: int = 7790
    """port of the baseline's site inside its network namespace"""
    baseline_timeout_s: float = 1200.0
    """longest run of the whole BrowserGym baseline"""


def effective(args: Args) -> Args:
    """The Args actually run: `quick` replaces the counts with CI scale."""
    if not args.quick:
        return args
    return dataclasses.replace(args, tasks=("40",), resets=2, cold_resets=1, rounds=1, env_counts=(1,),
                               browsergym_configs=("tuned",))


def stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "p50": None, "p90": None}
    s = sorted(xs)
    return {"n": len(s), "p50": round(statistics.median(s), 4),
            "p90": round(s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))], 4)}


# ---- the scripted sequence (ids found in the observation, like an agent would) --------------------------
def _find(axtree: str, pattern: str, what: str) -> str:
    m = re.search(r"\[(\w+)\] " + pattern, axtree, re.M)
    if not m:
        raise RuntimeError(f"scripted action: no {what} in the page's axtree (pattern {pattern!r})")
    return m.group(1)


def scripted_sequence() -> list[tuple[str, object]]:
    """(action type, action or callable obs -> action): same steps as browsergym_baseline.script()."""
    shoes_re, product_re = r"link .* url: \S+/category/shoes$", r"link .* url: \S+/product/"
    shoes = lambda o: f"click [{_find(o['axtree'], shoes_re, 'Shoes link')}]"  # noqa: E731
    product = lambda o: f"click [{_find(o['axtree'], product_re, 'product link')}]"  # noqa: E731
    search = lambda o: f"type [{_find(o['axtree'], 'searchbox', 'search box')}] [shoes] [0]"  # noqa: E731
    return [("goto", f"goto [{SITE_URL}/]"), ("click", shoes), ("scroll", "scroll [down]"), ("click", product),
            ("go_back", "go_back"), ("go_back", "go_back"), ("type", search), ("press", "press [enter]"),
            ("scroll", "scroll [down]"), ("go_back", "go_back"), ("goto", f"goto [{SITE_URL}/category/electronics]")]


# ---- Bunshin -------------------------------------------------------------------------------------------
def measure_bunshin(a: Args) -> dict:
    res: dict = {"backend": a.backend, "cold_start_s": [], "cold_warmup_s": [], "fresh_reset_s": [],
                 "fork_reset_s": [], "fork_reset_wall_s": [], "step_s": {}, "errors": [], "rewards": {}, "pss": []}
    adapter = WebArenaAdapter()
    # fresh (cold): a workspace from nothing, as TaskSnapshots.base builds it
    for _ in range(a.cold_resets):
        t0 = time.perf_counter()
        ws = Workspace.start(adapter.workspace_spec())
        try:
            t1 = time.perf_counter()
            method, params = adapter.warmup_call()
            ws.call(method, **params)
            t2 = time.perf_counter()
        finally:
            ws.destroy()
        res["cold_start_s"].append(t1 - t0)
        res["cold_warmup_s"].append(t2 - t1)
        res["fresh_reset_s"].append(t2 - t0)
        print(f"bunshin fresh reset {t2 - t0:.2f} s", flush=True)

    env = gym.make("BunshinWebArena-v0", task_id=a.tasks[0], cache=False, diagnostics=True, backend=a.backend)
    try:
        t0 = time.perf_counter()
        env.reset()  # builds the base snapshot + the task snapshot (once per process)
        res["first_reset_build_s"] = time.perf_counter() - t0
        for _ in range(a.resets):  # fork of the task snapshot
            t0 = time.perf_counter()
            _, info = env.reset()
            res["fork_reset_wall_s"].append(time.perf_counter() - t0)
            res["fork_reset_s"].append(info["bunshin"]["reset_s"])
        print(f"bunshin fork reset p50 {statistics.median(res['fork_reset_s']):.3f} s", flush=True)

        def step(kind: str | None, action: str) -> dict:
            obs, reward, term, trunc, info = env.step(action)
            kind = kind or parse_action(action).name
            res["step_s"].setdefault(kind, []).append(info["bunshin"]["step_s"])
            if obs["last_action_error"]:
                res["errors"].append(f"{action}: {obs['last_action_error'][:200]}")
            return {"obs": obs, "reward": reward, "done": term or trunc}

        for tid in a.tasks:  # oracle trajectories
            env.reset(options={"task_id": tid})
            adapter_ = env.unwrapped.adapter
            r = {"reward": 0.0}
            for action in adapter_.oracle_actions(adapter_.load_task(tid)):
                r = step(None, action)
                if r["done"]:
                    break
            res["rewards"][tid] = r["reward"]
        obs, _ = env.reset(options={"task_id": a.tasks[0]})
        for _ in range(a.rounds):  # the scripted sequence
            for kind, action in scripted_sequence():
                obs = step(kind, action(obs) if callable(action) else action)["obs"]
    finally:
        env.close()

    for n in a.env_counts:  # memory: n envs alive at once, each its own workspace
        envs = [gym.make("BunshinWebArena-v0", task_id=a.tasks[0], cache=False, backend=a.backend) for _ in range(n)]
        try:
            for e in envs:
                e.reset()
                e.step("scroll [down]")
            time.sleep(2.0)
            pss = [e.unwrapped.workspace.memory().pss for e in envs]
        finally:
            for e in envs:
                e.close()
        res["pss"].append({"envs": n, "pss_mb_total": round(sum(pss) / 2**20, 1),
                           "pss_mb_per_env": round(sum(pss) / n / 2**20, 1),
                           "pss_mb_each": [round(p / 2**20, 1) for p in pss]})
        print(f"bunshin PSS {json.dumps(res['pss'][-1])}", flush=True)
    return res


# ---- BrowserGym (separate venv, own network namespace) --------------------------------------------------
def browsergym_problem(a: Args) -> str | None:
    if not Path(a.browsergym_python).exists():
        return f"{a.browsergym_python} not found: run scripts/install_browsergym.sh"
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "needs root, unshare and ip (util-linux, iproute2) to run it in a loopback-only namespace"
    if not shutil.which("chromium"):
        return "needs Debian's chromium (/usr/bin/chromium)"
    return None


def measure_browsergym(a: Args, out: Path, extra: tuple[str, ...] = ()) -> dict:
    """Run browsergym_baseline.py (with `extra` arguments) next to a fresh site in a loopback-only namespace."""
    tmp = Path(tempfile.mkdtemp(prefix="bunshin-bg-"))
    url = f"http://127.0.0.1:{a.baseline_port}"
    result_path = out / "browsergym.json"
    site = [sys.executable, "-m", "envs.webarena.site", "--db", str(tmp / "shop.db"), "--port", str(a.baseline_port)]
    base = [a.browsergym_python, str(REPO / "benchmarks" / "browsergym_baseline.py"), "--url", url,
            "--out", str(result_path), "--resets", str(a.resets), "--rounds", str(a.rounds),
            "--env-counts", ",".join(map(str, a.env_counts)), "--configs", ",".join(a.browsergym_configs), *extra]
    script = (f"ip link set lo up; {shlex.join(site)} >{shlex.quote(str(tmp / 'site.log'))} 2>&1 & SITE=$!; "
              f"trap 'kill $SITE 2>/dev/null' EXIT; {shlex.join(base)}")
    try:
        t0 = time.monotonic()
        # own session: on timeout the whole group (site, BrowserGym, its Chromiums) is killed, nothing else
        proc = subprocess.Popen(["unshare", "-n", "sh", "-c", script], cwd=REPO, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            stdout, _ = proc.communicate(timeout=a.baseline_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RuntimeError(f"BrowserGym baseline ran past {a.baseline_timeout_s} s; killed") from None
        if proc.returncode != 0:
            raise RuntimeError(f"BrowserGym baseline failed (exit {proc.returncode}):\n{stdout[-3000:]}")
        res = json.loads(result_path.read_text())
        res["wall_s"] = round(time.monotonic() - t0, 1)
        for line in stdout.splitlines():
            if not line.startswith("Overriding"):
                print(f"browsergym: {line}", flush=True)
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- report ----------------------------------------------------------------------------------------------
STEP_KINDS = ("click", "type", "press", "scroll", "goto", "go_back")


def table(bun: dict, bg: dict | None) -> list[dict]:
    rows = [{"metric": "reset fresh (cold) p50 s", "bunshin": stats(bun["fresh_reset_s"])["p50"]},
            {"metric": "reset fork p50 s", "bunshin": stats(bun["fork_reset_s"])["p50"]}]
    for k in STEP_KINDS + ("select_option", "stop"):
        s = stats(bun["step_s"].get(k, []))
        rows.append({"metric": f"step {k} p50/p90 s", "bunshin": [s["p50"], s["p90"]], "n": s["n"]})
    for p in bun["pss"]:
        rows.append({"metric": f"PSS per env MiB @{p['envs']}", "bunshin": p["pss_mb_per_env"]})
    if bg and "configs" in bg:
        for name, c in bg["configs"].items():
            rows[0][f"browsergym_{name}"] = stats(c["reset_s"])["p50"]
            for r in rows:
                m = re.match(r"step (\w+) ", r["metric"])
                if m and m.group(1) in c["step_s"]:
                    s = stats(c["step_s"][m.group(1)])
                    r[f"browsergym_{name}"] = [s["p50"], s["p90"]]
        for p in bg.get("pss", []):
            for r in rows:
                if r["metric"] == f"PSS per env MiB @{p['envs']}":
                    r["browsergym"] = p["pss_mb_per_env"]
    return rows


def plot(bun: dict, bg: dict | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cfgs = (bg or {}).get("configs", {})
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.6))
    # reset latency
    labels = ["Bunshin\nfresh", "Bunshin\nfork"] + [f"BrowserGym\n{n}" for n in cfgs]
    vals = [stats(bun["fresh_reset_s"])["p50"], stats(bun["fork_reset_s"])["p50"]] + \
           [stats(c["reset_s"])["p50"] for c in cfgs.values()]
    colors = ["tab:blue", "tab:cyan"] + ["tab:orange", "tab:red"][: len(cfgs)]
    bars = ax1.bar(labels, vals, color=colors)
    ax1.bar_label(bars, fmt="%.2f")
    ax1.set_ylabel("reset latency p50 (s)")
    ax1.set_title("reset")
    # step latency per action type
    kinds = [k for k in STEP_KINDS if k in bun["step_s"]]
    series = [("Bunshin", bun["step_s"], "tab:blue")] + \
             [(f"BrowserGym {n}", c["step_s"], col) for (n, c), col in zip(cfgs.items(), ["tab:orange", "tab:red"])]
    x, w = np.arange(len(kinds)), 0.8 / len(series)
    for i, (name, st, col) in enumerate(series):
        p50 = [stats(st.get(k, []))["p50"] or 0 for k in kinds]
        p90 = [stats(st.get(k, []))["p90"] or 0 for k in kinds]
        ax2.bar(x + i * w, p50, w, color=col, label=name,
                yerr=[np.zeros(len(kinds)), np.maximum(np.array(p90) - np.array(p50), 0)], capsize=2)
    ax2.set_xticks(x + w * (len(series) - 1) / 2, kinds)
    ax2.set_ylabel("step latency p50 (s), bar to p90")
    ax2.set_title("step (every step executed)")
    ax2.legend(fontsize=8)
    # PSS per env
    counts = [p["envs"] for p in bun["pss"]]
    bgp = {p["envs"]: p["pss_mb_per_env"] for p in (bg or {}).get("pss", [])}
    x = np.arange(len(counts))
    b1 = ax3.bar(x - 0.2, [p["pss_mb_per_env"] for p in bun["pss"]], 0.4, color="tab:blue", label="Bunshin workspace")
    ax3.bar_label(b1, fmt="%.0f", fontsize=8)
    if bgp:
        b2 = ax3.bar(x + 0.2, [bgp.get(n, 0) for n in counts], 0.4, color="tab:orange", label="BrowserGym process tree")
        ax3.bar_label(b2, fmt="%.0f", fontsize=8)
    ax3.set_xticks(x, [f"{n} env{'s' if n > 1 else ''}" for n in counts])
    ax3.set_ylabel("PSS per env (MiB)")
    ax3.set_title("memory per env, all alive at once")
    ax3.legend(fontsize=8)
    fig.suptitle("BunshinWebArena-v0 vs BrowserGym 0.14.3, same shopping site" +
                 ("" if cfgs else " (BrowserGym not measured)"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: Args) -> dict:
    """Run the benchmark; returns what it writes to OUT/webarena.json."""
    a = effective(args)
    if a.browsergym not in ("auto", "on", "off"):
        raise ValueError(f"browsergym={a.browsergym!r}: expected auto, on or off")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    bun = measure_bunshin(a)
    bg: dict | None = None
    problem = None if a.browsergym != "off" else "browsergym=off"
    if problem is None:
        problem = browsergym_problem(a)
        if problem and a.browsergym == "on":
            raise RuntimeError(f"BrowserGym baseline requested but unavailable: {problem}")
    if problem is None:
        bg = measure_browsergym(a, out)
    result = {"args": asdict(a), "wall_s": None, "bunshin": bun,
              "bunshin_summary": {"fresh_reset": stats(bun["fresh_reset_s"]), "fork_reset": stats(bun["fork_reset_s"]),
                                  "step": {k: stats(v) for k, v in bun["step_s"].items()}},
              "browsergym": bg if bg is not None else {"skipped": problem},
              "table": table(bun, bg)}
    if bg is not None:
        result["browsergym_summary"] = {n: {"reset": stats(c["reset_s"]), "step": {k: stats(v) for k, v in c["step_s"].items()}}
                                        for n, c in bg["configs"].items()}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "webarena.json").write_text(json.dumps(result, indent=1))
    plot(bun, bg, out / "webarena.png")
    for r in result["table"]:
        print(json.dumps(r))
    print(f"wrote {out / 'webarena.json'} and {out / 'webarena.png'} in {result['wall_s']} s")
    return result


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=Args.out)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--browsergym", default="auto", choices=("auto", "on", "off"))
    ap.add_argument("--backend", default="auto")
    ns = ap.parse_args()
    run(Args(out=ns.out, quick=ns.quick, browsergym=ns.browsergym, backend=ns.backend))
