"""`bunshin serve` end to end: a real server process, driven by openenv-core's own client and by RemoteEnv.

Each env's server is started once for the module (its first reset builds the task snapshot, as a local env's
does) and stopped by its PID; the local envs compared with it run in this process.
"""
from __future__ import annotations

import base64
import io
import os
import signal
import time

import gymnasium as gym
import httpx
import numpy as np
import pytest
from openenv.core.generic_client import GenericEnvClient
from PIL import Image

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym.remote import RemoteEnv, RemoteError
from bunshin_gym.server import ServerProcess

WEB_TASK = "5"  # click, click, click, stop: a fork in the middle has a state to continue
DESK_TASK = "calc-rename-header"


@pytest.fixture(scope="module")
def web_server():
    s = ServerProcess("webarena", "--no-auth", "--max-sessions", "6", "--env-arg", "diagnostics=true")
    yield s
    assert s.stop() == 0, s.proc.stdout.read()


def _local_rewards(env_id: str, task: str, branches: list[list[str]], **kw) -> list[float]:
    """Reward at the end of each action list, run by a local env (a fresh episode each)."""
    env = gym.make(env_id, task_id=task, **kw)
    out = []
    try:
        for actions in branches:
            env.reset()
            reward = 0.0
            for a in actions:
                _, reward, *_ = env.step(a)
            out.append(reward)
    finally:
        env.close()
    return out


@pytest.mark.criu
@pytest.mark.browser
def test_openenv_client_runs_forks_and_matches_a_local_env(web_server):
    oracle = bunshin_gym.adapter_for("BunshinWebArena-v0")
    actions = oracle.oracle_actions(oracle.load_task(WEB_TASK))
    wrong = actions[:-1] + ["stop [$1.00]"]
    expected = _local_rewards("BunshinWebArena-v0", WEB_TASK, [actions, wrong])
    assert expected == [1.0, 0.0]

    client = GenericEnvClient(base_url=web_server.url).sync()
    try:
        first = client.reset(task_id=WEB_TASK, seed=0)
        obs = first.observation
        assert {"screenshot", "axtree", "url", "open_pages_urls", "goal", "last_action_error", "info"} <= set(obs)
        shot = Image.open(io.BytesIO(base64.b64decode(obs["screenshot"])))
        assert shot.format == "PNG" and shot.size == (1280, 720)
        for a in actions[:-2]:
            result = client.step({"action": a})
            assert result.observation["info"]["last_action_error"] == ""
        session = client.state()["session_id"]
        r = httpx.post(f"{web_server.url}/sessions/{session}/fork", json={"n": 2}, timeout=300)
        assert r.status_code == 200, r.text
        kids = r.json()["sessions"]
        assert len(kids) == 2
        # the source and both forks continue from the same live state, each its own way
        results = []
        for sid, tail in zip([None, *kids], [actions[-2:], wrong[-2:], ["scroll [down]", actions[-1]]]):
            c = client if sid is None else GenericEnvClient(base_url=f"{web_server.url}/sessions/{sid}").sync()
            try:
                assert c.state()["step_count"] == len(actions) - 2
                for a in tail:
                    result = c.step({"action": a})
                results.append((result.reward, result.done))
            finally:
                if c is not client:
                    c.close()
        assert results[:2] == [(expected[0], True), (expected[1], True)]
        assert results[2][1] is True  # scrolling first changes nothing the answer depends on
        assert results[2][0] == 1.0
        diag = httpx.get(f"{web_server.url}/sessions/{session}/diagnostics").json()
        assert diag["tree"]["lookups"] >= len(actions) and diag["task_id"] == WEB_TASK
    finally:
        client.close()
    # a closed connection ends its session; the forks ended when their connections closed
    deadline = time.monotonic() + 10
    while httpx.get(f"{web_server.url}/sessions").json()["active"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(f"{web_server.url}/sessions").json()["active"] == 0


@pytest.mark.criu
@pytest.mark.browser
def test_remote_env_make_vec_fork_and_sb3(web_server):
    from bunshin_gym.sb3 import SB3VecEnvAdapter

    local = gym.make("BunshinWebArena-v0", task_id=WEB_TASK)
    remote = gym.make("BunshinRemote-v0", url=web_server.url, task_id=WEB_TASK)
    try:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        lo, _ = local.reset(seed=1)
        ro, info = remote.reset(seed=1)
        assert info["task_id"] == WEB_TASK
        assert ro["axtree"] == lo["axtree"] and ro["url"] == lo["url"]
        assert np.array_equal(ro["screenshot"], lo["screenshot"])  # PNG is lossless
        step = remote.unwrapped.adapter.oracle_actions(remote.unwrapped.adapter.load_task(WEB_TASK))[0]
        ro, *_ = remote.step(step)
        lo, *_ = local.step(step)
        assert ro["url"] == lo["url"]
        clone = remote.fork(1)[0]
        try:
            co, *_ = clone.step("goto [http://127.0.0.1:7770/]")
            ro2, *_ = remote.step("scroll [down]")
            assert co["url"] != ro2["url"] and ro2["url"] == lo["url"]  # isolated
        finally:
            clone.close()
    finally:
        remote.close()
        local.close()

    vec = gym.make_vec("BunshinRemote-v0", num_envs=2, vectorization_mode="sync", url=web_server.url,
                       task_id=WEB_TASK)
    try:
        obs, _ = vec.reset(seed=0)
        assert obs["screenshot"].shape == (2, 720, 1280, 3)
        obs, rew, term, trunc, _ = vec.step(["scroll [down]", "stop [nothing]"])
        assert list(term) == [False, True] and list(rew) == [0.0, 0.0]
    finally:
        vec.close()

    venv = SB3VecEnvAdapter.from_env_id("BunshinRemote-v0", num_envs=2, url=web_server.url, task_id=WEB_TASK,
                                        max_candidates=8)
    try:
        first = venv.reset()
        assert first.shape == (2, 512 + 8)
        venv.step(np.array([0, 1]))
        venv.fork(0, [1])
    finally:
        venv.close()


@pytest.mark.criu
@pytest.mark.browser
def test_bad_requests_get_clear_errors_and_a_killed_workspace_never_ends_the_server(web_server):
    url = web_server.url
    assert httpx.post(f"{url}/sessions/nope/fork", json={"n": 1}).status_code == 404
    client = GenericEnvClient(base_url=url).sync()
    other = RemoteEnv(url, task_id="0")
    try:
        with pytest.raises(RuntimeError, match="unknown argument.*colour"):
            client.reset(colour="red")
        with pytest.raises(RuntimeError, match="step before reset"):
            client.step({"action": "scroll [down]"})
        client.reset(task_id=WEB_TASK)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"action": 5})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"act": "scroll [down]"})
        result = client.step({"action": "clik [3]"})  # the env's own contract: an error, nothing changes
        assert result.observation["info"]["last_action_error"]
        sid = client.state()["session_id"]
        assert httpx.post(f"{url}/sessions/{sid}/fork", json={"n": 0}).status_code == 422
        assert httpx.post(f"{url}/sessions/{sid}/fork", json={"n": 7}).status_code == 429
        other.reset()

        ws = httpx.get(f"{url}/sessions/{sid}/diagnostics").json()["workspace"]
        assert ws is not None
        os.kill(ws["init_pid"], signal.SIGKILL)  # a workspace this test's server started
        try:
            result = client.step({"action": "goto [http://127.0.0.1:7770/cart]"})
            assert result.observation["info"]["last_action_error"]  # the failure, reported
        except RuntimeError as e:
            assert "EXECUTION_ERROR" in str(e)
        assert httpx.get(f"{url}/health").status_code == 200
        _, _, _, _, info = other.step("scroll [down]")  # another session is untouched
        assert info["last_action_error"] == ""
        client.reset(task_id=WEB_TASK)  # and the crashed session starts over
        assert client.step({"action": "scroll [down]"}).observation["info"]["last_action_error"] == ""
    finally:
        other.close()
        client.close()
    with pytest.raises(RemoteError, match="session"):
        RemoteEnv(url, session="not-a-session").reset()


