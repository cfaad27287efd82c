"""BunshinVectorEnv: a Gymnasium vector env in which forking a slot is a first-class operation.

Sub-envs run in this process (each drives its own forked workspace; hits of the shared prefix tree cost
nothing), stepped in order like `SyncVectorEnv`, whose batching and autoreset it keeps (NEXT_STEP by
default, Gymnasium's). Added:

- `fork(src, dst_indices)`: replace those slots with live clones of slot `src` (same workspace state,
  step count and history; `src` goes on unchanged). Returns the batched observation.
- `reset(options={"fork_from": i, "reset_mask": m})`: the slots selected by `m` (default: all but `i`)
  other than `i` become clones of slot `i` instead of being reset; slot `i` itself is reset first if `m`
  selects it (with its seed and the other options) — e.g. GRPO: `reset(seed=s, options={"fork_from": 0,
  "reset_mask": np.ones(G, bool), "task_id": t})` resets slot 0 to task t and forks it G-1 times. Seeds
  seed each clone's own random stream; each slot's info has the env's usual keys (task_id, elapsed_steps,
  last_action_error) plus `forked_from`.

Shapes: observations are batched per key of the single observation space — `screenshot` (num_envs, H, W, 3)
uint8; text keys a tuple of num_envs strings; rewards (num_envs,) float64; terminations/truncations
(num_envs,) bool.
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate


class BunshinVectorEnv(SyncVectorEnv):
    """Vector env over `num_envs` copies of a Bunshin env.

    Args:
        env_id: a registered Bunshin env id (e.g. "BunshinWebArena-v0").
        num_envs: number of slots.
        autoreset_mode: Gymnasium's autoreset mode (default NEXT_STEP).
        **env_kwargs: passed to `gym.make` for every slot (task_id, max_steps, backend, ...).
    """

    def __init__(self, env_id: str, num_envs: int, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 **env_kwargs: Any) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: expected an int >= 1")
        self.env_id = env_id
        fns: list[Callable[[], gym.Env]] = [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)]
        super().__init__(fns, copy=True, autoreset_mode=autoreset_mode)

    def fork(self, src: int, dst_indices: Sequence[int]):
        """Replace slots `dst_indices` with live clones of slot `src`; returns the batched observation."""
        dst = [int(j) for j in dst_indices]
        if not 0 <= src < self.num_envs:
            raise IndexError(f"fork: src={src} out of range for num_envs={self.num_envs}")
        bad = [j for j in dst if not 0 <= j < self.num_envs or j == src]
        if bad or len(set(dst)) != len(dst):
            raise IndexError(f"fork: dst_indices={dst} must be distinct slots in [0, {self.num_envs}) other than src={src}")
        if not dst:
            return deepcopy(self._observations)
        clones = self.envs[src].fork(len(dst))
        for j, clone in zip(dst, clones):
            self.envs[j].close()
            self.envs[j] = clone
            self._env_obs[j] = deepcopy(self._env_obs[src])
            self._rewards[j] = self._rewards[src]
            self._terminations[j] = self._terminations[src]
            self._truncations[j] = self._truncations[src]
            self._autoreset_envs[j] = self._autoreset_envs[src]
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        if "fork_from" not in options:
            return super().reset(seed=seed, options=options or None)
        src = int(options.pop("fork_from"))
        if not 0 <= src < self.num_envs:
            raise IndexError(f"fork_from={src} out of range for num_envs={self.num_envs}")
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.arange(self.num_envs) != src
        mask = np.asarray(mask, dtype=np.bool_)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {mask.shape}")
        seeds = seed if isinstance(seed, (list, tuple)) else [None if seed is None else seed + j
                                                               for j in range(self.num_envs)]
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed: expected {self.num_envs} seeds, got {len(seeds)}")
        infos: dict = {}
        if mask[src]:  # the source itself is reset first (with its seed and the remaining options)
            self._env_obs[src], info = self.envs[src].reset(seed=seeds[src], options=options or None)
            self._rewards[src], self._terminations[src], self._truncations[src] = 0.0, False, False
            self._autoreset_envs[src] = False
            infos = self._add_info(infos, {**info, "forked_from": src}, src)
        obs = self.fork(src, [j for j in range(self.num_envs) if mask[j] and j != src])
        for j in range(self.num_envs):
            if mask[j] and j != src:
                base = self.envs[j].unwrapped
                if seeds[j] is not None:  # a clone's own random stream (e.g. its next random task)
                    base._np_random, base._np_random_seed = gym.utils.seeding.np_random(seeds[j])
                infos = self._add_info(infos, {**base.fork_info(), "forked_from": src}, j)
        return obs, infos

    def call_env(self, index: int, name: str, *args, **kwargs):
        """Call a method of one sub-env's unwrapped Bunshin env (e.g. its adapter's candidate_actions)."""
        return getattr(self.envs[index].unwrapped, name)(*args, **kwargs)
