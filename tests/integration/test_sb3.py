"""bunshin_gym.sb3 on BunshinWebArena-v0: the discrete wrapper, SB3 VecEnv semantics, fork, a PPO smoke run.

All tests use one task with few candidates and max_steps=2, so repeated prefixes are prefix-cache hits and the
whole file stays within a few minutes on a small machine.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytest.importorskip("stable_baselines3", reason="requires stable-baselines3 (pip install 'bunshin-gym[train]')")

from bunshin_gym.sb3 import DiscreteActionWrapper, SB3VecEnvAdapter  # noqa: E402

pytestmark = [pytest.mark.criu, pytest.mark.browser]
ENV = "BunshinWebArena-v0"
TASK = "39"  # remove an item from the wish list: judged on the end state (program_html), so truncation can score
K = 4  # candidates 0..3 of the home page: click [7] (home link), type [10] [shoes] [1] (search), click [11], click [13]
D = 512  # DiscreteActionWrapper's default text_dim


def _venv(num_envs: int = 2) -> SB3VecEnvAdapter:
    return SB3VecEnvAdapter.from_env_id(ENV, num_envs, task_id=TASK, max_steps=2, max_candidates=K)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")  # checking the wrapper is the point
def test_discrete_wrapper_passes_check_env():
    from gymnasium.utils.env_checker import check_env

    env = DiscreteActionWrapper(gym.make(ENV, task_id=TASK, max_steps=2), max_candidates=K)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_out_of_range_index_is_a_wasted_step_with_an_error():
    env = DiscreteActionWrapper(gym.make(ENV, task_id=TASK, max_steps=3), max_candidates=96)
    try:
        obs0, info = env.reset()
        n = info["num_candidates"]
        assert 0 < n < 96 and env.observation_space.contains(obs0)
        assert env.action_masks().sum() == n and obs0[D:].sum() == n  # the mask in the observation agrees
        obs, r, term, trunc, info = env.step(95)
        assert info["action"] is None and "action index 95" in info["last_action_error"]
        assert r == 0.0 and not (term or trunc) and info["elapsed_steps"] == 1
        assert info["num_candidates"] == n and not np.array_equal(obs[:D], obs0[:D])  # the error is in the text
        with pytest.raises(gym.error.InvalidAction):
            env.step(96)
        obs, r, term, trunc, info = env.step(1)  # still usable: a real candidate
        assert info["action"] == "type [10] [shoes] [1]" and info["last_action_error"] == ""
    finally:
        env.close()


def test_sb3_adapter_resets_in_the_same_step_and_keeps_the_terminal_observation():
    venv = _venv()
    try:
        obs0 = venv.reset()
        assert obs0.shape == (2, D + K) and obs0.dtype == np.float32
        assert np.array_equal(obs0[0], obs0[1]), "one task, deterministic reset"
        obs, rewards, dones, infos = venv.step(np.array([0, 1]))
        assert not dones.any() and not any("terminal_observation" in i for i in infos)
        assert [i["action"] for i in infos] == ["click [7]", "type [10] [shoes] [1]"]
        # step 2 of 2: both truncated; both end on the search results page, not the home page
        obs, rewards, dones, infos = venv.step(np.array([1, 1]))
        assert dones.all() and rewards.dtype == np.float32
        for i in range(2):
            assert infos[i]["TimeLimit.truncated"] is True
            terminal = infos[i]["terminal_observation"]
            assert terminal.shape == (D + K,) and not np.array_equal(terminal, obs0[i])
            assert np.array_equal(obs[i], obs0[i]), "the returned observation is the next episode's first"
            assert infos[i]["episode"]["l"] == 2 and infos[i]["episode"]["r"] == rewards[i]
        assert venv.get_attr("elapsed_steps") == [0, 0], "reset in the same step"
        assert venv.env_is_wrapped(DiscreteActionWrapper) == [True, True]
        assert [m.tolist() for m in venv.env_method("action_masks")] == [[True] * K] * 2
    finally:
        venv.close()


def test_sb3_adapter_fork_clones_a_slot_with_its_episode_statistics():
    venv = _venv()
    try:
        venv.reset()
        obs, *_ = venv.step(np.array([1, 0]))  # slot 0: search results; slot 1: home page
        assert not np.array_equal(obs[0], obs[1])
        obs = venv.fork(0, [1])
        assert np.array_equal(obs[0], obs[1]) and venv.get_attr("elapsed_steps") == [1, 1]
        assert venv.get_attr("candidates", 0) == venv.get_attr("candidates", 1)
        obs, rewards, dones, infos = venv.step(np.array([1, 1]))  # same state, same action
        assert dones.all() and rewards[0] == rewards[1]
        assert np.array_equal(infos[0]["terminal_observation"], infos[1]["terminal_observation"])
        assert infos[1]["episode"]["l"] == 2, "the clone continues slot 0's episode"
        with pytest.raises(IndexError):
            venv.fork(0, [0])
    finally:
        venv.close()


@pytest.mark.slow
def test_ppo_trains_on_a_webarena_task_through_the_adapter():
    import torch
    from stable_baselines3 import PPO

    venv = _venv()
    try:
        model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [32, 32]})
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=32)
        assert model.num_timesteps >= 32
        assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters())), "one update ran"
        episodes = list(model.ep_info_buffer)
        assert len(episodes) == 2 * 16 // 2 and all(ep["l"] == 2 for ep in episodes)  # 16 steps per slot
    finally:
        venv.close()
