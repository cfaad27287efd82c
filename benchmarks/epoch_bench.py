"""A replayed GRPO epoch in four configurations (BunshinRL Fig. 8/10/11 style).

T tasks × G samples × I iterations of GRPO-like rollouts (stochastic traces: the oracle trajectory with
detours shared Zipf-like across samples, the same seeds in every configuration) with a think-time model
standing for LLM generation and at most `concurrency` workspaces alive. Configurations:
  base        no reuse: every step executes (each episode forks the task snapshot)
  cache       the tool-prefix tree (shared by all samples and iterations of a task)
  spec        speculation only (selector-predicted chains run on the live workspace while the policy thinks)
  cache_spec  both (the paper's "Full")
The selector is trained on the oracle trajectories before iteration 1 (standing for an earlier epoch's
recording) and retrained on everything recorded so far before each later iteration. Speculation is
tail-aware: before each think, only the live samples predicted slowest (above `tail_quantile` of predicted
remaining time, from the timings recorded in earlier iterations; all samples in the first) speculate.
Rewards must be identical across configurations: the cache and speculation may change time, never results.

Configurations run in a shuffled order (Args.order, seeded by `seed`; "run_order" in the JSON), "configs" keeps
the given order. With backend "private" the whole run has KSM off (run=2 unmerges every merged page, then 0; its
clones restore with nothing mergeable, backends.PrivateBackend); top-level "ksm" = {"mode", "run_before",
"pages_sharing_max" (host-wide pages_sharing at every 0.5 s memory sample: 0 proves nothing was shared through KSM),
"ksm_restored_to" (KSM's run, pages_to_scan, sleep_millisecs put back when the run ends, as they were before)},
and each configuration's "ksm" the same samples of its own epoch.
Peaks: sampled every 0.5 s by a thread while the configuration runs; "peak_memory_mb" is the host-used peak,
"peak_memory_accounted_mb" the accounted peak (the one the figures report, see below).
Writes OUT/epoch.json = {"think_time", "args", "configs": {name: {"wall_s", "peak_memory_mb" (host used memory
above the configuration's start, taken once what ran before it has stopped freeing memory: see
`memory_once_freed`), "peak_memory_accounted_mb" (the same for the used memory processes and their kernel objects
hold: meminfo's AnonPages + Shmem + SUnreclaim + PageTables + KernelStack; memory the host frees slowly after
earlier work does not count against the configuration running then),
"at_peak" (at the sample of the peak: t_s, rollouts_running, workspaces (alive, frozen clones included),
frozen_clones, standby_reserved_mb, bench_process_rss_mb, the memory of this process: the prefix cache and
the envs' bookkeeping, ksm_saved_mb, what KSM's merging saved host-wide, and meminfo_mb, the growth of
/proc/meminfo's AnonPages, Shmem, SUnreclaim, PageTables and KernelStack since the configuration started, and
"other", the used memory's growth none of them explains),
"hit_rate_per_iteration", "spec_accuracy", "speculations_started", "speculations_skipped" (chains the
speculator did not start: a mismatch's restore and replay were expected to cost more than a match hides),
"speculations_retained_first" (chains started after retaining their start state, so that a mismatch cost a
restore and no replay),
"tail_steps_speculating_vs_not",
"cpu_busy_fraction", "running_over_time", "memory_over_time_mb" (host memory above the configuration's start),
"standby_over_time" ([t, frozen clones ready, MB the standby pools reserve]), "standby" (restores served by a
frozen clone or not: hits, misses; pools opened, shrunk or closed to make room for another),
"reward_per_iteration" (mean), "step_exec_s_p50_per_iteration" (median seconds of one step() call) and
"step_exec_s_p50" (over all steps), "rewards",
"actions" (each rollout's, in the order of "rewards"), "action_errors" (per rollout, step index -> the
last_action_error its observation reported, where one did), "step_cache" (per rollout, how each step was served: its
cache status, for a step that restored a state "<status>:<source>+<calls replayed>", for one that failed
"error: <its last_action_error>"), "step_exec_s" (per rollout, each step() call's seconds: the same step of the
same rollout in two configurations is the same action, so they compare step by step), "rollout_spans_s" (per
rollout: when it started, since the configuration began; how long its reset() took; when it ended),
"slowest_steps" (the configuration's slowest step() calls: iteration, task, sample, step, action, exec_s and its
info["bunshin"] diagnostics: how it was served, restore, execute_s, claim_wait_s (waiting for another env running
the same call), background_wait_s, verify_s (observing a state an unobserved replay reached),
speculation_wait_s/speculation_stop_s),
"retained_snapshots" (the prefix cache's pool at the end: resident, resident_bytes, attached, evicted, rejected,
dropped),
"iterations" (each one's wall; its slowest rollout: start_s, reset_s, steps, hits, think_s, exec_s, longest_step;
its steps by cache status, the snapshots they scheduled, the seconds they waited for background jobs (in all,
and by the jobs waited for: "snapshot", "sync" after hits, "reset" (the initial state restored behind the first
think), joined by "+" when several were) and spent restoring; restores by source (of the steps' own restores: a
background sync's are not counted); steps run alongside another env's identical call), "think_floor_s"}},
"rewards_identical", "reward_differences" (each rollout whose reward differs from the first configuration's:
where its actions first differ, None when they are the same, how each configuration served its steps and the
action errors each reported),
"step_time_vs_first" (per later configuration and cache status: steps, and the median and sum of the seconds
each took more than the same step in the first configuration; see `step_time_vs_first`),
"free_cache_vs_first" (per later configuration: the wall a free cache would give, "wall_s" and per iteration,
its "ratio" to the first configuration's wall under the same model, "first_model_s": see `free_cache_vs_first`)}
and OUT/epoch_*.png. The slowest rollout of an iteration is its critical path; "think_floor_s" (per iteration and
in all: the rollouts' think times scheduled on the `concurrency` slots in the order they start, see `think_floor`;
the same in every configuration) is the wall an epoch would take if every step, reset and close cost nothing:
what reuse can save is the wall above it.
Full run:  bunshin bench epoch --env webarena --tasks 4 --group 4 --iterations 3 --out bench-out/epoch
OSWorld:   bunshin bench epoch --env osworld --tasks 2 --group 4 --iterations 2 --out bench-out/epoch-osworld
"""
from __future__ import annotations

