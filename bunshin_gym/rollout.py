"""Rollouts: policies and GRPO-style group rollouts over Bunshin envs, recorded as JSONL trajectories.

`rollout_group(env_id, task_id, policy_factory, G)` runs G samples of one task state concurrently (each
sample's env resets to the task's snapshot: with the prefix cache that costs nothing until a sample
diverges), with at most `concurrency` samples (workspaces) alive at once. Before each action a policy
"thinks" for a time drawn from a `ThinkTimeModel` — it stands for LLM generation; speculation hides tool
execution behind it. Trajectories feed the Spec Tool Selector (see speculation/trajectories.py).
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import gymnasium as gym

from .speculation import Trajectory, TrajectoryStep


@dataclass(frozen=True)
class ThinkTimeModel:
    """Seconds a policy spends generating each action: lognormal with this median and sigma, capped."""

    median_s: float = 2.0
    sigma: float = 0.5
    max_s: float = 20.0

    def sample(self, rng: random.Random) -> float:
        if self.median_s <= 0:
            return 0.0
        return min(self.max_s, rng.lognormvariate(0.0, self.sigma) * self.median_s)


class Policy(Protocol):
    def act(self, observation: dict, env: "gym.Env", rng: random.Random) -> str:
        ...


class TracePolicy:
    """Replays a fixed action list; `stop []` once it runs out."""

    def __init__(self, actions: Sequence[str]) -> None:
        self.actions, self.i = list(actions), 0

    def act(self, observation, env, rng) -> str:
        self.i += 1
        return self.actions[self.i - 1] if self.i <= len(self.actions) else "stop []"


class StochasticTracePolicy:
    """GRPO-like divergent samples from an oracle trajectory: at each step, with probability `perturb_p`,
    take a random candidate action of the observation instead of the oracle's next one."""

    def __init__(self, oracle: Sequence[str], perturb_p: float = 0.3) -> None:
        if not 0.0 <= perturb_p <= 1.0:
            raise ValueError(f"perturb_p={perturb_p}: expected a probability in [0, 1]")
        self.oracle, self.p, self.i = list(oracle), perturb_p, 0

    def act(self, observation, env, rng) -> str:
        candidates = env.unwrapped.adapter.candidate_actions(observation)
        if self.i < len(self.oracle) - 1 and candidates and rng.random() < self.p:
            return rng.choice(candidates)
        self.i += 1
        return self.oracle[min(self.i, len(self.oracle)) - 1]


class RandomPolicy:
    def act(self, observation, env, rng) -> str:
        return rng.choice(env.unwrapped.adapter.candidate_actions(observation) or ["noop()"])


class ChatPolicy:
    """An OpenAI-compatible chat endpoint (e.g. llama.cpp's server) choosing the next action.

    The prompt is the env's `render_prompt(obs)`; decoding is constrained to the env's action grammar
    (`grammar`, a llama.cpp extension) when the env has one and `constrain=True`.
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8080/v1", model: str = "local", temperature: float = 1.0,
                 max_tokens: int = 64, constrain: bool = True, timeout_s: float = 120.0) -> None:
        import httpx

        self.client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self.model, self.temperature, self.max_tokens, self.constrain = model, temperature, max_tokens, constrain

    def act(self, observation, env, rng) -> str:
        adapter = env.unwrapped.adapter
        body: dict[str, Any] = {
            "model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
            "seed": rng.randrange(2**31),
            "messages": [{"role": "system", "content": "You are a web agent. Answer with exactly one action."},
                         {"role": "user", "content": adapter.render_prompt(observation)[:12000]}]}
        grammar = adapter.action_grammar() if self.constrain else None
        if grammar:
            body["grammar"] = grammar
        r = self.client.post("/chat/completions", json=body)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"].strip()


@dataclass
class Rollout:
    """One sample: its reward, steps and timings (and what the env's diagnostics reported)."""

    task_id: str
    sample: int
    reward: float = 0.0
    actions: list[str] = field(default_factory=list)
    steps: list[TrajectoryStep] = field(default_factory=list)
    hits: int = 0
    misses: int = 0
    start_s: float = 0.0
    end_s: float = 0.0

    def trajectory(self, iteration: int | None = None) -> Trajectory:
        return Trajectory(self.task_id, tuple(self.steps), rollout_id=f"{self.task_id}-{self.sample}",
                          iteration=iteration, total_s=self.end_s - self.start_s)


def run_sample(env: gym.Env, task_id: str, sample: int, policy: Policy, think: ThinkTimeModel,
               rng: random.Random, clock0: float) -> Rollout:
    out = Rollout(task_id, sample, start_s=time.monotonic() - clock0)
    obs, info = env.reset(options={"task_id": task_id})
    done = False
    while not done:
        think_s = think.sample(rng)
        time.sleep(think_s)
        action = policy.act(obs, env, rng)
        t0 = time.monotonic()
        obs, reward, term, trunc, info = env.step(action)
        exec_s = time.monotonic() - t0
        try:
            sig = env.unwrapped.adapter.canonical_action(action)
        except Exception:  # noqa: BLE001 - malformed actions are recorded as written
            sig = str(action)
        out.actions.append(action)
        out.steps.append(TrajectoryStep(sig, think_s, exec_s))
        status = info.get("bunshin", {}).get("cache")
        out.hits += status == "hit"
        out.misses += status in ("miss", "waited")
        out.reward, done = float(reward), term or trunc
    out.end_s = time.monotonic() - clock0
    return out


def rollout_group(env_id: str, task_id: str, policy_factory: Callable[[int], Policy], group: int, *,
                  think: ThinkTimeModel = ThinkTimeModel(), concurrency: int = 8, seed: int = 0,
                  env_kwargs: dict | None = None, on_progress: Callable[[Rollout], None] | None = None,
                  clock0: float | None = None) -> list[Rollout]:
    """G samples of one task state, run concurrently (at most `concurrency` alive). Ordered by sample."""
    return run_rollouts(env_id, [(task_id, g) for g in range(group)], policy_factory=lambda t, g: policy_factory(g),
                        think=think, concurrency=concurrency, seed=seed, env_kwargs=env_kwargs,
                        on_progress=on_progress, clock0=clock0)


def run_rollouts(env_id: str, samples: Sequence[tuple[str, int]], policy_factory: Callable[[str, int], Policy], *,
                 think: ThinkTimeModel = ThinkTimeModel(), concurrency: int = 8, seed: int = 0,
                 env_kwargs: dict | None = None, on_progress: Callable[[Rollout], None] | None = None,
                 clock0: float | None = None) -> list[Rollout]:
    """Run (task_id, sample) pairs concurrently, each in its own env; results in the order given."""
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: expected >= 1")
    clock0 = time.monotonic() if clock0 is None else clock0
    results: list[Rollout | None] = [None] * len(samples)
    errors: list[BaseException] = []
    slots = threading.Semaphore(concurrency)

    def worker(i: int, task_id: str, g: int) -> None:
        with slots:
            env = gym.make(env_id, task_id=task_id, diagnostics=True, **(env_kwargs or {}))
            try:
                rng = random.Random(f"{seed}-{task_id}-{g}")
                results[i] = run_sample(env, task_id, g, policy_factory(task_id, g), think, rng, clock0)
                if on_progress:
                    on_progress(results[i])
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
            finally:
                env.close()

    threads = [threading.Thread(target=worker, args=(i, t, g), daemon=True) for i, (t, g) in enumerate(samples)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def write_jsonl(path, rollouts: Sequence[Rollout], iteration: int | None = None) -> None:
    from .speculation import write_trajectories

    write_trajectories(path, [r.trajectory(iteration) for r in rollouts])
