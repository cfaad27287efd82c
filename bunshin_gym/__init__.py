"""bunshin_gym: the Gymnasium layer — BunshinEnv, env registration, the CLI (and, next, the prefix cache,
speculation and the fork-first vector env). Imports forkcore, never a concrete env: envs are registered by
entry-point strings.
"""
import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

from .adapter import ActionError, EnvAdapter, StepResult, Task
from .env import BunshinEnv, ForkableWrapper

__all__ = ["ActionError", "BunshinEnv", "EnvAdapter", "ForkableWrapper", "StepResult", "Task", "register_envs"]

_FORKABLE = WrapperSpec("ForkableWrapper", "bunshin_gym.env:ForkableWrapper", {})


def register_envs() -> None:
    for env_id, entry in (("BunshinWebArena-v0", "envs.webarena.env:WebArenaEnv"),
                          ("BunshinOSWorld-v0", "envs.osworld.env:OSWorldEnv")):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry, additional_wrappers=(_FORKABLE,), disable_env_checker=False)


register_envs()
