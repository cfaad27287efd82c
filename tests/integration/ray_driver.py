"""The Ray driver of tests/integration/test_cluster.py: runs inside the LocalCluster's network namespace.

`python -m tests.integration.ray_driver ADDRESS SCENARIO OUT.json`; prints "submitted" once its groups run.
"""
from __future__ import annotations

import json
import sys
import time

import bunshin_gym
from bunshin_gym.cluster import Cluster
from bunshin_gym.rollout import ThinkTimeModel, TracePolicy

ENV = "BunshinWebArena-v0"
TASKS = ["0", "1", "2"]
SLOT_TASK = "5"  # click, click, click, stop


def branches(task: str) -> list[list[str]]:
    """Sample 0 answers right, sample 1 wrong (so rewards tell the samples apart)."""
    adapter = bunshin_gym.adapter_for(ENV)
    oracle = adapter.oracle_actions(adapter.load_task(task))
    return [oracle, oracle[:-1] + ["stop [nobody]"]]


def policy(task: str, g: int) -> TracePolicy:
    return TracePolicy(branches(task)[g])


def summary(results) -> list[dict]:
    return [{"task": r.task_id, "node": r.node, "attempts": r.attempts, "rewards": [x.reward for x in r.rollouts],
             "hits": [x.hits for x in r.rollouts], "misses": [x.misses for x in r.rollouts]} for r in results]


def main(address: str, scenario: str, out: str) -> None:
    cluster = Cluster(address)
    report: dict = {"nodes": len(cluster.hosts)}
    try:
        if scenario == "epoch":
            # one group per task, placed by the cluster; then each task again on another node: all shared hits
            print("submitted", flush=True)
            first = cluster.run_groups(ENV, TASKS, 2, policy, think=ThinkTimeModel(0))
            report["epoch"] = summary(first)
            report["hub_after_epoch"] = cluster.hub_stats()
            moved = [(r.node + 1) % len(cluster.hosts) for r in first]
            report["moved"] = summary(cluster.run_groups(ENV, TASKS, 2, policy, think=ThinkTimeModel(0), on=moved))
        elif scenario == "death":
            # think time keeps the groups running while the test kills a node
            print("submitted", flush=True)
            results = cluster.run_groups(ENV, TASKS, 2, policy, think=ThinkTimeModel(1.5, sigma=0.1))
            report["epoch"] = summary(results)
            report["alive"] = cluster.alive
            again = cluster.run_groups(ENV, TASKS, 2, policy, think=ThinkTimeModel(0))
            report["again"] = summary(again)
        elif scenario == "slots":
            # one env on node 0, all but its last action in; forks: local, onto node 1 (cold: shipped), onto
            # node 2 by replay (cold: node 2 builds the task snapshot), onto node 1 again (warm: replayed), onto
            # node 2 shipped although it holds its own task snapshot
            actions = bunshin_gym.adapter_for(ENV).oracle_actions(bunshin_gym.adapter_for(ENV).load_task(SLOT_TASK))
            src = cluster.make(ENV, node=0, task_id=SLOT_TASK, diagnostics=True)
            src.reset(seed=0)
            for a in actions[:-1]:
                obs = src.step(a)[0]
            report["url_before_fork"] = obs["url"]
            forks, report["fork"] = {}, {}
            for name, node, via in (("local", None, "auto"), ("shipped", 1, "auto"), ("replayed", 2, "replay"),
                                    ("warm", 1, "auto"), ("shipped_warm", 2, "ship")):
                t0 = time.perf_counter()
                (forks[name],) = src.fork(1, node=node, via=via)
                report["fork"][name] = {"s": time.perf_counter() - t0, "via": forks[name].via,
                                        "timings": forks[name].fork_timings}
            ends = {}
            # the shipped clone ends first: its last step is executed there (a miss), on the shipped workspace
            for name, slot in [("shipped", forks.pop("shipped")), *forks.items(), ("source", src)]:
                obs, reward, term, _, info = slot.step(actions[-1])
                ends[name] = {"reward": reward, "terminated": term, "url": obs["url"], "steps": info["elapsed_steps"],
                              "node": slot.node, "cache": info["bunshin"]["cache"]}
                slot.close()
            report["slots"] = ends
        report["hub"] = cluster.hub_stats()
        report["infos"] = cluster.refresh()
    finally:
        cluster.close()
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
