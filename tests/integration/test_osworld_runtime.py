"""The runtime under BunshinOSWorld-v0, whose actions are timing-based: fresh, cached, forked and speculated
runs agree on the exact fields (`OSWorldAdapter.exact_fields`), a replay that no longer reproduces its
recording drops that subtree instead of serving it, and reset() stops speculation before it switches task."""
from __future__ import annotations

import dataclasses
import time

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym.speculation import SelectorConfig, SpecToolSelector, Trajectory, TrajectoryStep

pytestmark = [pytest.mark.criu, pytest.mark.desktop]
ENV_ID = "BunshinOSWorld-v0"
TASK = "edit-append-line"  # mousepad: append a line, save, DONE (judged on the file)


def _make(**kw):  # speculation starts whatever else runs on the machine
    return gym.make(ENV_ID, task_id=kw.pop("task_id", TASK), action_space="pyautogui", speculate_min_idle_cpus=0, **kw)


def _exact(env, obs) -> tuple:
    return tuple(obs[k] for k in env.unwrapped.adapter.exact_fields)


def _run(env, actions, **reset_kw) -> list:
    obs, _ = env.reset(**reset_kw)
    trace = [_exact(env, obs)]
    for a in actions:
        obs, r, term, trunc, _ = env.step(a)
        trace.append((_exact(env, obs), r, term, trunc))
        if term or trunc:
            break
    return trace


def _oracle() -> list[str]:
    from envs.osworld.env import OSWorldAdapter

    a = OSWorldAdapter()
    return a.oracle_actions(a.load_task(TASK))


def _selector(env, actions) -> SpecToolSelector:
    """A selector sure of `actions` (recorded 20 times: running a call ahead pays for a mismatch's restore)."""
    sigs = tuple(TrajectoryStep(env.unwrapped.adapter.canonical_action(a)) for a in actions)
    return SpecToolSelector(SelectorConfig(model="ngram")).fit([Trajectory(TASK, sigs)] * 20)


def test_fresh_cached_forked_and_speculated_runs_agree_on_the_exact_fields():
    actions = _oracle()
    fresh = _make(cache=False)
    cached = _make(diagnostics=True)
    try:
        reference = _run(fresh, actions)
        assert reference[-1][1:3] == (1.0, True), "the oracle solves the task"
        assert _run(cached, actions) == reference  # executes and records
        tree, history = cached.unwrapped.episode.tree, cached.unwrapped.history
        path = [tree.lookup(history[:i], count=False).node for i in range(1, len(history) + 1)]
        # a replay does not observe: it is priced at the step's seconds less the observation's (screenshot, a11y)
        assert all(0 < n.replay_s < n.cost_s for n in path), [(n.replay_s, n.cost_s) for n in path]
        assert _run(cached, actions) == reference  # served from the tree
        cached.reset()
        cached.step(actions[0])
        (clone,) = cached.fork(1)
        try:
            tail = []
            for a in actions[1:]:
                obs, r, term, trunc, _ = clone.step(a)
                tail.append((_exact(clone, obs), r, term, trunc))
            assert tail == reference[2:], "a fork continues like a fresh run"
        finally:
            clone.close()
        spec = _make(cache=False, selector=_selector(fresh, actions), diagnostics=True)
        try:
            assert _run(spec, actions) == reference, "speculated steps equal executed ones"
            assert spec.unwrapped.spec_stats["matched"] >= 1
        finally:
            spec.close()
    finally:
        fresh.close()
        cached.close()


@pytest.mark.parametrize("depth, field, sync", [(2, "accessibility_tree", False), (1, "last_action_error", False),
                                               (2, "accessibility_tree", True)])
def test_a_replay_that_differs_from_its_recording_drops_that_subtree(depth, field, sync):
    """Record two steps, then make one recording disagree with what the desktop does (as a timing-dependent
    app would): materialising the second state replays both calls, notices, drops the subtree and
    executes again — the step equals a fresh run and nothing stale is served. Each replayed call is checked
    on its `last_action_error` and the state reached, observed when the miss needs it, on every exact field
    (with background sync the hits are replayed as they come, without the miss waiting for them)."""
    from envs.osworld.env import OSWorldAdapter

    # text of its own per case: the process-wide tree must not already hold the earlier case's third step
    actions = [f"pyautogui.typewrite('abc{depth}{sync}')", "pyautogui.typewrite('def')", "pyautogui.press('enter')"]
    fresh = _make(cache=False)
    env = _make(diagnostics=True, background_sync=sync)  # without sync the miss replays both calls in one plan
    try:
        reference = _run(fresh, actions)
        _run(env, actions[:2])
        env.unwrapped.live_workspace()  # waits for a background snapshot, if the policy took one
        tree = env.unwrapped.episode.tree
        first = tree.lookup(env.unwrapped.history[:1], count=False).node
        for n in (first, *first.children.values()):
            tree.drop_snapshot(n)  # the second state is then only reachable by replaying both calls
        bad = tree.lookup(env.unwrapped.history[:depth], count=False).node
        obs = dict(bad.result.observation, **{field: "<recorded under other timing/>"})
        bad.result = dataclasses.replace(bad.result, observation=obs)
        env.reset()
        trace = [_exact(env, env.unwrapped.episode.last_obs)]
        infos = []
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            trace.append((_exact(env, obs), r, term, trunc))
            infos.append(info["bunshin"])
        assert infos[2].get("diverged") == 1 and infos[2]["diverged_fields"] == [field], infos[2]
        assert infos[2]["restores"]["replayed_unobserved"] >= 1, infos[2]["restores"]
        assert trace[3] == reference[3], "the step after the divergence equals a fresh run"
        assert tree.lookup(env.unwrapped.history[:depth], count=False).node is not bad
        assert OSWorldAdapter.exact_fields and "screenshot" not in OSWorldAdapter.exact_fields
    finally:
        fresh.close()
        env.close()


