"""Rollouts: policies and GRPO-style group rollouts over Bunshin envs, recorded as JSONL trajectories.

`rollout_group(env_id, task_id, policy_factory, G)` runs G samples of one task state concurrently (each
sample's env resets to the task's snapshot: with the prefix cache that costs nothing until a sample
diverges), with at most `concurrency` samples (workspaces) alive at once. Before each action a policy
"thinks" for a time drawn from a `ThinkTimeModel` — it stands for LLM generation; speculation hides tool
execution behind it. Trajectories feed the Spec Tool Selector (see speculation/trajectories.py).
"""
from __future__ import annotations

import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import gymnasium as gym

from .speculation import SampleProgress, TailSelector, Trajectory, TrajectoryStep


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
    take a detour — a candidate action of the observation — instead of the oracle's next one.

    Detours are drawn Zipf-like with exponent `detour_skew` over the candidates in a fixed order (by a hash of
    the action, the same in every sample and process): as an LLM's samples do, a group's samples tend to make
    the same few wrong choices. 0 draws them uniformly (no two samples more alike than chance)."""

    def __init__(self, oracle: Sequence[str], perturb_p: float = 0.3, detour_skew: float = 1.0) -> None:
        if not 0.0 <= perturb_p <= 1.0:
            raise ValueError(f"perturb_p={perturb_p}: expected a probability in [0, 1]")
        if detour_skew < 0:
            raise ValueError(f"detour_skew={detour_skew}: expected >= 0 (0: uniform detours)")
        self.oracle, self.p, self.skew, self.i = list(oracle), perturb_p, detour_skew, 0

    def act(self, observation, env, rng) -> str:
        candidates = env.unwrapped.adapter.candidate_actions(observation)
        if self.i < len(self.oracle) - 1 and candidates and rng.random() < self.p:
            ranked = sorted(self.detour_pool(candidates, rng), key=_action_hash)
            return rng.choices(ranked, weights=[(r + 1) ** -self.skew for r in range(len(ranked))])[0]
        self.i += 1
        return self.oracle[min(self.i, len(self.oracle)) - 1]

    def detour_pool(self, candidates: list[str], rng: random.Random) -> list[str]:
        """The candidates a detour is drawn from (all of them here)."""
        return candidates


def _action_hash(action: str) -> bytes:
    return hashlib.sha1(action.encode()).digest()


def _is_novel(action: str) -> bool:
    """DriftingTracePolicy's split of the candidates: odd first hash byte = a call only late epochs make."""
    return _action_hash(action)[0] % 2 == 1


class DriftingTracePolicy(StochasticTracePolicy):
    """A training policy's samples at `epoch` (0-based) of a run whose policy drifts (BunshinRL Fig 10).

    It detours with probability `perturb_p - epoch * drift_step` (floored at 0): it follows the oracle more
    as it trains. Its detours come from the "familiar" half of the candidates (even first hash byte). From
    epoch `novel_from` on, each step before the oracle's last is, with probability `novel_p`, a call from the
    other half (uniformly): calls no earlier epoch made. The rollout's seed (one per epoch) draws them all."""

    def __init__(self, oracle: Sequence[str], epoch: int, perturb_p: float = 0.3, drift_step: float = 0.05,
                 novel_from: int | None = None, novel_p: float = 0.25, detour_skew: float = 1.0) -> None:
        if epoch < 0 or drift_step < 0 or not 0.0 <= novel_p <= 1.0:
            raise ValueError(f"epoch={epoch}, drift_step={drift_step}, novel_p={novel_p}: expected epoch >= 0, "
                             "drift_step >= 0 and novel_p in [0, 1]")
        super().__init__(oracle, max(0.0, perturb_p - epoch * drift_step), detour_skew)
        self.novel_p = novel_p if novel_from is not None and epoch >= novel_from else 0.0

    def act(self, observation, env, rng) -> str:
        if self.novel_p and self.i < len(self.oracle) - 1:
            novel = [a for a in env.unwrapped.adapter.candidate_actions(observation) if _is_novel(a)]
            if novel and rng.random() < self.novel_p:
                return rng.choice(sorted(novel, key=_action_hash))
        return super().act(observation, env, rng)

    def detour_pool(self, candidates: list[str], rng: random.Random) -> list[str]:
        return [a for a in candidates if not _is_novel(a)] or candidates


