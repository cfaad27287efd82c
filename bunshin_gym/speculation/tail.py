"""Tail-aware speculation (BunshinRL §3.3): speculate only for the samples and calls that recorded
timings from past iterations show as slow, because the slowest rollouts set the batch's latency and every
speculative fork costs CPU and memory.

Owns: the timing model fitted on recorded trajectories (per task: how much time remains after n steps;
per call signature / tool: how long it executes) and the selection rule. Does not own: recording
timings (the rollout driver writes trajectories, `trajectories.py`), predicting calls (`selector.py`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .selector import tool_name
from .trajectories import Trajectory


@dataclass(frozen=True)
class TailConfig:
    """Configuration of `TailSelector`."""

    quantile: float = 0.75
    """Speculate for the samples above this quantile of the batch's predicted remaining times
    (0.75 = the slowest quarter; 0 = every sample; 1 = none)."""
    min_remaining_s: float = 0.0
    """Never speculate for a sample predicted to finish within this many seconds."""
    min_call_exec_s: float = 0.5
    """Speculate a predicted call only if its historical execution time is at least this (hiding a
    50 ms call behind reasoning is not worth a fork)."""
    unknown_is_tail: bool = True
    """A sample of a task with no history counts as slow (its predicted remaining time is +inf)."""
    unknown_call_exec_s: float = math.inf
    """Assumed execution time of a call never seen (neither its signature nor its tool): inf = speculate."""


def validate_tail_config(cfg: TailConfig) -> None:
    if not 0 <= cfg.quantile <= 1:
        raise ValueError(f"TailConfig.quantile={cfg.quantile} is invalid: expected 0 <= quantile <= 1")
    if cfg.min_remaining_s < 0 or cfg.min_call_exec_s < 0:
        raise ValueError("TailConfig.min_remaining_s and min_call_exec_s must be >= 0 seconds")


@dataclass(frozen=True, slots=True)
class SampleProgress:
    """Where one in-flight rollout sample stands."""

    sample_id: str
    task_id: str
    steps_done: int
    elapsed_s: float = 0.0


class TimingModel:
    """Recorded timings: remaining time of a task's rollouts after n steps; execution time per call.

    ``remaining_s(task, n, elapsed)`` is the mean over past rollouts of that task of the time they spent
    after their n-th call (0 for rollouts that had ended), floored at ``mean total - elapsed`` so a sample
    that is already slower than usual is not predicted to finish instantly.
    """

    def __init__(self) -> None:
        self._rem: dict[str, list[np.ndarray]] = defaultdict(list)  # per rollout: remaining after n steps
        self._totals: dict[str, list[float]] = defaultdict(list)
        self._exec_sig: dict[str, list[float]] = defaultdict(list)
        self._exec_tool: dict[str, list[float]] = defaultdict(list)

    def fit(self, trajectories: Iterable[Trajectory]) -> TimingModel:
        for t in trajectories:
            durs = np.array([s.think_s + s.exec_s for s in t.steps], dtype=float)
            total = t.duration_s
            # remaining after n steps = total - sum(first n step durations); n = 0..len
            done = np.concatenate([[0.0], np.cumsum(durs)])
            self._rem[t.task_id].append(np.maximum(total - done, 0.0))
            self._totals[t.task_id].append(total)
            for s in t.steps:
                self._exec_sig[s.signature].append(s.exec_s)
                self._exec_tool[tool_name(s.signature)].append(s.exec_s)
        return self

    def known(self, task_id: str) -> bool:
        return task_id in self._totals

    def remaining_s(self, task_id: str, steps_done: int, elapsed_s: float = 0.0) -> float:
        """Predicted seconds until this sample's rollout ends (inf for an unknown task)."""
        rows = self._rem.get(task_id)
        if not rows:
            return math.inf
        vals = [r[steps_done] if steps_done < len(r) else 0.0 for r in rows]
        by_steps = float(np.mean(vals))
        by_clock = float(np.mean(self._totals[task_id])) - elapsed_s
        return max(by_steps, by_clock, 0.0)

    def exec_s(self, signature: str) -> float | None:
        """Median recorded execution time of ``signature`` (else of its tool), or None if never seen."""
        v = self._exec_sig.get(signature) or self._exec_tool.get(tool_name(signature))
        return float(np.median(v)) if v else None


class TailSelector:
    """Chooses which samples of a batch to speculate for, and which predicted calls are worth it.

    Example::

        tails = TailSelector(TimingModel().fit(read_trajectories(path)))
        chosen = tails.select([SampleProgress(sid, task, steps, elapsed) for ...])
        if sid in chosen and tails.worth_speculating(pred.signature): speculate(...)
    """

    def __init__(self, timings: TimingModel, config: TailConfig | None = None):
        self.config = config or TailConfig()
        validate_tail_config(self.config)
        self.timings = timings

    def predicted_remaining(self, samples: Sequence[SampleProgress]) -> np.ndarray:
        """Predicted remaining seconds, shape ``(len(samples),)``."""
        out = np.empty(len(samples), dtype=float)
        for i, s in enumerate(samples):
            r = self.timings.remaining_s(s.task_id, s.steps_done, s.elapsed_s)
            if math.isinf(r) and not self.config.unknown_is_tail:
                r = 0.0
            out[i] = r
        return out

    def select(self, samples: Sequence[SampleProgress]) -> frozenset[str]:
        """The ``sample_id``s to speculate for: the slowest ``ceil((1 - quantile) * n)`` samples by predicted
        remaining time, excluding those predicted to finish within ``min_remaining_s``.

        Samples tied at the boundary are all left out (unless that leaves nothing), so a batch of equally
        fast samples does not get speculation by accident of ordering.
        """
        if not samples:
            return frozenset()
        pred = self.predicted_remaining(samples)
        k = math.ceil((1.0 - self.config.quantile) * len(samples) - 1e-9)
        if k <= 0:
            return frozenset()
        kth = float(np.sort(pred)[::-1][k - 1])
        pick = pred > kth
        if int((pred >= kth).sum()) <= k or not pick.any():
            pick = pred >= kth
        pick &= (pred > self.config.min_remaining_s) & (pred > 0)
        return frozenset(s.sample_id for s, p in zip(samples, pick) if p)

    def worth_speculating(self, signature: str) -> bool:
        """Whether a predicted call executes long enough (historically) to be worth a speculative fork."""
        e = self.timings.exec_s(signature)
        if e is None:
            e = self.config.unknown_call_exec_s
        return e >= self.config.min_call_exec_s
