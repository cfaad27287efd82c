"""Both envs under every Gymnasium vectorization mode (sync, async with shared memory, vector_entry_point),
made the way a user of any vector wrapper makes them, give the same batched observations (every key for
WebArena; OSWorld's exact_fields: its screenshots may differ by a redraw, see envs/osworld/env.py); the fork-first
vector env's `fork_from` reset honours seeds and keeps the sub-envs' info keys."""
from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu]


def _batch_digest(obs: dict, keys=None) -> dict:
    """The batched observation's keys that must match across runs (the adapter's exact_fields; all if None)."""
    out = {}
    for k, v in obs.items():
        if keys is not None and k not in keys:
            continue
        if isinstance(v, np.ndarray):
            out[k] = (v.shape, hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
        else:
            out[k] = tuple(tuple(x) if isinstance(x, (tuple, list)) else x for x in v)
    return out


def _run(env_id: str, mode: str, actions: list, **kw):
    from bunshin_gym import adapter_for

    keys = adapter_for(env_id).exact_fields
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kw)
    try:
        obs, info = venv.reset(seed=0)
        trace = [_batch_digest(obs, keys)]
        assert list(info["task_id"]) == [kw["task_id"]] * 2
        for a in actions:
            obs, r, term, trunc, info = venv.step(a)
            assert obs["screenshot"].shape[0] == 2
            trace.append((_batch_digest(obs, keys), list(r), list(term), list(trunc), list(info["elapsed_steps"])))
        return trace
    finally:
        venv.close()


@pytest.mark.browser
def test_webarena_under_sync_async_and_vector_entry_point():
    actions = [["goto [http://127.0.0.1:7770/cart]", "scroll [down]"], ["scroll [down]", "scroll [up]"]]
    traces = {mode: _run("BunshinWebArena-v0", mode, actions, task_id="0")
              for mode in ("sync", "vector_entry_point", "async")}
    assert traces["sync"] == traces["async"] == traces["vector_entry_point"]
    assert traces["async"][1][0]["url"] == ("http://127.0.0.1:7770/cart", traces["async"][0]["url"][1])


@pytest.mark.desktop
def test_osworld_under_sync_and_async():
    """(vector_entry_point is SyncVectorEnv plus forking, code that knows no env: the WebArena test covers it.)"""
    actions = [["pyautogui.typewrite('abc')", "WAIT"]]
    kw = dict(task_id="edit-type-unsaved", action_space="pyautogui")
    traces = {mode: _run("BunshinOSWorld-v0", mode, actions, **kw) for mode in ("sync", "async")}
    assert traces["sync"] == traces["async"]
    assert traces["sync"][1][-1] == [1, 1]


def test_async_shared_buffers_stay_small():
    """AsyncVectorEnv allocates a shared buffer per observation key and env: the text limits bound it."""
    from gymnasium.vector.utils import create_shared_memory

    from bunshin_gym import adapter_for

    for env_id, limit_mb in (("BunshinWebArena-v0", 16), ("BunshinOSWorld-v0", 16)):
        space = adapter_for(env_id).observation_space()
        mem = create_shared_memory(space, n=1)
        total = sum(np.frombuffer(a.get_obj(), dtype=np.uint8).nbytes for a in mem.values())
        assert total < limit_mb << 20, (env_id, total >> 20)


@pytest.mark.browser
def test_fork_from_reset_honours_seeds_and_keeps_info_keys():
    venv = gym.make_vec("BunshinWebArena-v0", num_envs=3, vectorization_mode="vector_entry_point")
    try:
        venv.reset(seed=0, options={"task_id": "0"})
        venv.step(["scroll [down]"] * 3)
        mask = np.ones(3, dtype=bool)
        obs, info = venv.reset(seed=[5, 6, 7], options={"fork_from": 0, "reset_mask": mask, "task_id": "40"})
        assert list(info["task_id"]) == ["40"] * 3 and list(info["elapsed_steps"]) == [0, 0, 0]
        assert list(info["forked_from"]) == [0, 0, 0] and "last_action_error" in info
        assert [e.unwrapped.np_random_seed for e in venv.envs] == [5, 6, 7]
        assert len(set(obs["url"])) == 1
    finally:
        venv.close()