class RandomPolicy:
    def act(self, observation, env, rng) -> str:
        return rng.choice(env.unwrapped.adapter.candidate_actions(observation) or ["noop()"])


class ChatPolicy:
    """An OpenAI-compatible chat endpoint (e.g. llama.cpp's server) choosing the next action.

    The prompt is the env's `render_prompt(obs)`, cut to `max_prompt_chars` (and by a third again each time
    the server answers that prompt and `max_tokens` exceed its context window). Decoding is constrained to
    the env's action grammar (`grammar`, a llama.cpp extension that llama-cpp-python's server also accepts)
    when the env has one and `constrain=True` (an env's grammar should bound its free text so that an action
    closes within `max_tokens`). A constrained completion cut at `max_tokens` is incomplete: it is asked
    again with a new seed, up to `retries` times, and then returned as written (the env reports it as
    `last_action_error`).

    Each request is recorded in `calls` (dicts: prompt_tokens, completion_tokens, seconds, finish_reason,
    content), e.g. for tokens/s.
    """

    SYSTEM_PROMPT = "You are a web agent. Answer with exactly one action."

    def __init__(self, base_url: str = "http://127.0.0.1:8080/v1", model: str = "local", temperature: float = 1.0,
                 max_tokens: int = 64, constrain: bool = True, timeout_s: float = 120.0, *,
                 max_prompt_chars: int = 12000, retries: int = 2) -> None:
        import httpx

        self.client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self.model, self.temperature, self.max_tokens, self.constrain = model, temperature, max_tokens, constrain
        self.max_prompt_chars, self.retries = max_prompt_chars, retries
        self.calls: list[dict[str, Any]] = []

    def act(self, observation, env, rng) -> str:
        adapter = env.unwrapped.adapter
        grammar = adapter.action_grammar() if self.constrain else None
        prompt = adapter.render_prompt(observation)[:self.max_prompt_chars]
        asked = 0
        while True:
            body: dict[str, Any] = {
                "model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "seed": rng.randrange(2**31),
                "messages": [{"role": "system", "content": self.SYSTEM_PROMPT}, {"role": "user", "content": prompt}]}
            if grammar:
                body["grammar"] = grammar
            t0 = time.monotonic()
            r = self.client.post("/chat/completions", json=body)
            if r.status_code == 400 and self._context_exceeded(r.text) and len(prompt) > 1000:
                prompt = prompt[: len(prompt) * 2 // 3]  # prompt + max_tokens exceed the server's n_ctx
                continue
            r.raise_for_status()
            out = r.json()
            choice, usage = out["choices"][0], out.get("usage") or {}
            content = (choice["message"]["content"] or "").strip()
            self.calls.append({"prompt_tokens": usage.get("prompt_tokens"),
                               "completion_tokens": usage.get("completion_tokens"),
                               "seconds": time.monotonic() - t0, "finish_reason": choice.get("finish_reason"),
                               "content": content})
            asked += 1
            if not (grammar and choice.get("finish_reason") == "length") or asked > self.retries:
                return content

    @staticmethod
    def _context_exceeded(text: str) -> bool:
        """Whether an HTTP 400 body says the prompt does not fit (OpenAI's and llama.cpp's wordings)."""
        return any(k in text for k in ("context_length_exceeded", "context length", "context window", "context size"))


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
    step_costs: list[dict] = field(default_factory=list)
    """Per step, what the env reported of its own cost: cache status, seconds waiting for a background
    snapshot or sync, seconds restoring a state and the restore itself (source, calls replayed) if there was
    one (`info["bunshin"]`; zeros and None without diagnostics)."""
    action_errors: dict[int, str] = field(default_factory=dict)
    """Step index -> the observation's non-empty ``last_action_error`` (what an action reported failing)."""
    start_s: float = 0.0
    reset_s: float = 0.0
    """Seconds `reset()` took."""
    end_s: float = 0.0

    def trajectory(self, iteration: int | None = None) -> Trajectory:
        return Trajectory(self.task_id, tuple(self.steps), rollout_id=f"{self.task_id}-{self.sample}",
                          iteration=iteration, total_s=self.end_s - self.start_s)


class TailSpeculation:
    """Tail-aware speculation for a batch of rollouts (BunshinRL §3.3): before each think, the samples the
    `TailSelector` predicts slowest get speculation, the others not; chains stop at calls whose recorded
    execution time is too short to be worth a fork."""

    def __init__(self, tails: "TailSelector") -> None:
        self.tails = tails
        self._lock = threading.Lock()
        self._live: dict[str, tuple[gym.Env, SampleProgress]] = {}
        self.decisions = {"speculating": 0, "not_speculating": 0}

    def update(self, sample_id: str, env: gym.Env | None, progress: SampleProgress | None) -> None:
        """Record where a sample stands (env None: it ended) and re-select the tail of the live batch."""
        with self._lock:
            if env is None:
                self._live.pop(sample_id, None)
            else:
                self._live[sample_id] = (env, progress)
            chosen = self.tails.select([p for _, p in self._live.values()])
            for sid, (e, _) in self._live.items():
                base = e.unwrapped
                base.speculation_enabled = base.selector is not None and sid in chosen
                base.speculation_filter = self.tails.worth_speculating
            if env is not None:
                self.decisions["speculating" if sample_id in chosen else "not_speculating"] += 1


#: info["bunshin"] keys that describe the process or the env so far, not the one step
PROCESS_WIDE_DIAG = ("standby", "backend", "restores")


def run_sample(env: gym.Env, task_id: str, sample: int, policy: Policy, think: ThinkTimeModel,
               rng: random.Random, clock0: float, tail: TailSpeculation | None = None) -> Rollout:
    out = Rollout(task_id, sample, start_s=time.monotonic() - clock0)
    sample_id = f"{task_id}-{sample}"
    try:
        t0 = time.monotonic()
        obs, info = env.reset(options={"task_id": task_id})
        out.reset_s = time.monotonic() - t0
        done = False
        while not done:
            if tail is not None:
                tail.update(sample_id, env, SampleProgress(sample_id, task_id, len(out.steps),
                                                           time.monotonic() - clock0 - out.start_s))
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
            if isinstance(obs, dict) and obs.get("last_action_error"):
                out.action_errors[len(out.steps)] = str(obs["last_action_error"])
            out.steps.append(TrajectoryStep(sig, think_s, exec_s))
            diag = info.get("bunshin", {})
            status = diag.get("cache")
            restore = diag.get("restore")
            out.step_costs.append({"cache": status, "background_wait_s": diag.get("background_wait_s") or 0.0,
                                   "background_wait_jobs": "+".join(diag.get("background_wait_jobs") or ()),
                                   "restore_s": (restore or {}).get("s", 0.0), "restore": restore,
                                   "ran_alongside": bool(diag.get("ran_alongside")),
                                   "snapshot_scheduled": bool(diag.get("snapshot_scheduled")),
                                   "error": info.get("last_action_error") if status == "error" else None,
                                   "diag": {k: v for k, v in diag.items() if k not in PROCESS_WIDE_DIAG}})
            out.hits += status == "hit"
            out.misses += status in ("miss", "waited")
            out.reward, done = float(reward), term or trunc
    finally:
        if tail is not None:
            tail.update(sample_id, None, None)
    out.end_s = time.monotonic() - clock0
    return out


def rollout_group(env_id: str, task_id: str, policy_factory: Callable[[int], Policy], group: int, *,
                  think: ThinkTimeModel = ThinkTimeModel(), concurrency: int = 8, seed: int = 0,
                  env_kwargs: dict | None = None, on_progress: Callable[[Rollout], None] | None = None,
                  clock0: float | None = None, tail: TailSpeculation | None = None) -> list[Rollout]:
    """G samples of one task state, run concurrently (at most `concurrency` alive). Ordered by sample."""
    return run_rollouts(env_id, [(task_id, g) for g in range(group)], policy_factory=lambda t, g: policy_factory(g),
                        think=think, concurrency=concurrency, seed=seed, env_kwargs=env_kwargs,
                        on_progress=on_progress, clock0=clock0, tail=tail)


def run_rollouts(env_id: str, samples: Sequence[tuple[str, int]], policy_factory: Callable[[str, int], Policy], *,
                 think: ThinkTimeModel = ThinkTimeModel(), concurrency: int = 8, seed: int = 0,
                 env_kwargs: dict | None = None, on_progress: Callable[[Rollout], None] | None = None,
                 clock0: float | None = None, tail: TailSpeculation | None = None) -> list[Rollout]:
    """Run (task_id, sample) pairs concurrently, each in its own env; results in the order given.

    With `tail` (and a `selector` in env_kwargs) only the predicted-slowest live samples speculate."""
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
                results[i] = run_sample(env, task_id, g, policy_factory(task_id, g), think, rng, clock0, tail)
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
