"""BunshinWebArena-v0 through gym.make: check_env, prefix-cache correctness (differential), fork, bad input."""
from __future__ import annotations

import hashlib
import random

import gymnasium as gym
import numpy as np
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu, pytest.mark.browser]
TASK = "40"  # write a review: mutates the database, judged by program_html


def _digest(obs: dict) -> tuple:
    return (obs["url"], obs["axtree"], tuple(obs["open_pages_urls"]), obs["last_action_error"],
            hashlib.sha256(np.ascontiguousarray(obs["screenshot"]).tobytes()).hexdigest())


def _run(env, actions):
    obs, _ = env.reset()
    trace = [_digest(obs)]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        trace.append((_digest(obs), r, term, trunc))
        if term or trunc:
            break
    return trace


def _random_trajectories(env, n: int, length: int, seed: int) -> list[list[str]]:
    """Random walks over the candidate actions, replayed on a fresh env (no cache) to collect them."""
    rng = random.Random(seed)
    adapter = env.unwrapped.adapter
    oracle = adapter.oracle_actions(adapter.load_task(TASK))
    trajs = [oracle]
    for _ in range(n):
        prefix = oracle[: rng.randint(0, len(oracle) - 1)]
        obs, _ = env.reset()
        for a in prefix:
            obs, *_ = env.step(a)
        walk = list(prefix)
        for _ in range(length):
            a = rng.choice(adapter.candidate_actions(obs))
            obs, r, term, trunc, _ = env.step(a)
            walk.append(a)
            if term or trunc:
                break
        trajs.append(walk)
    return trajs


def test_check_env_passes_on_what_gym_make_returns():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("BunshinWebArena-v0", task_id=TASK)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_cached_and_forked_steps_equal_fresh_execution():
    fresh = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    cached = gym.make("BunshinWebArena-v0", task_id=TASK, cache=True, diagnostics=True)
    try:
        trajs = _random_trajectories(fresh, n=3, length=3, seed=7)
        reference = [_run(fresh, t) for t in trajs]
        first = [_run(cached, t) for t in trajs]  # records (misses, replays)
        second = [_run(cached, t) for t in trajs]  # served from the tree
        assert first == reference and second == reference
        assert reference[0][-1][1] == 1.0, "the oracle trajectory earns reward 1"
        # fork mid-episode: the clone continues exactly like a fresh run of the same actions
        t = trajs[0]
        cached.reset()
        for a in t[:2]:
            cached.step(a)
        (clone,) = cached.fork(1)
        tail = []
        for a in t[2:]:
            obs, r, term, trunc, _ = clone.step(a)
            tail.append((_digest(obs), r, term, trunc))
        clone.close()
        assert tail == reference[0][3:]
    finally:
        fresh.close()
        cached.close()


def test_a_broken_cache_key_is_caught_by_the_differential_check():
    """Dropping the arguments from the key makes different actions collide; the comparison must notice."""
    fresh = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    broken = gym.make("BunshinWebArena-v0", task_id=TASK, cache=True)
    adapter = broken.unwrapped.adapter
    real = adapter.canonical_action
    adapter.canonical_action = lambda a: "BROKEN " + real(a).split(" ")[0]  # e.g. every click is the same
    try:
        obs, _ = fresh.reset()
        links = [a for a in adapter.candidate_actions(obs) if a.startswith("click")][:2]
        assert len(links) == 2
        # the broken key also maps to a new tree (different signatures), so record link 0 then ask for link 1
        _run(broken, [links[0]])
        served = _run(broken, [links[1]])
        truth = _run(fresh, [links[1]])
        assert served != truth, "a wrong cache key served a wrong observation and the check noticed"
    finally:
        fresh.close()
        broken.close()


