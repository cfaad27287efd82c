"""Faults in the middle of an episode: `kill -9` of the browser, the site server, the executor or init while
a step runs. Each gives the step a clear error, records nothing (a later run over the same actions, served
from the tree, equals a fresh run without cache), and the env goes on: the same step again restores the
state before it and succeeds. And the host process itself killed with workspaces alive: `bunshin gc` cleans
them up and its on-disk store serves the next process.
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
    for pid in ws._cgroups.pids():
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


_EPISODE_THEN_KILLED = """
import sys, time
import gymnasium as gym
import bunshin_gym
env = gym.make("BunshinWebArena-v0", task_id=sys.argv[2], cache_dir=sys.argv[1])
u = env.unwrapped
actions = u.adapter.oracle_actions(u.adapter.load_task(sys.argv[2]))
env.reset()
for a in actions:
    env.step(a)  # the episode ends: its steps are saved to the store
env.reset()
env.step("scroll [down]")
print(u.live_workspace().id, flush=True)
time.sleep(600)  # killed here, a workspace live, a standby frozen
"""


def test_a_host_process_killed_with_live_workspaces_is_cleaned_by_gc_and_its_store_serves_the_next(tmp_path):
    import subprocess
    import sys

    from forkcore import paths
    from forkcore.cgroups import WorkspaceCgroups
    from forkcore.gc import collect

    p = subprocess.Popen([sys.executable, "-c", _EPISODE_THEN_KILLED, str(tmp_path), TASK],
                         stdout=subprocess.PIPE, text=True)
    try:
        ws_id = p.stdout.readline().strip()
        assert ws_id, "the episode did not run"
    finally:
        p.kill()
        p.wait()
    assert (paths.STATE_DIR / "ws" / ws_id).exists()  # left behind by the killed process
    log = collect()
    assert any(ws_id in line for line in log), log
    assert not (paths.STATE_DIR / "ws" / ws_id).exists()
    owned = [d for d in (paths.STATE_DIR / "ws").iterdir()  # its frozen standby clones too
             if (d / "owner.pid").exists() and (d / "owner.pid").read_text().strip() == str(p.pid)]
    assert not owned
    assert not WorkspaceCgroups(ws_id, create=False).path.exists()
    assert not [line for line in open("/proc/self/mountinfo") if ws_id in line]
    r = subprocess.run([sys.executable, "-c", _SERVED_FROM_THE_STORE, str(tmp_path), TASK], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    caches, reward = r.stdout.strip().splitlines()[-1].split(" | ")
    assert set(caches.split()) == {"hit"} and float(reward) == 1.0, r.stdout


_SERVED_FROM_THE_STORE = """
import sys
import gymnasium as gym
import bunshin_gym
env = gym.make("BunshinWebArena-v0", task_id=sys.argv[2], cache_dir=sys.argv[1], diagnostics=True)
env.reset()
u = env.unwrapped
caches = []
for a in u.adapter.oracle_actions(u.task):
    _, reward, term, _, info = env.step(a)
    caches.append(info["bunshin"]["cache"])
env.close()
print(" ".join(caches), "|", reward if term else -1)
"""


# ---- the desktop (OSWorld) ------------------------------------------------------------------------------
DESKTOP_TASK = "calc-sum-total"
#: the desktop's process to kill -> what its command line contains (LibreOffice is the OOM test's below)
DESKTOP_VICTIMS = {"X server": "Xvfb", "executor": "forkcore.executor"}
_FAULT_ERRORS = ("ServiceDied", "ExecutorUnreachable", "ExecutorError")


def _pause(victim: str) -> str:
    """A pyautogui action that changes nothing and takes a second: the kill lands while it runs, and each
    test's is its own (a miss, even where an earlier test recorded the oracle)."""
    return f"import time; time.sleep(1)  # {victim}"


@pytest.mark.desktop
@pytest.mark.parametrize("victim", list(DESKTOP_VICTIMS))
def test_a_desktop_process_killed_mid_step_gives_an_error_and_the_oracle_still_wins(victim):
    env = gym.make("BunshinOSWorld-v0", task_id=DESKTOP_TASK)
    try:
        env.reset()
        u = env.unwrapped
        actions = [_pause(victim), *u.adapter.oracle_actions(u.task)]
        pid = _pid_of(u.live_workspace(), DESKTOP_VICTIMS[victim])
        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        _, _, _, _, info = env.step(actions[0])
        killer.join()
        assert info["last_action_error"].split(":")[0] in _FAULT_ERRORS, info["last_action_error"]
        for a in actions:  # the failed step again (on a restored desktop), then the oracle
            _, reward, term, _, info = env.step(a)
            assert info["last_action_error"] == "", (a, info["last_action_error"])
        assert term and reward == 1.0
        # the tree holds only what executing gave: the same run again is served from it and wins
        again = gym.make("BunshinOSWorld-v0", task_id=DESKTOP_TASK, diagnostics=True)
        try:
            again.reset()
            for a in actions:
                _, reward, term, _, info = again.step(a)
                assert info["last_action_error"] == "" and info["bunshin"]["cache"] == "hit", info["bunshin"]
            assert term and reward == 1.0
        finally:
            again.close()
    finally:
        env.close()


def test_an_out_of_memory_kill_during_a_step_is_an_error_never_recorded():
    """An agent's memory bomb (a pyautogui action filling 6 GB in a 4 GB workspace): the kernel's OOM killer
    ends a process of the desktop, the step reports it and records nothing, and the env goes on."""
    bomb = "blocks = [bytearray(1 << 30) for _ in range(6)]"
    env = gym.make("BunshinOSWorld-v0", task_id=DESKTOP_TASK, diagnostics=True)
    try:
        env.reset()
        for _ in range(2):  # an error both times, never a hit: the first was not recorded
            _, _, _, _, info = env.step(bomb)
            assert info["bunshin"]["cache"] == "error", info["bunshin"]
            assert info["last_action_error"].startswith("ServiceDied") and "OOM killer" in info["last_action_error"], \
                info["last_action_error"]
        u = env.unwrapped
        reward, term = 0.0, False
        for a in u.adapter.oracle_actions(u.task):
            _, reward, term, _, info = env.step(a)
            assert info["last_action_error"] == "", info["last_action_error"]
        assert term and reward == 1.0
    finally:
        env.close()
