"""bunshin_gym: the Gymnasium layer — BunshinEnv, env registration, the prefix cache, speculation, the
fork-first vector env and the core CLI (docs/DESIGN.md). Imports forkcore, never a concrete env: envs are
registered by entry-point strings.
"""
import functools

import gymnasium as gym

from .adapter import ActionError, EnvAdapter, StepResult, Task
from .env import BunshinEnv, ForkableWrapper, make_forkable
from .vector import BunshinVectorEnv

__all__ = ["ENV_IDS", "REMOTE_ENV_ID", "ActionError", "BunshinEnv", "BunshinVectorEnv", "EnvAdapter", "ForkableWrapper", "StepResult",
           "Task", "adapter_for", "register_envs"]

#: env id -> entry point of every env Bunshin Gym registers
_ENTRY_POINTS = {"BunshinWebArena-v0": "envs.webarena.env:WebArenaEnv", "BunshinOSWorld-v0": "envs.osworld.env:OSWorldEnv"}
ENV_IDS = tuple(_ENTRY_POINTS)
#: a Bunshin env served by `bunshin serve` elsewhere (bunshin_gym.remote; not one of ENV_IDS: it has no adapter)
REMOTE_ENV_ID = "BunshinRemote-v0"

def adapter_for(env_id: str) -> EnvAdapter:
    """A fresh adapter of a registered Bunshin env (task lists, oracles, action syntax) without starting it."""
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    return load_env_creator(entry.args[0] if isinstance(entry, functools.partial) else entry).adapter_class()


def register_envs() -> None:
    """Register the envs by entry-point strings (nothing is imported until gym.make).

    The entry point applies Gymnasium's checker and order-enforcing wrappers itself and puts
    `ForkableWrapper` outermost, so `env.fork(n)` works on what gym.make returns (Gymnasium 1.x wrappers do
    not forward attributes, and `additional_wrappers` would rule out the vector entry point).
    """
    for env_id, entry in _ENTRY_POINTS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=functools.partial(make_forkable, entry), order_enforce=False,
                         disable_env_checker=True, vector_entry_point=functools.partial(BunshinVectorEnv, env_id))
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(REMOTE_ENV_ID, entry_point=functools.partial(make_forkable, "bunshin_gym.remote:RemoteEnv"),
                     order_enforce=False, disable_env_checker=True)


register_envs()