import collections
import gc
import heapq
import json
import os
import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym import adapter_for
from bunshin_gym.runtime import cpu_times, runtime
from bunshin_gym.rollout import (DriftingTracePolicy, StochasticTracePolicy, TailSpeculation, ThinkTimeModel,
                                 run_rollouts)
from bunshin_gym.speculation import (SelectorConfig, SpecToolSelector, TailConfig, TailSelector, TimingModel, Trajectory,
                                     TrajectoryStep)
from forkcore import host_memory_used, live_workspaces
from forkcore.accounting import meminfo
from forkcore.backends import KSM_DIR
from forkcore.ksm import KsmLeg, ksm_off, ksm_restored, ksm_state

CONFIGS = ("base", "cache", "spec", "cache_spec")
#: how many of a configuration's slowest steps "slowest_steps" lists with their diagnostics
SLOWEST_STEPS = 12


@dataclass
class Args:
    env: str = "BunshinWebArena-v0"
    """env id"""
    tasks: int = 4
    """number of tasks (spread over the env's task list; OSWorld: Calc and Writer tasks, see pick_tasks)"""
    group: int = 4
    """GRPO group size G (samples per task per iteration)"""
    iterations: int = 3
    """training iterations replayed"""
    concurrency: int = 8
    """most workspaces alive at once"""
    think_median_s: float = 2.0
    """think-time model: median seconds per action (stands for LLM generation)"""
    think_sigma: float = 0.5
    """think-time model: lognormal sigma"""
    perturb_p: float = 0.3
    """probability that a sample takes a detour (a candidate action) instead of the oracle's next action"""
    detour_skew: float = 1.0
    """Zipf exponent of the detour drawn (0: uniform over the candidates; see StochasticTracePolicy)"""
    drift_step: float = 0.0
    """policy drift: the detour probability drops by this each iteration (0: no drift; see DriftingTracePolicy)"""
    novel_from: int = 0
    """policy drift: from this iteration (1-based) on, the policy makes calls no earlier iteration made (0: never)"""
    novel_p: float = 0.25
    """policy drift: from `novel_from` on, the probability that a step is such a new call"""
    backend: str = "auto"
    """forkcore memory backend of every workspace ("private": CRIU's private copies)"""
    speculate_k: int = 3
    """speculative chain length"""
    speculate_min_idle_cpus: float = 0.5
    """a chain starts only while this many CPUs were idle over the last second (0: whatever the load)"""
    tail_quantile: float = 0.75
    """tail selection: speculate for live samples above this quantile of predicted remaining time"""
    configs: tuple[str, ...] = CONFIGS
    """configurations to run"""
    out: str = "bench-out/epoch"
    """output directory"""
    seed: int = 0
    """seed of the stochastic traces (same in every configuration)"""
    order: str = "shuffled"
    """order the configurations run in: "shuffled" (seeded by `seed`; the JSON's run_order) or "given" (the first
    one to run sees the coldest machine: it read ~850 MB low)"""
    settle_max_s: float = 45.0
    """most seconds to wait before each configuration for host memory to stop falling (its memory baseline,
    see `memory_once_freed`; 0: take it at once)"""


