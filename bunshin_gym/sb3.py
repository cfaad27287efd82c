"""Stable-Baselines3 bridge: a discrete-action, numeric-observation wrapper and an SB3 `VecEnv` over Bunshin envs.

Owns `DiscreteActionWrapper` (a Bunshin env as `Discrete(K)` actions over the observation's candidate actions,
with a fixed-size float observation) and `SB3VecEnvAdapter` (SB3's `VecEnv` contract: same-step autoreset,
`terminal_observation`, `TimeLimit.truncated`, Monitor-style `episode` statistics, and `fork(src, dst)`).
It does not own the envs, their candidate lists or prompt text: those come from each env's `EnvAdapter`
(`candidate_actions`, `render_prompt`). Needs the `train` extra (stable-baselines3); nothing imports this
module unless asked (`from bunshin_gym.sb3 import SB3VecEnvAdapter`).

Example (PPO on one WebArena task, two sub-envs)::

    from stable_baselines3 import PPO
    from bunshin_gym.sb3 import SB3VecEnvAdapter

    venv = SB3VecEnvAdapter.from_env_id("BunshinWebArena-v0", num_envs=2, task_id="39", max_steps=3,
                                        max_candidates=40)  # reward 1 is 2 clicks away
    PPO("MlpPolicy", venv, n_steps=32, batch_size=32).learn(4096)
"""
from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as e:  # pragma: no cover - depends on the installation
    raise gym.error.DependencyNotInstalled(
        "bunshin_gym.sb3 needs stable-baselines3, which is not installed; run "
        "`pip install 'bunshin-gym[train]'` (or `/opt/bunshin/venv/bin/pip install stable-baselines3`)") from e

_TOKEN = re.compile(r"\w+")


def hashed_bag_of_words(text: str, dim: int) -> np.ndarray:
    """Hashing-trick bag of words: lower-cased `\\w+` tokens counted into `dim` buckets (CRC-32, stable across
    processes), log(1 + count), then scaled to unit L2 norm. Returns float32 of shape (dim,), values in [0, 1]."""
    vec = np.zeros(dim, dtype=np.float64)
    for tok in _TOKEN.findall(text.lower()):
        vec[zlib.crc32(tok.encode()) % dim] += 1.0
    np.log1p(vec, out=vec)
    norm = float(np.linalg.norm(vec))
    if norm > 0:
        vec /= norm
    return np.clip(vec, 0.0, 1.0).astype(np.float32)


class DiscreteActionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A Bunshin env with `Discrete(max_candidates)` actions and a flat float observation, for SB3-style agents.

    Wrap what `gym.make("Bunshin…-v0", …)` returns (fork needs its `ForkableWrapper`); other wrappers placed
    in between are not re-applied to forks.

    Args:
        env: a Bunshin env as returned by `gym.make`.
        max_candidates: K, the size of the discrete action space.
        text_dim: D, the number of hashing-trick buckets for the prompt text.

    Action: an int in [0, K). After every reset/step the wrapper asks the env's adapter for
    `candidate_actions(obs)` (e.g. WebArena: ``click [id]`` per link/button in axtree order, ``type [id]
    [shoes] [1]`` per textbox, then ``scroll [down]``, ``go_back``); index i < len(candidates) sends the string
    ``candidates[i]`` to the env. Candidates beyond K are unreachable.

    Out-of-range index (i >= len(candidates)): a wasted step. It is sent to the env as a malformed action
    (`None`, which every Bunshin adapter rejects), so — the Bunshin contract for malformed actions — it counts
    towards `max_steps`, changes nothing, earns reward 0, and `last_action_error` (in the observation text and
    in `info`) says "action index i: only n candidate actions…". It never reaches the prefix cache. Agents
    that support masking (sb3-contrib's MaskablePPO) avoid it through `action_masks()`.

    Observation: `Box(0, 1, (D + K,), float32)`:

        ===========  ==========================================================================  ===  ===
        index        meaning                                                                     min  max
        ===========  ==========================================================================  ===  ===
        [0, D)       `hashed_bag_of_words(adapter.render_prompt(obs), D)`: goal, URL, last          0    1
                     action error and the page/desktop text (unit L2 norm)
        [D, D + K)   candidate mask: 1.0 where index i maps to a candidate action                0    1
        ===========  ==========================================================================  ===  ===

    Candidate i is the i-th interactive element of the page in document order, so the same page gives the
    same index for the same element; the bag of words tells pages apart. The raw dict observation (with the
    screenshot) is `wrapper.raw_observation`.

    Info: the env's (`last_action_error`, `task_id`, `elapsed_steps`, …) plus ``action`` (the string sent, or
    None for an out-of-range index) and ``num_candidates`` (of the new observation).

    Episode end: the env's (terminated when the agent stops, truncated at `max_steps`). WebArena's candidate
    list has no ``stop``, so there episodes end by truncation, which evaluates the end state (and an empty
    answer): state-changing tasks (`program_html`) can still earn reward.
    """

    def __init__(self, env: gym.Env, max_candidates: int = 16, text_dim: int = 512) -> None:
        if not isinstance(max_candidates, int) or max_candidates < 1:
            raise ValueError(f"max_candidates={max_candidates!r}: expected an int >= 1")
        if not isinstance(text_dim, int) or text_dim < 1:
            raise ValueError(f"text_dim={text_dim!r}: expected an int >= 1")
        gym.utils.RecordConstructorArgs.__init__(self, max_candidates=max_candidates, text_dim=text_dim)
        gym.Wrapper.__init__(self, env)
        self.max_candidates, self.text_dim = max_candidates, text_dim
        self.action_space = spaces.Discrete(max_candidates)
        self.observation_space = spaces.Box(0.0, 1.0, (text_dim + max_candidates,), np.float32)
        self.candidates: list[str] = []
        self.raw_observation: dict | None = None

    @property
    def adapter(self):
        """The Bunshin env's `EnvAdapter` (candidate actions, prompt text)."""
        return self.env.unwrapped.adapter

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset the env. Returns (observation (D + K,) float32, info)."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs), self._with_candidates(info)

    def step(self, action):
        """Take candidate `action`. Returns (observation (D + K,) float32, reward, terminated, truncated, info)."""
        index = int(action)
        if not 0 <= index < self.max_candidates:
            raise gym.error.InvalidAction(f"action={action!r}: expected an int in [0, {self.max_candidates})")
        chosen = self.candidates[index] if index < len(self.candidates) else None
        obs, reward, terminated, truncated, info = self.env.step(chosen)
        info = dict(info)
        if chosen is None:
            msg = (f"action index {index}: only {len(self.candidates)} candidate actions on this page "
                   f"(indices 0..{len(self.candidates) - 1}); the step was wasted")
            info["last_action_error"] = msg
            if isinstance(obs, dict) and "last_action_error" in obs:
                obs["last_action_error"] = msg
        info["action"] = chosen
        return self._observe(obs), reward, terminated, truncated, self._with_candidates(info)

    def action_masks(self) -> np.ndarray:
        """Which indices map to a candidate in the current observation: bool (K,) (sb3-contrib's MaskablePPO)."""
        mask = np.zeros(self.max_candidates, dtype=np.bool_)
        mask[: min(len(self.candidates), self.max_candidates)] = True
        return mask

    def fork(self, n: int = 1) -> list[DiscreteActionWrapper]:
        """n live copies of this episode (see `BunshinEnv.fork`), each wrapped like this one, same candidates."""
        try:
            fork = self.env.get_wrapper_attr("fork")
        except AttributeError as e:
            raise TypeError(f"{type(self).__name__}.fork: the wrapped env has no fork(); wrap what "
                            f"gym.make('Bunshin…-v0') returns, not {self.env}") from e
        out = []
        for clone in fork(n):
            w = type(self)(clone, max_candidates=self.max_candidates, text_dim=self.text_dim)
            w.candidates, w.raw_observation = list(self.candidates), deepcopy(self.raw_observation)
            out.append(w)
        return out

    def _observe(self, obs: dict) -> np.ndarray:
        self.raw_observation = obs
        self.candidates = list(self.adapter.candidate_actions(obs))
        out = np.zeros(self.text_dim + self.max_candidates, dtype=np.float32)
        out[: self.text_dim] = hashed_bag_of_words(self.adapter.render_prompt(obs), self.text_dim)
        out[self.text_dim: self.text_dim + min(len(self.candidates), self.max_candidates)] = 1.0
        return out

    def _with_candidates(self, info: dict) -> dict:
        info = dict(info)
        info["num_candidates"] = len(self.candidates)
        return info