def test_fork_gives_isolated_envs_in_the_same_state():
    env = gym.make("BunshinWebArena-v0", task_id=TASK)
    try:
        env.reset()
        a, b = env.fork(2)
        oa, *_ = a.step("goto [__SHOPPING__/cart]".replace("__SHOPPING__", "http://127.0.0.1:7770"))
        ob, *_ = b.step("scroll [down]")
        assert oa["url"].endswith("/cart") and not ob["url"].endswith("/cart")
        assert a.unwrapped.elapsed_steps == b.unwrapped.elapsed_steps == 1
        assert env.unwrapped.elapsed_steps == 0
        a.close()
        b.close()
    finally:
        env.close()


def test_an_env_in_lockstep_runs_the_call_in_flight_too_and_goes_on_from_its_own_workspace():
    """Two group rollouts at the same state take the same action: the second runs it as well rather than wait
    and catch up afterwards, gets the recorded result, and its next step runs where it is: nothing restored."""
    import threading
    import time

    from bunshin_gym.env import reset_prefix_cache

    reset_prefix_cache()  # earlier tests recorded this task's oracle
    a, b = (gym.make("BunshinWebArena-v0", task_id=TASK, diagnostics=True) for _ in range(2))
    ws_a = None
    try:
        for env in (a, b):
            env.reset()
            env.unwrapped.live_workspace()  # both hold the initial state, as lockstep rollouts do
        adapter = a.unwrapped.adapter
        first, second = adapter.oracle_actions(adapter.load_task(TASK))[:2]
        ws_a, tree = a.unwrapped.live_workspace(), a.unwrapped.episode.tree
        stepped: dict = {}
        leader = threading.Thread(target=lambda: stepped.update(a=a.step(first)))
        leader.start()
        deadline = time.monotonic() + 30
        while not tree.is_in_flight(tree.root, adapter.canonical_action(first)):
            assert time.monotonic() < deadline and leader.is_alive(), "a's call never was in flight"
            time.sleep(0.002)
        ws_a._cgroups.freeze()  # a's call stays in flight (frozen mid-call) until thawed
        threading.Timer(3.0, ws_a._cgroups.thaw).start()
        obs_b, *_, info_b = b.step(first)
        leader.join(60)
        diag_b = info_b["bunshin"]
        assert diag_b["cache"] == "waited" and diag_b.get("ran_alongside"), diag_b
        assert "alongside_differed" not in diag_b and "restore" not in diag_b, diag_b
        assert _digest(obs_b) == _digest(stepped["a"][0]), "b was served a's record"
        *_, info_b = b.step(second)
        assert info_b["bunshin"]["cache"] == "miss" and "restore" not in info_b["bunshin"], info_b["bunshin"]
    finally:
        if ws_a is not None and ws_a.alive:
            ws_a._cgroups.thaw()
        a.close()
        b.close()


def test_a_forked_env_opens_new_tabs_in_its_restored_browser():
    """new_tab + goto in a clone, with the cache off so the step really runs: each new tab is a new renderer
    forked by the restored Chromium (what crashed with Chromium 156 on PKU CPUs)."""
    env = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    try:
        env.reset()
        (clone,) = env.fork(1)
        try:
            for i, path in enumerate(("/cart", "/customer/account")):
                obs, _, _, _, info = clone.step("new_tab")
                assert info["last_action_error"] == "" and len(obs["open_pages_urls"]) == 2 + i
                obs, _, _, _, info = clone.step(f"goto [http://127.0.0.1:7770{path}]")
                assert info["last_action_error"] == "" and obs["url"].endswith(path) and obs["axtree"], info
        finally:
            clone.close()
        obs, *_ = env.step("scroll [down]")
        assert len(obs["open_pages_urls"]) == 1, "the source env has its own browser"
    finally:
        env.close()


