"""BrowserGym baseline for benchmarks/webarena_bench.py: reset latency, step latency per action type and
PSS per env of BrowserGym (browsergym-core 0.14.3) on the same shopping site.

Runs inside its own virtualenv (scripts/install_browsergym.sh → /opt/bunshin/browsergym-venv), never in
Bunshin's: browsergym-core pins playwright==1.44. Imports nothing from this repository. Expects the site
already serving at --url; webarena_bench.py starts site and this script together inside one `unshare -n`
namespace (loopback only), so nothing BrowserGym does can leave the machine.

What it measures, for each configuration (`default`: BrowserGym's slow_mo=1000 ms per action and 0.5 s
pre-observation delay; `tuned`: slow_mo=0, no delay):
  - reset_s: `env.reset()` of `browsergym/openended` at --url (launches Chromium and the chat window's
    Chromium, opens the page, first observation) — BrowserGym has no fork, every reset is a fresh browser;
    reset_step_s: the same reset until its first action (a scroll) has run; resets are spaced by
    --think-median-s (lognormal pauses, as a policy thinks);
  - step_s per action type: the scripted sequence below, the same actions webarena_bench.py sends to
    Bunshin (goto, click, scroll, type, press, go_back), each through HighLevelActionSet.to_python_code;
  - pss: for each N of --env-counts, N processes (this script with --hold), each one env after reset and
    one step; PSS summed over every process tree (python, Playwright's node driver, both Chromiums) / N.
Chromium is Debian's /usr/bin/chromium: playwright.sync_api.BrowserType.launch is patched below (BrowserGym's
pw_chromium_kwargs does not reach the chat window's browser).

Writes one JSON object to --out:
  {"configs": {"default"|"tuned": {"slow_mo_ms", "pre_observation_delay_s", "reset_s": [...], "reset_step_s": [...],
   "step_s": {type: [...]}, "errors": [...]}}, "pss": [{"envs", "pss_mb_total", "pss_mb_per_env"}],
   "versions": {...}}
Usage (inside the namespace, site on loopback):
  /opt/bunshin/browsergym-venv/bin/python benchmarks/browsergym_baseline.py --url http://127.0.0.1:7790 \
      --out /tmp/bg.json [--resets 5] [--rounds 2] [--env-counts 1,4,8] [--configs default,tuned]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass

CHROMIUM = "/usr/bin/chromium"
NO_NETWORK_FLAGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-default-apps", "--metrics-recording-only", "--disable-domain-reliability"]


@dataclass
class Config:
    name: str
    slow_mo: int | None  # None: the task's own (1000 ms)
    pre_observation_delay: float


CONFIGS = {"default": Config("default", None, 0.5), "tuned": Config("tuned", 0, 0.0)}


def _patch_playwright() -> None:
    """Every Chromium launched by Playwright (agent's and chat's) is Debian's, with the no-network flags."""
    from playwright.sync_api import BrowserType

    original = BrowserType.launch
    if getattr(original, "_bunshin_patched", False):
        return

    def launch(self, *args, **kwargs):
        kwargs["executable_path"] = CHROMIUM
        kwargs["args"] = list(kwargs.get("args") or []) + NO_NETWORK_FLAGS
        return original(self, *args, **kwargs)

    launch._bunshin_patched = True
    BrowserType.launch = launch


def _make_env(url: str, cfg: Config):
    import gymnasium as gym
    import browsergym.core  # noqa: F401 - registers browsergym/openended
    from browsergym.core.action.highlevel import HighLevelActionSet

    actions = HighLevelActionSet(subsets=["chat", "bid", "nav", "coord"], strict=False, multiaction=False)
    kwargs = {"task_kwargs": {"start_url": url}, "action_mapping": actions.to_python_code,
              "pre_observation_delay": cfg.pre_observation_delay, "headless": True}
    if cfg.slow_mo is not None:
        kwargs["slow_mo"] = cfg.slow_mo
    return gym.make("browsergym/openended", **kwargs)