#: OSWorld tasks with slow tools (LibreOffice Calc/Writer: seconds per action, where reuse pays most), by family
SLOW_TOOL_PREFIXES = ("calc-", "writer-")


def pick_tasks(adapter, n: int) -> list[str]:
    """n tasks spread over the env's list; for OSWorld, Calc and Writer tasks alternately (slow tools)."""
    ids = adapter.task_ids()
    if adapter.name == "osworld":
        families = [[t for t in ids if t.startswith(p)] for p in SLOW_TOOL_PREFIXES]
        picked = [f[i] for i in range(max(map(len, families))) for f in families if i < len(f)]
        return picked[:n]
    step = max(1, len(ids) // n)
    return ids[::step][:n]


def run(args: Args, progress: bool = True) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    adapter = adapter_for(args.env)
    tasks = pick_tasks(adapter, args.tasks)
    oracles = {t: adapter.oracle_actions(adapter.load_task(t)) for t in tasks}
    think = ThinkTimeModel(args.think_median_s, args.think_sigma)
    if args.order not in ("shuffled", "given"):
        raise ValueError(f"order must be 'shuffled' or 'given', not {args.order!r}")
    for config in args.configs:
        if config not in CONFIGS:
            raise ValueError(f"unknown configuration {config!r}; choose from {CONFIGS}")
    order = list(args.configs)
    if args.order == "shuffled":
        random.Random(args.seed).shuffle(order)
    # the private backend's epoch runs with KSM off (run=2 unmerges everything, then 0), any other as KSM is; KSM's
    # previous run/pages_to_scan/sleep_millisecs come back when the run ends (exceptions too)
    with (ksm_off() if args.backend == "private" else ksm_restored()) as leg:
        # warm the task snapshots once: building them is set-up, not part of any configuration's epoch
        for t in tqdm(tasks, desc="task snapshots", disable=not progress):
            e = gym.make(args.env, task_id=t, backend=args.backend)
            e.reset()
            e.close()
        result = {"think_time": {"model": "lognormal", **asdict(think)}, "args": asdict(args), "tasks": tasks,
                  "run_order": order, "configs": {}}
        done: dict[str, dict] = {}
        for config in order:
            done[config] = run_config(args, config, tasks, oracles, think, progress, leg)
            # configurations stay in the given order (the first given is what the others compare with)
            result["configs"] = {c: done[c] for c in args.configs if c in done}
            result["reward_differences"] = reward_differences(result["configs"], tasks, args.group)
            result["rewards_identical"] = not result["reward_differences"]
            result["step_time_vs_first"] = step_time_vs_first(result["configs"])
            result["free_cache_vs_first"] = free_cache_vs_first(result["configs"], args.concurrency)
            result["ksm"] = leg.record()
            (out / "epoch.json").write_text(json.dumps(result, indent=1))
    result["ksm"] = leg.record()  # with ksm_restored_to
    (out / "epoch.json").write_text(json.dumps(result, indent=1))
    plot(result, out)
    return result


def run_config(args: Args, config: str, tasks, oracles, think, progress: bool, leg: KsmLeg | None = None) -> dict:
    # each configuration starts cold: no prefix cache, and no frozen standby clones (an earlier configuration's,
    # or another backend's, would serve this one's resets and sit in its memory baseline)
    runtime().reset_cache()
    runtime().standby.close()
    use_cache, use_spec = config in ("cache", "cache_spec"), config in ("spec", "cache_spec")
    adapter = adapter_for(args.env)
    recorded = [Trajectory(t, tuple(TrajectoryStep(adapter.canonical_action(a)) for a in actions))
                for t, actions in oracles.items()]
    baseline = memory_once_freed(max_s=args.settle_max_s)
    meminfo0 = meminfo()
    accounted0 = _accounted(meminfo0)
    peak, peak_accounted = [0], [0]
    sharing: list[int] = []  # KSM's pages_sharing (host-wide) at each memory sample
    at_peak: dict = {}  # what held memory when the peak was sampled
    running: list[list[float]] = []
    memory: list[list[float]] = []
    standby: list[list[float]] = []
    alive = [0]
    lock = threading.Lock()
    stop = threading.Event()
    t_start = time.monotonic()

    cpu0 = cpu_times()
    pools0 = runtime().standby.stats()

    def sampler():
        while not stop.is_set():
            m = meminfo()
            used = host_memory_used(m) - baseline
            peak_accounted[0] = max(peak_accounted[0], _accounted(m) - accounted0)
            with lock:
                running.append([round(time.monotonic() - t_start, 2), alive[0]])
            memory.append([running[-1][0], round(used / 2**20, 1)])
            pools = runtime().standby.stats()
            standby.append([running[-1][0], pools["frozen"], pools["reserved_mb"]])
            v = leg.sample() if leg is not None else ksm_state().get("pages_sharing")
            if v is not None:
                sharing.append(v)
            if used > peak[0]:
                peak[0] = used
                at_peak.update(t_s=running[-1][0], rollouts_running=alive[0], workspaces=live_workspaces(),
                               frozen_clones=pools["frozen"], standby_reserved_mb=pools["reserved_mb"],
                               bench_process_rss_mb=_own_rss_mb(), ksm_saved_mb=_ksm_saved_mb(),
                               meminfo_mb=_meminfo_grown_mb(meminfo0, m))
            time.sleep(0.5)

    mon = threading.Thread(target=sampler, daemon=True)
    mon.start()
    hit_rates, rewards, actions, step_cache, step_exec, spans, tail_steps = [], [], [], [], [], [], [0, 0]
    slow_steps: list[dict] = []
    action_errors: list[dict[str, str]] = []
    matched = predicted = started = skipped = retained_first = 0
    iterations, iteration_rewards, step_exec_p50, exec_all = [], [], [], []
    bar = tqdm(total=args.iterations * len(tasks) * args.group, desc=config, unit="rollout", disable=not progress)
    for it in range(args.iterations):
        selector = tail = None
        if use_spec:
            selector = SpecToolSelector(SelectorConfig(model="ngram")).fit(recorded)
            # timings come from rollouts recorded so far (none before iteration 1: every sample is a tail)
            timed = [t for t in recorded if t.iteration is not None]
            tail = TailSpeculation(TailSelector(TimingModel().fit(timed), TailConfig(quantile=args.tail_quantile)))
        envs_stats = []

        def policy(task_id, g, it=it):
            with lock:
                alive[0] += 1
            if args.drift_step or args.novel_from:
                return DriftingTracePolicy(oracles[task_id], it, args.perturb_p, args.drift_step,
                                           args.novel_from - 1 if args.novel_from else None, args.novel_p,
                                           args.detour_skew)
            return StochasticTracePolicy(oracles[task_id], args.perturb_p, args.detour_skew)

        def done(r):
            with lock:
                alive[0] -= 1
            bar.update(1)

        samples = [(t, g) for t in tasks for g in range(args.group)]
        rollouts = run_rollouts(args.env, samples, policy, think=think, concurrency=args.concurrency,
                                seed=args.seed * 1000 + it, on_progress=done, clock0=t_start, tail=tail,
                                env_kwargs={"cache": use_cache, "selector": selector, "speculate_k": args.speculate_k,
                                            "speculate_min_idle_cpus": args.speculate_min_idle_cpus,
                                            "stats_sink": envs_stats, "backend": args.backend})
        iterations.append(critical_path(rollouts, time.monotonic() - t_start - sum(i["wall_s"] for i in iterations),
                                        args.concurrency))
        steps = sum(len(r.steps) for r in rollouts)
        hit_rates.append(round(sum(r.hits for r in rollouts) / max(1, steps), 4))
        iteration_rewards.append(round(statistics.fmean(r.reward for r in rollouts), 4))
        exec_s = [s.exec_s for r in rollouts for s in r.steps]
        exec_all += exec_s
        step_exec_p50.append(round(statistics.median(exec_s), 4))
        rewards += [r.reward for r in rollouts]
        actions += [r.actions for r in rollouts]
        step_cache += [[served(c) for c in r.step_costs] for r in rollouts]
        action_errors += [{str(k): v[:300] for k, v in r.action_errors.items()} for r in rollouts]
        step_exec += [[round(s.exec_s, 4) for s in r.steps] for r in rollouts]
        slow_steps += [{"iteration": it + 1, "task": r.task_id, "sample": r.sample, "step": i,
                        "action": r.actions[i][:80], "exec_s": round(s.exec_s, 3), "diag": r.step_costs[i]["diag"]}
                       for r in rollouts for i, s in enumerate(r.steps) if i < len(r.step_costs)]
        slow_steps = sorted(slow_steps, key=lambda x: -x["exec_s"])[:SLOWEST_STEPS]
        spans += [[round(r.start_s, 2), round(r.reset_s, 3), round(r.end_s, 2)] for r in rollouts]
        for s in envs_stats:
            matched += s["matched"]
            predicted += s["matched"] + s["aborted"]
            started += s["predicted"]
            skipped += s["skipped"]
            retained_first += s["retained_first"]
        if tail is not None:
            decided = (tail.decisions["speculating"], tail.decisions["not_speculating"])
            tail_steps = [a + b for a, b in zip(tail_steps, decided)]
        recorded += [r.trajectory(it) for r in rollouts]
    wall = time.monotonic() - t_start
    pools1 = runtime().standby.stats()
    idle, total = (b - a for a, b in zip(cpu0, cpu_times()))
    busy = total - idle
    stop.set()
    mon.join()
    bar.close()
    return {"wall_s": round(wall, 2), "peak_memory_mb": round(peak[0] / 2**20, 1),
            "peak_memory_accounted_mb": round(peak_accounted[0] / 2**20, 1), "at_peak": at_peak,
            "ksm": {"mode": leg.mode if leg is not None else None, "samples": len(sharing),
                    "pages_sharing_max": max(sharing) if sharing else None,
                    "pages_sharing_last": sharing[-1] if sharing else None},
            "hit_rate_per_iteration": hit_rates,
            "spec_accuracy": round(matched / predicted, 4) if use_spec and predicted else None,
            "speculations_started": started if use_spec else None,
            "speculations_skipped": skipped if use_spec else None,
            "speculations_retained_first": retained_first if use_spec else None,
            "tail_steps_speculating_vs_not": tail_steps if use_spec else None,
            "cpu_busy_fraction": round(busy / max(total, 1), 3), "running_over_time": running,
            "memory_over_time_mb": memory, "standby_over_time": standby,
            "standby": {k: pools1[k] - pools0[k] for k in ("hits", "misses", "opened", "shrunk", "evicted")},
            "retained_snapshots": asdict(runtime().prefix_cache.pool.stats()),
            "reward_per_iteration": iteration_rewards,
            "step_exec_s_p50_per_iteration": step_exec_p50, "step_exec_s_p50": round(statistics.median(exec_all), 4),
            "rewards": rewards,
            "actions": actions, "action_errors": action_errors, "step_cache": step_cache, "step_exec_s": step_exec,
            "rollout_spans_s": spans, "slowest_steps": slow_steps,
            "iterations": iterations,
            "think_floor_s": round(sum(i["think_floor_s"] for i in iterations), 2)}


def _own_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


#: the kinds of used memory (/proc/meminfo) that processes and their kernel objects hold
ACCOUNTED = ("AnonPages", "Shmem", "SUnreclaim", "PageTables", "KernelStack")


def _accounted(m: dict[str, int]) -> int:
    return sum(m.get(k, 0) for k in ACCOUNTED)


def _meminfo_grown_mb(since: dict[str, int], now: dict[str, int]) -> dict[str, float]:
    """What grew from `since` to `now` in the kinds of memory the host's used memory is made of; "other": the
    growth of used memory none of them explains (e.g. pipe and socket buffers, driver memory)."""
    grown = {k: (now.get(k, 0) - since.get(k, 0)) / 2**20 for k in ACCOUNTED}
    grown["other"] = (host_memory_used(now) - host_memory_used(since)) / 2**20 - sum(grown.values())
    return {k: round(v, 1) for k, v in grown.items()}


def _ksm_saved_mb() -> float | None:
    """Memory KSM saves now (pages_sharing); None without KSM."""
    try:
        return round(int((KSM_DIR / "pages_sharing").read_text()) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError):
        return None


def memory_once_freed(max_s: float = 45.0, window_s: float = 5.0, still_mb: int = 24) -> int:
    """Host memory in use once what was just closed is freed: until it falls by less than `still_mb` over
    `window_s` (at most `max_s`). Memory goes over tens of seconds after a close, not at once (measured after
    the warm-up: 500 MB over 25 s, 300 MB of it AnonPages), and a baseline taken before it has gone makes that
    configuration's peak look smaller by what was still going."""
    gc.collect()
    used = host_memory_used()
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        time.sleep(window_s)
        now = host_memory_used()
        if now > used - (still_mb << 20):
            return min(now, used)
        used = now
    return used


def served(cost: dict) -> str:
    """How one step was served: its cache status, and where it restored a state, from what and with how many
    calls replayed (e.g. "miss:snapshot+2"); a step that failed with its error (e.g. "error: ExecutorUnreachable:
    ...": nothing was applied, so a reward that differs after it is explained)."""
    if cost.get("error"):
        return f"error: {cost['error'][:200]}"
    restore = cost.get("restore")
    return f"{cost['cache']}:{restore['source']}+{restore['replayed']}" if restore else str(cost["cache"])


def reward_differences(configs: dict, tasks: list[str], group: int) -> list[dict]:
    """The rollouts whose reward differs from the first configuration's (base in a full run). The same seeds
    give every configuration the same policies, so a difference means a step's result differed: where the
    actions first differ is where the observations did ("first_different_action"); None means the same calls
    ended with another reward (a state that diverged from its recording, or the evaluator's timing)."""
    names = list(configs)
    ref_name, ref = names[0], configs[names[0]]
    out = []
    for name in names[1:]:
        c = configs[name]
        for i, (want, got) in enumerate(zip(ref["rewards"], c["rewards"])):
            if want == got:
                continue
            a, b = ref["actions"][i], c["actions"][i]
            first = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
            if first is None and len(a) != len(b):
                first = min(len(a), len(b))
            iteration, j = divmod(i, len(tasks) * group)
            out.append({"config": name, "rollout": i, "iteration": iteration + 1, "task": tasks[j // group],
                        "sample": j % group, "rewards": {ref_name: want, name: got},
                        "first_different_action": first,
                        "step_cache": {ref_name: ref["step_cache"][i], name: c["step_cache"][i]},
                        "action_errors": {ref_name: ref["action_errors"][i], name: c["action_errors"][i]}})
    return out


def step_time_vs_first(configs: dict) -> dict:
    """Per configuration after the first, by how its steps were served (cache status): how many, and the
    seconds each took more than the same step of the same rollout in the first configuration (base in a full
    run), as a median and a sum: what hits saved, and what the machinery added to the steps it executed.
    Steps of rollouts whose actions differ from the first configuration's are left out."""
    names = list(configs)
    ref = configs[names[0]]
    out = {}
    for name in names[1:]:
        c = configs[name]
        deltas = collections.defaultdict(list)
        for i, (a, b) in enumerate(zip(ref["actions"], c["actions"])):
            if a != b:
                continue
            for status, ours, theirs in zip(c["step_cache"][i], c["step_exec_s"][i], ref["step_exec_s"][i]):
                deltas[status.split(":")[0]].append(ours - theirs)
        out[name] = {status: {"steps": len(d), "median_s": round(statistics.median(d), 4), "sum_s": round(sum(d), 2)}
                     for status, d in sorted(deltas.items())}
    return out


def free_cache_vs_first(configs: dict, concurrency: int) -> dict:
    """Per configuration after the first: the wall its epoch would take if each step it served as a hit cost
    nothing and every other step what it cost in the first configuration (base): each rollout's span there
    less those steps' seconds, scheduled iteration by iteration on the `concurrency` slots in the order the
    rollouts started (`on_slots`, as `think_floor`). The first configuration's spans under the same model give
    "first_model_s" (about its wall): "ratio" is the two's quotient — the least any cache could reach on these
    rollouts, whose slowest ones are often made of calls no earlier rollout ran. Where the two ran different
    actions, nothing is computed."""
    names = list(configs)
    ref = configs[names[0]]
    per_iteration = len(ref["rollout_spans_s"]) // max(1, len(ref["iterations"]))

    def model(spans: list[float]) -> list[float]:
        return [round(on_slots(spans[i:i + per_iteration], concurrency), 2)
                for i in range(0, len(spans), per_iteration)]

    first = model([end - start for start, _, end in ref["rollout_spans_s"]])
    out = {}
    for name in names[1:]:
        c = configs[name]
        if c["actions"] != ref["actions"]:
            continue
        spans = [end - start - sum(t for t, status in zip(ref["step_exec_s"][i], c["step_cache"][i])
                                   if status.split(":")[0] == "hit")
                 for i, (start, _, end) in enumerate(ref["rollout_spans_s"])]
        walls = model(spans)
        out[name] = {"wall_s": round(sum(walls), 2), "per_iteration_s": walls, "first_model_s": round(sum(first), 2),
                     "ratio": round(sum(walls) / sum(first), 4) if sum(first) else None}
    return out


def _sum_by(rows: list[dict], key: str, value: str) -> dict:
    """Sum of `value` over rows grouped by `key` (rows whose value is 0 left out)."""
    out: dict = collections.defaultdict(float)
    for r in rows:
        if r[value]:
            out[r[key]] += r[value]
    return {k: round(v, 2) for k, v in sorted(out.items())}


def think_floor(rollouts, concurrency: int) -> float:
    """The iteration's wall if every step, reset and close cost nothing: the rollouts' think times alone, each
    rollout taking the first of `concurrency` workspace slots to free up, in the order they were started (as
    `run_rollouts` hands the slots out). With more rollouts than slots, a slot runs several one after another."""
    return on_slots([sum(s.think_s for s in r.steps) for r in rollouts], concurrency)


def on_slots(durations: list[float], concurrency: int) -> float:
    """When the last of `durations` ends if each, in order, takes the first of `concurrency` slots to free up."""
    slots = [0.0] * concurrency
    for d in durations:
        heapq.heappush(slots, heapq.heappop(slots) + d)
    return max(slots)


def critical_path(rollouts, wall_s: float, concurrency: int) -> dict:
    """An iteration's wall and where its slowest rollout spent its time (think, steps, the rest: reset,
    make, close, waiting for a workspace slot; its longest step), and what the cache's machinery cost on
    the iteration's steps (counts by cache status, snapshots scheduled behind think time, seconds waiting for
    background snapshots, restoring)."""
    slow = max(rollouts, key=lambda r: r.end_s)
    think, execute = sum(s.think_s for s in slow.steps), sum(s.exec_s for s in slow.steps)
    longest = max(range(len(slow.steps)), key=lambda i: slow.steps[i].exec_s, default=None)
    costs = [c for r in rollouts for c in r.step_costs]
    return {"wall_s": round(wall_s, 2), "longest_think_s": round(max(sum(s.think_s for s in r.steps) for r in rollouts), 2),
            "think_floor_s": round(think_floor(rollouts, concurrency), 2),
            "slowest": {"task": slow.task_id, "sample": slow.sample, "start_s": round(slow.start_s, 2),
                        "reset_s": round(slow.reset_s, 2), "steps": len(slow.steps), "hits": slow.hits,
                        "think_s": round(think, 2), "exec_s": round(execute, 2),
                        "other_s": round(slow.end_s - slow.start_s - think - execute, 2),
                        "longest_step": None if longest is None else {
                            "action": slow.actions[longest][:80], "exec_s": round(slow.steps[longest].exec_s, 2),
                            "cache": slow.step_costs[longest]["cache"] if slow.step_costs else None}},
            "steps_by_cache_status": dict(collections.Counter(str(c["cache"]) for c in costs)),
            "snapshots_scheduled": sum(c.get("snapshot_scheduled", False) for c in costs),
            "background_wait_s": round(sum(c["background_wait_s"] for c in costs), 2),
            "background_wait_s_by_job": _sum_by(costs, "background_wait_jobs", "background_wait_s"),
            "restore_s": round(sum(c["restore_s"] for c in costs), 2),
            "restores_by_source": dict(collections.Counter(c["restore"]["source"] for c in costs if c["restore"])),
            "ran_alongside": sum(c.get("ran_alongside", False) for c in costs)}


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfgs = result["configs"]
    names = list(cfgs)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(names, [cfgs[n]["wall_s"] for n in names], color=["gray", "tab:blue", "tab:orange", "tab:green"][: len(names)])
    ax.set(ylabel="epoch wall time (s)", title="Replayed GRPO epoch (BunshinRL Fig. 8 style)")
    for i, n in enumerate(names):
        ax.text(i, cfgs[n]["wall_s"], f"{cfgs[n]['wall_s']:.0f}s", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(out / "epoch_wall.png", dpi=120)
    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
        pts = cfgs[n]["running_over_time"]
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=n)
    ax.set(xlabel="time (s)", ylabel="rollouts running", title="Rollouts still running (Fig. 10 style)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "epoch_running.png", dpi=120)
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        hr = cfgs[n]["hit_rate_per_iteration"]
        ax.plot(range(1, len(hr) + 1), hr, marker="o", label=n)
    ax.set(xlabel="iteration", ylabel="prefix-cache hit rate", ylim=(0, 1), title="Hit rate per iteration (Fig. 11 style)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "epoch_hits.png", dpi=120)
