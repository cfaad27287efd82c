"""The Ray driver of tests/integration/test_cluster.py: runs inside the LocalCluster's network namespace.

`python -m tests.integration.ray_driver ADDRESS SCENARIO OUT.json`; prints "submitted" once its groups run.
"""
from __future__ import annotations

import json
import sys

import bunshin_gym
from bunshin_gym.cluster import Cluster
from bunshin_gym.rollout import ThinkTimeModel, TracePolicy

ENV = "BunshinWebArena-v0"
TASKS = ["0", "1", "2"]


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
        report["hub"] = cluster.hub_stats()
        report["infos"] = cluster.refresh()
    finally:
        cluster.close()
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