def _bid(env, css: str) -> str:
    """BrowserGym's own element id (`bid` attribute, set at observation) of the first match of `css`."""
    bid = env.unwrapped.page.evaluate(
        "(sel) => { const e = document.querySelector(sel); return e ? e.getAttribute('bid') : null; }", css)
    if bid is None:
        raise RuntimeError(f"no element with a bid matches {css!r} on {env.unwrapped.page.url}")
    return bid


def script(url: str) -> list[tuple[str, object]]:
    """(action type, action or callable env -> action): the sequence webarena_bench.py also runs on Bunshin."""
    q = json.dumps
    shoes, product, search = 'a[href$="/category/shoes"]', 'main a[href*="/product/"]', "input[type=search], input[name=q]"
    return [
        ("goto", f"goto({q(url + '/')})"),
        ("click", lambda env: f"click({q(_bid(env, shoes))})"),
        ("scroll", "scroll(0, 720)"),
        ("click", lambda env: f"click({q(_bid(env, product))})"),
        ("go_back", "go_back()"),
        ("go_back", "go_back()"),
        ("type", lambda env: f"fill({q(_bid(env, search))}, 'shoes')"),
        ("press", lambda env: f"press({q(_bid(env, search))}, 'Enter')"),
        ("scroll", "scroll(0, 720)"),
        ("go_back", "go_back()"),
        ("goto", f"goto({q(url + '/category/electronics')})"),
    ]


def run_config(url: str, cfg: Config, resets: int, rounds: int, think_median_s: float = 0.0,
               seed: int = 0) -> dict:
    """Times each reset alone (reset_s) and until its first action has run (reset_step_s: reset + one
    scroll, as `bunshin bench reset` times Bunshin), resets spaced by lognormal think times."""
    env = _make_env(url, cfg)
    rng = random.Random(seed)
    out = {"slow_mo_ms": 1000 if cfg.slow_mo is None else cfg.slow_mo,
           "pre_observation_delay_s": cfg.pre_observation_delay, "reset_s": [], "reset_step_s": [],
           "step_s": {}, "errors": []}
    try:
        for _ in range(resets):
            if think_median_s > 0:
                time.sleep(min(20.0, rng.lognormvariate(math.log(think_median_s), 0.5)))
            t0 = time.perf_counter()
            env.reset()
            out["reset_s"].append(time.perf_counter() - t0)
            env.step("scroll(0, 720)")
            out["reset_step_s"].append(time.perf_counter() - t0)
        for _ in range(rounds):
            for kind, action in script(url):
                if callable(action):
                    action = action(env)
                t0 = time.perf_counter()
                obs, *_ = env.step(action)
                out["step_s"].setdefault(kind, []).append(time.perf_counter() - t0)
                if obs.get("last_action_error"):
                    out["errors"].append(f"{action}: {obs['last_action_error'][:200]}")
    finally:
        env.close()
    return out


