"""Ray across nodes on a real 3-node cluster on this machine (bunshin_gym.cluster, bunshin_gym.local_cluster).

A head and two worker raylets in a network namespace made here (loopback only, usage stats off), each node with
its own BUNSHIN_STATE_DIR; the driver (tests/integration/ray_driver.py) runs inside the namespace; the cluster is
stopped by its own PIDs. The rewards are compared with one process running the same samples.
"""
from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("ray", reason="needs the ray extra (scripts/setup.sh installs it)")

from bunshin_gym.local_cluster import LocalCluster  # noqa: E402
from bunshin_gym.rollout import ThinkTimeModel, TracePolicy, run_rollouts  # noqa: E402
from tests.integration import ray_driver  # noqa: E402

pytestmark = [pytest.mark.criu, pytest.mark.browser, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def expected():
    """Rewards of every (task, sample) run in this one process."""
    samples = [(t, g) for t in ray_driver.TASKS for g in range(2)]
    runs = run_rollouts(ray_driver.ENV, samples, lambda t, g: TracePolicy(ray_driver.branches(t)[g]),
                        think=ThinkTimeModel(0))
    return {t: [r.reward for r in runs if r.task_id == t] for t in ray_driver.TASKS}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(nodes=3, cpus_per_node=2) as c:
        yield c
    assert not c._netns_pids()


def _drive(cluster: LocalCluster, scenario: str, tmp_path, timeout: float = 600) -> dict:
    out = tmp_path / f"{scenario}.json"
    r = cluster.python(["-m", "tests.integration.ray_driver", cluster.address, scenario, str(out)], timeout=timeout,
                       check=False, env={"PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return json.loads(out.read_text())


def test_a_grpo_epoch_on_three_nodes_matches_one_process_and_shares_records(cluster, expected, tmp_path):
    report = _drive(cluster, "epoch", tmp_path)
    assert report["nodes"] == 3
    for row in report["epoch"]:
        assert row["rewards"] == expected[row["task"]], row
        assert row["attempts"] == [row["node"]]  # one node ran the whole group: its forks were local
    assert len({row["node"] for row in report["epoch"]}) == 3, report["epoch"]  # spread by free memory
    # each task again, on a node that never ran it: every step is a record another node made, nothing executes
    # (a sample that waited on its group mate's lookup counts that step as "waited", not "hit")
    before, after = report["hub_after_epoch"], report["hub"]
    assert before["put"] == after["put"] > 0 and before["found"] == 0, (before, after)
    for row in report["moved"]:
        assert row["rewards"] == expected[row["task"]], row
        assert all(h > 0 for h in row["hits"]), row
    assert after["found"] == after["get"] - before["get"] > 0, (before, after)
    assert {tuple(t) for info in report["infos"] for t in info["tasks"]} == \
        {(ray_driver.ENV, t) for t in ray_driver.TASKS}
    assert len({info["state_dir"] for info in report["infos"]}) == 3  # each node its own state


def test_a_slot_forks_locally_and_onto_other_nodes_by_shipping_or_replay(cluster, tmp_path):
    report = _drive(cluster, "slots", tmp_path)
    vias = {name: f["via"] for name, f in report["fork"].items()}
    assert vias == {"local": "local", "shipped": "ship", "replayed": "replay", "warm": "replay",
                    "shipped_warm": "ship"}, report["fork"]
    assert report["fork"]["shipped"]["timings"]["mb"] > 50, report["fork"]  # images and layers, moved by Ray
    ends = report["slots"]
    assert {e["node"] for e in ends.values()} == {0, 1, 2}
    # the shipped workspace executed the last step itself, on the page the source had reached
    assert ends["shipped"]["cache"] == "miss" and ends["shipped"]["url"] == report["url_before_fork"], ends
    for name, end in ends.items():  # every clone continues from the source's state: the same end and reward
        assert end["reward"] == 1.0 and end["terminated"], (name, ends)
        assert end["url"] == ends["shipped"]["url"] and end["steps"] == ends["source"]["steps"], (name, ends)
    assert report["hub"]["found"] > 0  # the replaying nodes served records, they did not execute again
    assert [["BunshinWebArena-v0", ray_driver.SLOT_TASK]] == [t for t in report["infos"][1]["tasks"]
                                                              if t[1] == ray_driver.SLOT_TASK]  # node 1 is warm


def test_a_node_dying_mid_epoch_reschedules_its_groups_and_records_nothing_wrong(cluster, expected, tmp_path):
    out = tmp_path / "death.json"
    driver = cluster.popen(["-m", "tests.integration.ray_driver", cluster.address, "death", str(out)],
                           env={"PYTHONPATH": ROOT}, stdout=-1, stderr=-1, text=True)
    try:
        assert driver.stdout.readline().strip() == "submitted"
        time.sleep(5)  # the groups are under way (building their task snapshots or stepping)
        cluster.kill_node(2)
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, stdout[-3000:] + stderr[-5000:]
    report = json.loads(out.read_text())
    assert report["alive"][2] is False
    for row in report["epoch"]:
        assert row["rewards"] == expected[row["task"]], row
        assert row["node"] != 2
    assert any(2 in row["attempts"] for row in report["epoch"]), report["epoch"]  # one of them was there
    for row in report["again"]:  # served from the records: identical, so nothing wrong was recorded
        assert row["rewards"] == expected[row["task"]], row
