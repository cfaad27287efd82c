"""Faults inside a workspace in the middle of an episode: `kill -9` of the browser, the site server, the
executor or init while a step runs. Each gives the step a clear error, records nothing (a later run over the
same actions, served from the tree, equals a fresh run without cache), and the env goes on: the same step
again restores the state before it and succeeds.
"""
from __future__ import annotations

import hashlib
import os
import signal
import threading
from pathlib import Path

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu]
TASK = "0"
SITE = "http://127.0.0.1:7770"
#: the process to kill -> what its command line contains
VICTIMS = {"browser": "chromium --show-component", "site server": "envs.webarena.site",
           "executor": "forkcore.executor", "init": "forkcore.init --stage2"}
#: each test starts its own subtree of the task's tree (a query its site ignores), so its calls are misses
ACTIONS = [f"goto [{SITE}/?fault={{victim}}]", f"goto [{SITE}/]", f"goto [{SITE}/cart]", "scroll [down]"]


def _digest(obs) -> tuple:
    return obs["url"], obs["axtree"], hashlib.sha256(obs["screenshot"].tobytes()).hexdigest()


def _pid_of(ws, needle: str) -> int:
    for pid in ws._freezer.pids():
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no process of {ws.id} runs {needle!r}")


def _trace(env, actions) -> list[tuple]:
    obs, _ = env.reset()
    out = [_digest(obs)]
    for a in actions:
        obs, *_ = env.step(a)
        out.append(_digest(obs))
    return out


@pytest.mark.parametrize("victim", list(VICTIMS))
def test_a_process_killed_mid_step_gives_an_error_records_nothing_and_the_env_goes_on(victim):
    actions = [a.format(victim=victim.replace(" ", "-")) for a in ACTIONS]
    fresh = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    try:
        fresh_trace = _trace(fresh, actions)
    finally:
        fresh.close()
    env = gym.make("BunshinWebArena-v0", task_id=TASK)
    try:
        env.reset()
        env.step(actions[0])
        pid = _pid_of(env.unwrapped.live_workspace(), VICTIMS[victim])
        killer = threading.Timer(0.05, os.kill, (pid, signal.SIGKILL))  # while the navigation runs
        killer.start()
        failed = 1
        _, _, _, _, info = env.step(actions[1])
        killer.join()
        if info["last_action_error"] == "":  # the kill landed after the call: the next call meets it
            failed = 2
            _, _, _, _, info = env.step(actions[2])
        assert info["last_action_error"].split(":")[0] in (
            "ServiceDied", "ExecutorUnreachable", "BrowserError", "TargetClosedError"), info["last_action_error"]
        # the env goes on from where it was: the failed step again (on a restored workspace), then the rest
        for a in actions[failed:]:
            _, _, _, _, info = env.step(a)
            assert info["last_action_error"] == "", (a, info["last_action_error"])
        # nothing wrong was recorded: a run served from the tree equals the fresh one
        again = gym.make("BunshinWebArena-v0", task_id=TASK)
        try:
            assert _trace(again, actions) == fresh_trace
        finally:
            again.close()
    finally:
        env.close()