def test_a_shipped_episode_continues_in_another_env_from_the_live_state():
    """bunshin_gym.shipping, in one process (tests/integration/test_cluster.py ships between Ray nodes): with the
    cache off every step really runs, so the receiver's steps run on the unpacked workspace."""
    from bunshin_gym.shipping import pack_episode, unpack_episode

    env = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    other = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False, viewport=(800, 600))
    try:
        env.reset()
        env.step("goto [http://127.0.0.1:7770/cart]")
        parcel = pack_episode(env)
        assert [sig for sig, _, _ in parcel.path] == parcel.history == ["goto [http://127.0.0.1:7770/cart]"]
        with pytest.raises(ValueError, match="settings"):
            unpack_episode(other, parcel)
        assert other.reset()[0]["screenshot"].shape == (600, 800, 3)  # refused, and still usable
        receiver = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
        try:
            unpack_episode(receiver, parcel)
            obs, _, _, _, info = receiver.step("scroll [down]")
            assert obs["url"].endswith("/cart") and info["last_action_error"] == "" and info["elapsed_steps"] == 2
            obs, *_ = env.step("goto [http://127.0.0.1:7770/customer/account]")
            assert receiver.step("scroll [down]")[0]["url"].endswith("/cart"), "the envs share a workspace"
        finally:
            receiver.close()
    finally:
        env.close()
        other.close()


def test_task_id_0_is_a_task_and_an_unknown_backend_fails_at_construction():
    env = gym.make("BunshinWebArena-v0", task_id=0)
    assert env.unwrapped._default_task.id == "0", "0 names task 0, it does not mean 'a random task'"
    env.close()
    with pytest.raises(ValueError, match="backend='nope': choose one of auto, kmod"):
        gym.make("BunshinWebArena-v0", task_id="0", backend="nope")


def test_envs_with_another_viewport_share_no_snapshot_and_no_cached_step():
    """Adapter settings that change observations are part of the identity: an 800x600 env of a task that a
    default env already ran gets its own snapshot and misses (it used to fork the 1280x720 snapshot and be
    served 1280x720 hits against a (600, 800, 3) space)."""
    default = gym.make("BunshinWebArena-v0", task_id=TASK, diagnostics=True)
    small = gym.make("BunshinWebArena-v0", task_id=TASK, viewport=(800, 600), diagnostics=True)
    try:
        default.reset()
        default.step("scroll [down]")
        obs, _ = small.reset()
        assert obs["screenshot"].shape == (600, 800, 3)
        obs, _, _, _, info = small.step("scroll [down]")
        assert info["bunshin"]["cache"] == "miss" and obs["screenshot"].shape == (600, 800, 3)
        assert small.observation_space.contains(obs)
    finally:
        small.close()
        default.close()


@pytest.mark.parametrize("bad", ["click [[[", "fly [3]", "", 42, "type [1]"])
def test_malformed_action_sets_error_and_changes_nothing(bad):
    env = gym.make("BunshinWebArena-v0", task_id=TASK, disable_env_checker=True)
    try:
        obs0, _ = env.reset()
        obs, r, term, trunc, info = env.step(bad)
        assert info["last_action_error"] and obs["last_action_error"] == info["last_action_error"]
        assert (obs["url"], obs["axtree"]) == (obs0["url"], obs0["axtree"]) and r == 0.0 and not term
        obs, *_ = env.step("scroll [down]")  # still usable
        assert obs["last_action_error"] == ""
    finally:
        env.close()


def test_truncation_at_max_steps_evaluates_an_empty_answer():
    env = gym.make("BunshinWebArena-v0", task_id="0", max_steps=2)
    try:
        env.reset()
        _, r1, term, trunc, _ = env.step("scroll [down]")
        assert not (term or trunc)
        _, r2, term, trunc, _ = env.step("scroll [up]")
        assert trunc and not term and r2 == 0.0
    finally:
        env.close()