def test_a_background_sync_checks_the_state_it_reached_so_the_next_miss_does_not():
    """After a hit the background sync replays its call unobserved; with no later sync queued it observes the
    state reached there, behind the think time, so the next miss starts from a checked state at once."""
    actions = [f"pyautogui.typewrite('sync{time.time_ns() % 10**6}')", "pyautogui.press('enter')"]
    env = _make(diagnostics=True, background_sync=True)
    try:
        _run(env, actions[:1])  # executes and records the first call
        env.unwrapped.live_workspace()  # waits for a background snapshot, if the policy took one
        tree = env.unwrapped.episode.tree
        tree.drop_snapshot(tree.lookup(env.unwrapped.history, count=False).node)  # reachable by replay only
        env.reset()
        assert env.step(actions[0])[4]["bunshin"]["cache"] == "hit"
        episode = env.unwrapped.episode
        episode.restorer.wait_background()
        assert episode.restorer.stats["replayed_unobserved"] >= 1, episode.restorer.stats
        assert episode.restorer.holds(episode.node), "the sync reached the hit's state and checked it"
        info = env.step(actions[1])[4]["bunshin"]
        assert info["cache"] == "miss" and "verify_s" not in info, info
    finally:
        env.close()


def test_hits_that_end_the_episode_cancel_the_sync_nobody_will_use():
    """The sync of a hit is killed mid-call when the next hit ends the episode, and that last hit schedules
    none: no CPU goes to reaching a state no step builds on. The env stays usable after."""
    slow = f"import time; time.sleep(6)  # {time.time_ns()}"
    env = _make(diagnostics=True, background_sync=True)
    try:
        _run(env, [slow, "DONE"])  # executes and records both
        tree = env.unwrapped.episode.tree
        slow_node = tree.lookup(env.unwrapped.history[:1], count=False).node
        env.unwrapped.live_workspace()  # waits for a background snapshot, if the policy took one
        tree.drop_snapshot(slow_node)  # reachable by replay only
        env.reset()
        assert env.step(slow)[4]["bunshin"]["cache"] == "hit"
        restorer = env.unwrapped.episode.restorer
        deadline = time.monotonic() + 30
        while restorer._sync_ws is None and time.monotonic() < deadline:  # the sync is replaying the slow call
            time.sleep(0.05)
        assert restorer._sync_ws is not None, restorer.stats
        _, _, terminated, _, info = env.step("DONE")
        assert terminated and info["bunshin"]["cache"] == "hit", info["bunshin"]
        restorer.wait_background()
        assert restorer.stats["cancelled_syncs"] == 1 and restorer.stats["replayed_calls"] == 0, restorer.stats
        assert restorer.workspace is None and restorer._target is slow_node
        assert _run(env, [slow])[1][2] is False, "a new episode runs after the cancelled sync"
    finally:
        env.close()


def test_reset_stops_speculation_before_it_switches_task():
    """An in-flight speculative call is cut short (nothing recorded) or lands in the tree of the task it was
    started for, with that task's instruction, never the next task's."""
    slow = "import time; time.sleep(3)"
    actions = ["pyautogui.typewrite('x')", slow]
    probe = _make(cache=False)
    selector = _selector(probe, actions)
    probe.close()
    env = _make(selector=selector, diagnostics=True)
    try:
        obs, _ = env.reset()
        goal = obs["instruction"]
        _, _, _, _, info = env.step(actions[0])
        assert "started" in info["bunshin"].get("speculation", {}), info["bunshin"]
        tree, history = env.unwrapped.episode.tree, list(env.unwrapped.history)
        slow_sig = env.unwrapped.adapter.canonical_action(slow)
        obs, _ = env.reset(options={"task_id": "os-mkdir-nested"})
        assert obs["instruction"] != goal
        m = tree.lookup(history + [slow_sig], count=False)
        assert not m.hit or m.result.observation["instruction"] == goal
        assert tree.in_flight() == 0
    finally:
        env.close()


def test_a_mismatch_cuts_the_running_speculative_call_short():
    """The policy's call differs from the one the chain is running: that call is killed, not waited for, and
    nothing is recorded for it; the actual call gives what executing it fresh gives."""
    first, slow, other = "pyautogui.typewrite('ab')", "import time; time.sleep(60)", "pyautogui.typewrite('c')"
    probe = _make(cache=False)
    try:
        selector = _selector(probe, [first, slow])
        expected = _run(probe, [first, other])[2]
    finally:
        probe.close()
    env = _make(selector=selector, diagnostics=True)
    try:
        env.reset()
        _, _, _, _, info = env.step(first)
        assert "started" in info["bunshin"].get("speculation", {}), info["bunshin"]
        tree, node, history = env.unwrapped.episode.tree, env.unwrapped.episode.node, list(env.unwrapped.history)
        slow_sig = env.unwrapped.adapter.canonical_action(slow)
        deadline = time.monotonic() + 60
        while not tree.is_in_flight(node, slow_sig):
            assert time.monotonic() < deadline, "the chain never started its slow call"
            time.sleep(0.05)
        obs, reward, term, trunc, info = env.step(other)
        assert info["bunshin"]["speculation_match"] is False
        assert info["bunshin"]["speculation_stop_s"] < 30, "the mismatch waited for the 60 s call to end"
        assert (_exact(env, obs), reward, term, trunc) == expected
        assert not tree.lookup(history + [slow_sig], count=False).hit and tree.in_flight() == 0
    finally:
        env.close()
