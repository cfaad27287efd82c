"""The epoch benchmark's report of rewards that differ between configurations, and its think floor (synthetic runs,
no env)."""
from benchmarks.epoch_bench import free_cache_vs_first, reward_differences, served, step_time_vs_first, think_floor
from bunshin_gym.rollout import Rollout
from bunshin_gym.speculation import TrajectoryStep


def _config(rewards, actions, step_cache, action_errors=None):
    return {"rewards": rewards, "actions": actions, "step_cache": step_cache,
            "action_errors": action_errors or [{}] * len(rewards)}


def test_differing_rewards_name_the_rollout_and_where_its_actions_diverged():
    tasks, group = ["t0", "t1"], 2  # 4 rollouts per iteration, task-major
    acts = [["a", "b", "DONE"]] * 8
    base = _config([1.0] * 8, acts, [["miss"] * 3] * 8)
    cached = _config([1.0] * 5 + [0.0] + [1.0] * 2,  # iteration 2, t0 sample 1: same actions, another reward
                     acts, [["miss"] * 3] * 5 + [["hit", "miss:snapshot+1", "miss"]] + [["miss"] * 3] * 2,
                     [{}] * 5 + [{"1": "TimeoutError: the file was not written"}] + [{}] * 2)
    detoured = _config([0.0] + [1.0] * 7, [["a", "x", "DONE"]] + acts[1:], [["miss"] * 3] * 8)
    diffs = reward_differences({"base": base, "cache": cached, "spec": detoured, "same": base}, tasks, group)
    assert diffs == [
        {"config": "cache", "rollout": 5, "iteration": 2, "task": "t0", "sample": 1,
         "rewards": {"base": 1.0, "cache": 0.0}, "first_different_action": None,
         "step_cache": {"base": ["miss"] * 3, "cache": ["hit", "miss:snapshot+1", "miss"]},
         "action_errors": {"base": {}, "cache": {"1": "TimeoutError: the file was not written"}}},
        {"config": "spec", "rollout": 0, "iteration": 1, "task": "t0", "sample": 0,
         "rewards": {"base": 1.0, "spec": 0.0}, "first_different_action": 1,
         "step_cache": {"base": ["miss"] * 3, "spec": ["miss"] * 3}, "action_errors": {"base": {}, "spec": {}}}]


def test_a_rollout_cut_short_differs_where_the_shorter_one_ends():
    base = _config([1.0], [["a", "b", "DONE"]], [["miss"] * 3])
    short = _config([0.0], [["a", "b"]], [["miss"] * 2])
    assert reward_differences({"base": base, "cache": short}, ["t"], 1)[0]["first_different_action"] == 2
    assert reward_differences({"base": base, "cache": base}, ["t"], 1) == []


def test_a_step_is_described_by_its_status_and_any_restore():
    assert served({"cache": "hit", "restore": None}) == "hit"
    assert served({"cache": "miss", "restore": {"source": "standby", "replayed": 3, "s": 0.2}}) == "miss:standby+3"
    assert served({"cache": None, "restore": None}) == "None"


def test_a_failed_step_is_reported_with_its_error():
    assert served({"cache": "error", "restore": None, "error": "ExecutorUnreachable: call timed out"}) == \
        "error: ExecutorUnreachable: call timed out"
    assert served({"cache": "miss", "restore": {"source": "standby", "replayed": 4}, "error": None}) == \
        "miss:standby+4"


def _rollout(*think_s: float) -> Rollout:
    return Rollout("t", 0, steps=[TrajectoryStep("noop", t, 0.0) for t in think_s])


def test_the_think_floor_runs_rollouts_beyond_the_slots_one_after_another():
    rollouts = [_rollout(10.0), _rollout(4.0, 4.0), _rollout(3.0), _rollout(6.0)]
    # two slots: 10 | 8, then 3 takes the slot free at 8 (-> 11), then 6 the slot free at 10 (-> 16)
    assert think_floor(rollouts, 2) == 16.0
    assert think_floor(rollouts, 4) == 10.0, "as many slots as rollouts: the longest think"


def test_step_times_compare_the_same_step_of_the_same_rollout_by_how_it_was_served():
    base = {"actions": [["a", "b"], ["a", "c"]], "step_cache": [["miss", "miss"], ["miss", "miss"]],
            "step_exec_s": [[1.0, 2.0], [1.0, 3.0]]}
    cached = {"actions": [["a", "b"], ["a", "d"]], "step_cache": [["hit", "miss:standby+0"], ["miss", "miss"]],
              "step_exec_s": [[0.1, 2.5], [9.0, 9.0]]}
    got = step_time_vs_first({"base": base, "cache": cached})["cache"]
    # the second rollout's actions differ (d vs c): not compared
    assert got == {"hit": {"steps": 1, "median_s": -0.9, "sum_s": -0.9},
                   "miss": {"steps": 1, "median_s": 0.5, "sum_s": 0.5}}


def test_a_free_cache_saves_the_first_configurations_seconds_of_the_hit_steps_on_the_same_slots():
    # 2 iterations of 3 rollouts on 2 slots; spans and step seconds from the first configuration (base)
    base = {"iterations": [{}, {}], "actions": [["a", "b"]] * 6,
            "rollout_spans_s": [[0, 0.1, 10], [0, 0.1, 6], [0, 0.1, 5], [20, 0.1, 28], [20, 0.1, 24], [20, 0.1, 22]],
            "step_exec_s": [[2.0, 1.0]] * 6, "step_cache": [["miss", "miss"]] * 6}
    cached = {"actions": base["actions"], "step_cache": [["hit", "miss"], ["miss"] * 2, ["hit", "hit"],
                                                         ["miss"] * 2, ["hit", "miss:standby+1"], ["waited", "miss"]]}
    detoured = {"actions": [["a", "x"]] + base["actions"][1:], "step_cache": cached["step_cache"]}
    out = free_cache_vs_first({"base": base, "cache": cached, "spec": detoured}, 2)
    # base: 10 | 6, then 5 on the slot free at 6 -> 11; 8 | 4, then 2 at 4 -> 8: 19 in all
    # cache: 8 | 6, then 5 - 3 = 2 at 6 -> 8; 8 | 4 - 2 = 2, then 2 (waited is no hit) at 2 -> 8: 16
    assert out["cache"] == {"wall_s": 16.0, "per_iteration_s": [8.0, 8.0], "first_model_s": 19.0,
                            "ratio": round(16 / 19, 4)}
    assert "spec" not in out, "rollouts that ran other actions are not compared"
