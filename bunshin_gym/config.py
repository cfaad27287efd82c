"""EnvConfig: the frozen settings of one Bunshin env, validated once; `fork()` and vector workers rebuild an
env from it whole (adapter settings and the default task included)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from forkcore import ALL_BACKENDS


@dataclass(frozen=True)
class EnvConfig:
    """Constructor arguments of `BunshinEnv` that are plain values (see its docstring for each one).

    Objects (`selector`, `stats_sink`) are not part of it: they are shared, not copied, by forks.
    """

    task_id: str | None = None
    task_config: dict | str | None = field(default=None, compare=False)
    max_steps: int = 30
    backend: str = "auto"
    cache: bool = True
    diagnostics: bool = False
    render_mode: str | None = None
    speculate_k: int = 3
    speculate_min_idle_cpus: float = 0.5
    cache_dir: str | None = None
    step_timeout_s: float = 120.0
    background_sync: bool = True
    adapter_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or isinstance(self.max_steps, bool) or self.max_steps < 1:
            raise ValueError(f"max_steps={self.max_steps!r}: expected an int >= 1")
        if self.render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={self.render_mode!r}: only 'rgb_array' is supported")
        if self.backend != "auto" and self.backend not in ALL_BACKENDS:  # availability: at the first fork
            raise ValueError(f"backend={self.backend!r}: choose one of auto, {', '.join(ALL_BACKENDS)}")
        if not isinstance(self.speculate_k, int) or self.speculate_k < 1:
            raise ValueError(f"speculate_k={self.speculate_k!r}: expected an int >= 1")
        if not isinstance(self.speculate_min_idle_cpus, (int, float)) or not self.speculate_min_idle_cpus >= 0:
            raise ValueError(f"speculate_min_idle_cpus={self.speculate_min_idle_cpus!r}: expected CPUs >= 0")
        if not isinstance(self.step_timeout_s, (int, float)) or not self.step_timeout_s > 0:
            raise ValueError(f"step_timeout_s={self.step_timeout_s!r}: expected seconds > 0")
        if self.cache_dir is not None and not self.cache:
            raise ValueError("cache_dir needs cache=True (the on-disk store persists the shared prefix tree)")
        if self.task_id is not None and not isinstance(self.task_id, str):
            object.__setattr__(self, "task_id", str(self.task_id))  # task_id=40 means task "40"

    @classmethod
    def from_kwargs(cls, cache_dir: str | None = None, **kwargs: Any) -> "EnvConfig":
        """Split `BunshinEnv`'s keyword arguments into its own settings and the adapter's."""
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in cls.__dataclass_fields__}
        if cache_dir is None:
            cache_dir = os.environ.get("BUNSHIN_CACHE_DIR") or None
        return cls(cache_dir=cache_dir, adapter_kwargs=tuple(sorted(kwargs.items())), **own)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments that rebuild an env with exactly this config."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "adapter_kwargs"}
        return {**out, **dict(self.adapter_kwargs)}