def test_vector_env_forks_slots_and_autoresets_next_step():
    venv = gym.make_vec("BunshinWebArena-v0", num_envs=3, vectorization_mode="vector_entry_point", task_id="0")
    try:
        obs, _ = venv.reset(seed=0)
        assert obs["screenshot"].shape == (3, 720, 1280, 3) and len(obs["url"]) == 3
        venv.step(["scroll [down]", "scroll [down]", "scroll [down]"])
        obs, info = venv.reset(options={"fork_from": 0, "reset_mask": np.array([False, True, True])})
        assert [e.unwrapped.elapsed_steps for e in venv.envs] == [1, 1, 1]
        answer = "stop [Hannah Wilson, Caleb Robinson]"
        obs, r, term, trunc, _ = venv.step([answer, "stop [wrong]", "scroll [up]"])
        assert list(r) == [1.0, 0.0, 0.0] and list(term) == [True, True, False]
        obs, r, term, trunc, _ = venv.step(["scroll [down]"] * 3)  # slots 0 and 1 reset (NEXT_STEP)
        assert [e.unwrapped.elapsed_steps for e in venv.envs] == [0, 0, 3]
        with pytest.raises(IndexError):
            venv.fork(0, [0])
    finally:
        venv.close()


_OTHER_PROCESS = r"""
import hashlib, json, os, sys
import gymnasium as gym, numpy as np
import bunshin_gym  # noqa: F401
if os.environ.get("TEST_CHROMIUM_VERSION"):  # this process "runs" another browser build
    import forkcore.versions as hv
    real = hv.debian_packages
    hv.debian_packages = lambda *a: {**real(*a), "chromium": os.environ["TEST_CHROMIUM_VERSION"]}
env = gym.make("BunshinWebArena-v0", task_id=sys.argv[1], cache_dir=sys.argv[2], diagnostics=True)
obs, _ = env.reset()
out = []
for a in json.loads(sys.argv[3]):
    obs, r, term, trunc, info = env.step(a)
    out.append([obs["url"], obs["axtree"], hashlib.sha256(np.ascontiguousarray(obs["screenshot"]).tobytes()).hexdigest(),
                r, term, info["bunshin"]["cache"]])
env.close()
print(json.dumps(out))
"""


def test_on_disk_cache_serves_another_process_and_drops_corrupt_entries(tmp_path):
    """A tree recorded with cache_dir is reused by a fresh process (all hits, identical observations), but not
    by one whose host has another Chromium build; a corrupted blob is dropped and that step is executed again,
    never served wrong."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = gym.make("BunshinWebArena-v0", task_id=TASK, cache_dir=str(tmp_path))
    actions = env.unwrapped.adapter.oracle_actions(env.unwrapped.adapter.load_task(TASK))[:3]
    fresh = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    try:
        expected = _run(fresh, actions)
        assert _run(env, actions) == expected
    finally:
        fresh.close()
        env.close()
    cmd = [sys.executable, "-c", _OTHER_PROCESS, TASK, str(tmp_path), json.dumps(actions)]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout)
    assert [r[5] for r in rows] == ["hit"] * len(actions)
    assert [(r[0], r[1], r[2]) for r in rows] == [(e[0][0], e[0][1], e[0][4]) for e in expected[1:]]
    # the same store seen from a host with another Chromium build: nothing recorded under the old one is served
    other = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600,
                           env={**os.environ, "TEST_CHROMIUM_VERSION": "999.0.1-1"})
    assert [r[5] for r in json.loads(other.stdout)] == ["miss"] * len(actions)
    # flip a byte in every stored step result: the other process must execute, not serve them
    blobs = [p for p in Path(tmp_path, "blobs").rglob("*") if p.is_file()]
    assert blobs
    for p in blobs:
        data = bytearray(p.read_bytes())
        data[-1] ^= 0xFF
        p.write_bytes(bytes(data))
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout)
    assert [r[5] for r in rows] == ["miss"] * len(actions)
    assert [(r[0], r[1], r[2]) for r in rows] == [(e[0][0], e[0][1], e[0][4]) for e in expected[1:]]