class SB3VecEnvAdapter(VecEnv):
    """Stable-Baselines3 `VecEnv` over Bunshin envs (each typically a `DiscreteActionWrapper`), in this process.

    Args:
        env_fns: one callable per slot, each returning a new env (not a shared instance).
        episode_stats: at each episode end put Monitor-style ``info["episode"] = {"r", "l", "t"}`` (return,
            length, seconds since this adapter started) into that slot's info, which SB3 algorithms collect
            into `ep_info_buffer`; no `Monitor`/`VecMonitor` wrapper is needed (and forks keep the source's
            running return and length, which a VecMonitor around this adapter would not).

    Semantics (SB3's, as `DummyVecEnv`): `reset()` returns only the batched observation (infos in
    `reset_infos`; seeds/options set with `seed()`/`set_options()` are used once). `step(actions)` steps every
    slot; a slot whose episode ended is reset in the same call: its `dones[i]` is True, the observation
    returned for it is the new episode's first one, and the last one is `infos[i]["terminal_observation"]`;
    `infos[i]["TimeLimit.truncated"]` is True when the episode was truncated rather than terminated.

    Shapes: observations (num_envs, *single_obs_shape) in the sub-envs' dtype (DiscreteActionWrapper:
    (num_envs, D + K) float32); actions (num_envs,) ints; rewards (num_envs,) float32; dones (num_envs,) bool;
    infos a list of num_envs dicts.

    Why not over `BunshinVectorEnv`: that vector env batches the text dict observation SB3 cannot take, makes
    its slots with `gym.make` alone (no place for the discrete wrapper) and follows Gymnasium's NEXT_STEP
    autoreset, where SB3 needs the reset in the same step. Stepping sub-envs here is the same in-process loop
    (SyncVectorEnv's), so nothing is lost; `fork(src, dst_indices)` offers the vector env's fork.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], episode_stats: bool = True) -> None:
        if len(env_fns) < 1:
            raise ValueError("env_fns is empty: pass one callable per slot, e.g. [lambda: make_env()] * 2 … "
                             "each returning a new env")
        self.envs: list[gym.Env] = [fn() for fn in env_fns]
        if len({id(e.unwrapped) for e in self.envs}) != len(self.envs):
            raise ValueError("env_fns returned the same env instance for several slots; each callable must "
                             "create a new env (e.g. lambda: DiscreteActionWrapper(gym.make(...)))")
        first = self.envs[0]
        for i, e in enumerate(self.envs[1:], 1):
            if e.observation_space != first.observation_space or e.action_space != first.action_space:
                raise ValueError(f"slot {i} has spaces ({e.observation_space}, {e.action_space}); slot 0 has "
                                 f"({first.observation_space}, {first.action_space}): all slots must match")
        super().__init__(len(self.envs), first.observation_space, first.action_space)
        self.episode_stats = bool(episode_stats)
        self._obs = np.zeros((self.num_envs, *first.observation_space.shape), dtype=first.observation_space.dtype)
        self._actions: np.ndarray | None = None
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self._t_start = time.monotonic()
        self._closed = False

    @classmethod
    def from_env_id(cls, env_id: str, num_envs: int, *, max_candidates: int = 16, text_dim: int = 512,
                    episode_stats: bool = True, **env_kwargs: Any) -> SB3VecEnvAdapter:
        """`num_envs` slots of `DiscreteActionWrapper(gym.make(env_id, **env_kwargs), max_candidates, text_dim)`.

        env_kwargs are the env's options (task_id, max_steps, backend, cache, …; see `BunshinEnv`).
        """
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: expected an int >= 1")

        def make() -> gym.Env:
            return DiscreteActionWrapper(gym.make(env_id, **env_kwargs), max_candidates=max_candidates,
                                         text_dim=text_dim)

        return cls([make] * num_envs, episode_stats=episode_stats)

    # ---- SB3 VecEnv API ------------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        """Reset every slot. Returns observations (num_envs, *obs_shape); infos go to `self.reset_infos`."""
        for i, env in enumerate(self.envs):
            kwargs: dict[str, Any] = {"seed": self._seeds[i]}
            if self._options[i]:
                kwargs["options"] = self._options[i]
            obs, self.reset_infos[i] = env.reset(**kwargs)
            self._obs[i] = obs
        self._reset_seeds()
        self._reset_options()
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(f"step: expected {self.num_envs} actions (shape ({self.num_envs}, …)), got shape "
                             f"{actions.shape}")
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Returns (observations (num_envs, *obs_shape), rewards (num_envs,) float32, dones (num_envs,) bool,
        infos: list of num_envs dicts) — see the class docstring for autoreset."""
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions): call step(actions)")
        actions, self._actions = self._actions, None
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        dones = np.zeros(self.num_envs, dtype=np.bool_)
        infos: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(actions[i])
            info = dict(info)
            rewards[i] = reward
            dones[i] = bool(terminated or truncated)
            info["TimeLimit.truncated"] = bool(truncated and not terminated)
            self._ep_return[i] += float(reward)
            self._ep_length[i] += 1
            if dones[i]:
                info["terminal_observation"] = obs
                if self.episode_stats:
                    info["episode"] = {"r": float(self._ep_return[i]), "l": int(self._ep_length[i]),
                                       "t": round(time.monotonic() - self._t_start, 6)}
                self._ep_return[i], self._ep_length[i] = 0.0, 0
                obs, self.reset_infos[i] = env.reset()
            self._obs[i] = obs
            infos.append(info)
        return self._obs.copy(), rewards, dones, infos

    def close(self) -> None:
        """Close every slot (twice is fine)."""
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each slot's `render()` (its screenshot) when render_mode is "rgb_array", else Nones."""
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return [env.render() for env in self.envs]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """`attr_name` of the selected slots, found anywhere in each wrapper stack (e.g. "max_steps")."""
        return [self.envs[i].get_wrapper_attr(attr_name) for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set `attr_name` on the selected slots' outermost env."""
        for i in self._get_indices(indices):
            setattr(self.envs[i], attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Call `method_name` (found anywhere in each wrapper stack, e.g. "action_masks") on the selected slots."""
        return [self.envs[i].get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each selected slot has `wrapper_class` in its wrapper stack."""
        out = []
        for i in self._get_indices(indices):
            e, found = self.envs[i], False
            while isinstance(e, gym.Wrapper) and not found:
                found, e = isinstance(e, wrapper_class), e.env
            out.append(found)
        return out

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds `seed + i` for slot i, used at the next `reset()` only (SB3 semantics). Bunshin envs with a
        fixed task are deterministic; the seed picks the task only when none was given."""
        return super().seed(seed)

    # ---- fork ------------------------------------------------------------------------------------------
    def fork(self, src: int, dst_indices: Sequence[int]) -> np.ndarray:
        """Replace slots `dst_indices` with live clones of slot `src` (same workspace state, step count, history,
        candidates and running episode statistics); `src` goes on unchanged. The old envs of those slots are
        closed. Returns the observations (num_envs, *obs_shape).

        Raises:
            IndexError: src out of range, or dst_indices not distinct slots other than src.
            TypeError: slot `src` cannot fork (its outermost env has no `fork(n)`).
        """
        dst = [int(j) for j in dst_indices]
        if not 0 <= src < self.num_envs:
            raise IndexError(f"fork: src={src} out of range for num_envs={self.num_envs}")
        bad = [j for j in dst if not 0 <= j < self.num_envs or j == src]
        if bad or len(set(dst)) != len(dst):
            raise IndexError(f"fork: dst_indices={dst} must be distinct slots in [0, {self.num_envs}) other "
                             f"than src={src}")
        if not dst:
            return self._obs.copy()
        fork = getattr(self.envs[src], "fork", None)
        if fork is None:
            raise TypeError(f"fork: slot {src} ({self.envs[src]}) has no fork(n); build slots with "
                            "DiscreteActionWrapper(gym.make('Bunshin…-v0', …)) or SB3VecEnvAdapter.from_env_id")
        for j, clone in zip(dst, fork(len(dst))):
            self.envs[j].close()
            self.envs[j] = clone
            self._obs[j] = self._obs[src]
            self._ep_return[j], self._ep_length[j] = self._ep_return[src], self._ep_length[src]
            self.reset_infos[j] = {"forked_from": src}
        return self._obs.copy()