@pytest.mark.criu
@pytest.mark.browser
@pytest.mark.desktop
def test_osworld_over_the_server_forks_and_matches_a_local_env():
    adapter = bunshin_gym.adapter_for("BunshinOSWorld-v0")
    actions = adapter.oracle_actions(adapter.load_task(DESK_TASK))
    expected = _local_rewards("BunshinOSWorld-v0", DESK_TASK, [actions, actions[:-1] + ["FAIL"]])
    assert expected == [1.0, 0.0]
    server = ServerProcess("osworld", "--no-auth", "--max-sessions", "3")
    try:
        client = GenericEnvClient(base_url=server.url, message_timeout_s=600).sync()
        try:
            obs = client.reset(task_id=DESK_TASK).observation
            assert {"screenshot", "accessibility_tree", "terminal", "instruction"} <= set(obs)
            for a in actions[:-1]:
                client.step({"action": a})
            sid = client.state()["session_id"]
            kid = httpx.post(f"{server.url}/sessions/{sid}/fork", json={"n": 1}, timeout=600).json()["sessions"][0]
            fork = GenericEnvClient(base_url=f"{server.url}/sessions/{kid}", message_timeout_s=600).sync()
            try:
                wrong = fork.step({"action": "FAIL"})
            finally:
                fork.close()
            right = client.step({"action": actions[-1]})
            assert [right.reward, wrong.reward] == expected
        finally:
            client.close()
    finally:
        assert server.stop() == 0, server.proc.stdout.read()