# ---- memory: N envs, one process each --------------------------------------------------------------
def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def tree_pss(pid: int) -> int:
    """Summed PSS (bytes) of pid and all its descendants, from /proc/*/smaps_rollup."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            todo += _children(p)
        except OSError:
            pass
    return total


def measure_pss(url: str, counts: list[int], timeout_s: float) -> list[dict]:
    rows = []
    for n in counts:
        procs = []
        try:
            for _ in range(n):  # one at a time: 2 cores, each launch is CPU-bound
                p = subprocess.Popen([sys.executable, __file__, "--url", url, "--hold"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
                procs.append(p)
                deadline = time.monotonic() + timeout_s
                line = p.stdout.readline()
                if line.strip() != "ready" or time.monotonic() > deadline:
                    raise RuntimeError(f"BrowserGym env process did not come up (said {line!r})")
            time.sleep(2.0)  # let Chromium settle
            total = sum(tree_pss(p.pid) for p in procs)
            rows.append({"envs": n, "pss_mb_total": round(total / 2**20, 1),
                         "pss_mb_per_env": round(total / n / 2**20, 1)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            for p in procs:
                try:
                    p.stdin.close()
                except OSError:
                    pass
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
    return rows


def grpo(url: str, group: int, steps: int, actions: int) -> dict:
    """`bunshin bench trl`'s baseline: `steps` GRPO steps of `group` envs alive at once (as TRL pools one per
    rollout); each step resets every env and runs `actions` scripted actions on it, rollout g>0 taking
    `scroll(0, 720)` at action 1 + g % (actions - 1) instead. Env seconds per step summed over the rollouts
    (TRL calls them one after another); peak PSS of this process tree with the group alive."""
    envs = [_make_env(url, CONFIGS["tuned"]) for _ in range(group)]
    seq = script(url)[:actions]
    out = {"env_s_per_step": [], "pss_mb": [], "errors": []}
    try:
        for _ in range(steps):
            total = 0.0
            for g, env in enumerate(envs):
                t0 = time.perf_counter()
                env.reset()
                for i, (_kind, action) in enumerate(seq):
                    if g and i == 1 + g % max(1, actions - 1):
                        action = "scroll(0, 720)"
                    if callable(action):
                        try:
                            action = action(env)
                        except Exception as e:  # noqa: BLE001 - the page after a detour lacks the element
                            out["errors"].append(str(e)[:200])
                            action = "noop()"
                    env.step(action)
                total += time.perf_counter() - t0
            out["env_s_per_step"].append(round(total, 3))
            out["pss_mb"].append(round(tree_pss(os.getpid()) / 2**20, 1))
            print(json.dumps({"grpo_step_env_s": out["env_s_per_step"][-1], "pss_mb": out["pss_mb"][-1]}),
                  file=sys.stderr, flush=True)
    finally:
        for env in envs:
            env.close()
    return out


def hold(url: str) -> None:
    """One env, reset + one step, then wait (stdin) so the parent can read our PSS."""
    env = _make_env(url, CONFIGS["tuned"])
    try:
        env.reset()
        env.step("scroll(0, 200)")
        print("ready", flush=True)
        sys.stdin.read()
    finally:
        env.close()


def _wait_for(url: str, timeout_s: float) -> None:
    u = urllib.parse.urlparse(url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((u.hostname, u.port or 80), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"site at {url} not reachable after {timeout_s} s") from None
            time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="site root, e.g. http://127.0.0.1:7790")
    ap.add_argument("--out", help="where to write the JSON result")
    ap.add_argument("--configs", default="default,tuned", help="comma-separated: default, tuned")
    ap.add_argument("--resets", type=int, default=5, help="resets per configuration")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the scripted action sequence")
    ap.add_argument("--env-counts", default="1,4,8", help="env counts for PSS (empty: skip)")
    ap.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--grpo", default="", help="G1,G2,...: run grpo() for each group size instead (bench trl)")
    ap.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps per group size")
    ap.add_argument("--grpo-actions", type=int, default=6, help="actions per rollout")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="longest wait for one env process")
    ap.add_argument("--think-median-s", type=float, default=0.0, help="median pause before each reset (lognormal)")
    a = ap.parse_args()
    url = a.url.rstrip("/")
    _patch_playwright()
    _wait_for(url, 60)
    if a.hold:
        hold(url)
        return 0
    if a.grpo:
        res = {str(g): grpo(url, int(g), a.grpo_steps, a.grpo_actions) for g in a.grpo.split(",") if g}
        with open(a.out, "w") as f:
            json.dump({"grpo": res}, f)
        return 0
    import importlib.metadata as md

    result = {"url": url, "configs": {}, "pss": [],
              "versions": {k: md.version(k) for k in ("browsergym-core", "playwright", "gymnasium")}}
    for name in [c for c in a.configs.split(",") if c]:
        r = run_config(url, CONFIGS[name], a.resets, a.rounds, a.think_median_s)
        result["configs"][name] = r
        print(name, "reset p50", round(statistics.median(r["reset_s"]), 3),
              {k: round(statistics.median(v), 3) for k, v in r["step_s"].items()}, file=sys.stderr, flush=True)
    counts = [int(x) for x in a.env_counts.split(",") if x]
    result["pss"] = measure_pss(url, counts, a.timeout_s) if counts else []
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
