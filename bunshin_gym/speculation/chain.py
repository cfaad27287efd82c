"""Bookkeeping of one speculative chain (BunshinRL §3.3): K predicted calls run ahead on the episode's live
workspace; each actual call is compared with the next predicted one; the first mismatch aborts the chain.

Owns: the match/abort state machine and its counters. Does not own: executing the calls or discarding the
speculative workspace (bunshin_gym/speculator.py does that on the outcome this returns).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field


class ChainOutcome(enum.Enum):
    MATCH = "match"
    """The actual call is the next predicted one: adopt its speculative result and state."""
    MISMATCH = "mismatch"
    """It differs: abort the chain, discard its workspace, execute from the last adopted state."""
    EXHAUSTED = "exhausted"
    """The chain was already fully consumed or aborted: execute normally (maybe start a new chain)."""


@dataclass
class SpeculativeChain:
    """A predicted chain ``calls`` started from some state (``base`` is opaque to this class: e.g. the
    prefix-tree node and the fork's id). Feed every actual call to `check` in order."""

    calls: tuple[str, ...]
    base: object = None
    position: int = 0
    """How many predicted calls were matched (and adopted) so far."""
    aborted: bool = False

    def __post_init__(self) -> None:
        self.calls = tuple(self.calls)

    @property
    def active(self) -> bool:
        return not self.aborted and self.position < len(self.calls)

    @property
    def pending(self) -> tuple[str, ...]:
        """Predicted calls not yet confirmed (what the fork may still be executing)."""
        return () if self.aborted else self.calls[self.position:]

    def check(self, actual: str) -> ChainOutcome:
        """Compare the policy's actual next call with the chain; advances or aborts it."""
        if not self.active:
            return ChainOutcome.EXHAUSTED
        if self.calls[self.position] == actual:
            self.position += 1
            return ChainOutcome.MATCH
        self.aborted = True
        return ChainOutcome.MISMATCH


@dataclass
class SpeculationStats:
    """Counters for ``info`` and benchmarks: how much speculation predicted, adopted and wasted."""

    chains: int = 0
    predicted: int = 0
    matched: int = 0
    aborted: int = 0
    hidden_s: float = 0.0
    """Execution seconds overlapped with reasoning (sum over matched calls of their speculative run time)."""
    per_depth_matches: list[int] = field(default_factory=list)

    def start(self, chain: SpeculativeChain | Sequence[str]) -> None:
        self.chains += 1
        self.predicted += len(chain.calls if isinstance(chain, SpeculativeChain) else chain)

    def observe(self, outcome: ChainOutcome, chain: SpeculativeChain, exec_s: float = 0.0) -> None:
        if outcome is ChainOutcome.MATCH:
            self.matched += 1
            self.hidden_s += exec_s
            d = chain.position - 1
            while len(self.per_depth_matches) <= d:
                self.per_depth_matches.append(0)
            self.per_depth_matches[d] += 1
        elif outcome is ChainOutcome.MISMATCH:
            self.aborted += 1

    @property
    def precision(self) -> float:
        """Matched / predicted calls (wasted speculative work is ``1 - precision``)."""
        return self.matched / self.predicted if self.predicted else 0.0
