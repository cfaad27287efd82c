"""Rollouts and the benchmarks at CI scale: results never depend on cache or speculation."""
from __future__ import annotations

import json

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401

pytestmark = [pytest.mark.criu, pytest.mark.browser]


def test_speculation_gives_the_same_steps_as_fresh_execution():
    from bunshin_gym.speculation import SelectorConfig, SpecToolSelector, Trajectory, TrajectoryStep

    from .test_webarena_gym import TASK, _run

    fresh = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    adapter = fresh.unwrapped.adapter
    oracle = adapter.oracle_actions(adapter.load_task(TASK))
    sigs = [adapter.canonical_action(a) for a in oracle]
    # recorded 20 times: sure enough of each next call that running it ahead pays for a mismatch's restore
    oracle_trajectory = Trajectory(TASK, tuple(map(TrajectoryStep, sigs)))
    selector = SpecToolSelector(SelectorConfig(model="ngram")).fit([oracle_trajectory] * 20)
    spec = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False, selector=selector, diagnostics=True,
                    speculate_min_idle_cpus=0)  # speculate whatever else runs on the machine
    detour = oracle[:1] + ["scroll [down]"] + oracle[1:]  # the chain mispredicts once: abort, then recover
    try:
        for actions in (oracle, detour):
            assert _run(spec, actions) == _run(fresh, actions)
        stats = spec.unwrapped.spec_stats
        assert stats["matched"] > 0 and stats["aborted"] > 0 and stats["adopted"] > 0
    finally:
        fresh.close()
        spec.close()


def test_epoch_benchmark_rewards_are_identical_across_configurations(tmp_path):
    from benchmarks.epoch_bench import Args, run

    result = run(Args(tasks=1, group=2, iterations=2, concurrency=2, think_median_s=0.3, out=str(tmp_path),
                      settle_max_s=5.0), progress=False)
    cfgs = result["configs"]
    assert set(cfgs) == {"base", "cache", "spec", "cache_spec"}
    rewards = [c["rewards"] for c in cfgs.values()]
    assert result["rewards_identical"], result["reward_differences"]
    assert all(r == rewards[0] for r in rewards) and len(rewards[0]) == 4
    # how each step was served: every step has a status, and the cache's iteration 2 has hits
    assert [len(s) for s in cfgs["cache"]["step_cache"]] == [len(a) for a in cfgs["cache"]["actions"]]
    assert [len(s) for s in cfgs["cache"]["step_exec_s"]] == [len(a) for a in cfgs["cache"]["actions"]]
    assert "hit" in sum(cfgs["cache"]["step_cache"][2:], [])
    assert cfgs["base"]["hit_rate_per_iteration"] == [0.0, 0.0]
    assert cfgs["cache"]["hit_rate_per_iteration"][1] > 0, "iteration 2 replays iteration 1's prefixes"
    # the speculator weighed a chain at steps of every iteration; whether one pays depends on the recorded costs
    spec = cfgs["spec"]
    assert spec["speculations_started"] + spec["speculations_skipped"] > 0
    assert spec["spec_accuracy"] is None or spec["speculations_started"] > 0
    # every step of every sample got a tail decision (which samples it picks: test_speculation's TailSelector
    # tests; two samples stepping in lockstep tie, and ties all speculate)
    speculating, not_speculating = cfgs["spec"]["tail_steps_speculating_vs_not"]
    assert speculating > 0 and speculating + not_speculating == sum(map(len, cfgs["spec"]["actions"]))
    for c in cfgs.values():  # each iteration's critical path: its slowest rollout, within the iteration's wall
        assert len(c["iterations"]) == 2 and 0 < c["think_floor_s"] < c["wall_s"]
        assert len(c["action_errors"]) == len(c["actions"])  # per rollout: step index -> the error it reported
        assert all(0 <= int(i) < len(acts) and err for errs, acts in zip(c["action_errors"], c["actions"])
                   for i, err in errs.items())
        assert c["peak_memory_mb"] <= 0 or (c["at_peak"]["bench_process_rss_mb"] > 0
                                            and c["at_peak"]["workspaces"] >= 0), c["at_peak"]
        assert c["peak_memory_accounted_mb"] > 0, "its workspaces' processes hold memory above its start"
        for it in c["iterations"]:
            slow = it["slowest"]
            assert slow["think_s"] <= it["longest_think_s"] <= it["think_floor_s"] < it["wall_s"] and slow["other_s"] >= 0
            assert slow["think_s"] + slow["exec_s"] + slow["other_s"] <= it["wall_s"] + 0.05
            assert 0 < slow["longest_step"]["exec_s"] <= slow["exec_s"]
            assert it["background_wait_s"] >= 0 and it["restore_s"] >= 0
            by_job = it["background_wait_s_by_job"]
            assert abs(sum(by_job.values()) - it["background_wait_s"]) < 0.05 * len(by_job) + 0.01, by_job
            assert {k for job in by_job for k in job.split("+")} <= {"snapshot", "sync", "reset"}, by_job
            assert it["ran_alongside"] <= it["steps_by_cache_status"].get("waited", 0) + \
                it["steps_by_cache_status"].get("miss", 0)
            assert sum(it["restores_by_source"].values()) <= sum(it["steps_by_cache_status"].values())
        assert sum(n for it in c["iterations"] for n in it["steps_by_cache_status"].values()) == sum(map(len, c["actions"]))
    assert "hit" not in cfgs["base"]["iterations"][1]["steps_by_cache_status"]
    assert cfgs["cache"]["iterations"][1]["steps_by_cache_status"]["hit"] > 0
    on_disk = json.loads((tmp_path / "epoch.json").read_text())
    assert on_disk["configs"]["cache"]["wall_s"] > 0
    for png in ("epoch_wall.png", "epoch_running.png", "epoch_hits.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_fork_benchmark_writes_rows_and_plot(tmp_path):
    from benchmarks.fork_bench import Args, run

    rows = run(Args(out=str(tmp_path), clones=(1, 2), backends=("private", "memfile"), hold_mb=16, browser=False,
                    settle_max_s=1.0, standby_takes=2))
    assert sorted((r["backend"], r["clones"], r["standby"]) for r in rows) == sorted([
        ("private", 1, False), ("private", 2, False), ("private", 1, True),
        ("memfile", 1, False), ("memfile", 2, False), ("memfile", 1, True)])
    # alternated (ABBA), so neither backend always runs first; the private leg shares nothing through KSM
    assert [(r["backend"], r["clones"]) for r in rows if not r["standby"]] == [
        ("private", 1), ("memfile", 1), ("memfile", 2), ("private", 2)]
    assert all(r["ksm"]["pages_sharing_max"] in (0, None) for r in rows if r["backend"] == "private")
    restores = [r for r in rows if not r["standby"]]
    assert all(r["fork_p50_s"] > 0 and r["pss_mb"] > 0 and r["critical_path_s"] > r["fork_p50_s"] for r in restores)
    assert all(0 < r["critical_path_s"] for r in rows if r["standby"])
    assert json.loads((tmp_path / "fork.json").read_text()) == rows
    assert (tmp_path / "fork.png").stat().st_size > 1000
