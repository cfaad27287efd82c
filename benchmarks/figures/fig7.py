"""BunshinRL Fig 7: the memory of all environments over one WebArena epoch, CRIU-private vs ours.

The experiment and the plot are Fig 6's (`fig6.py`) on BunshinWebArena-v0. The paper compares with AgentENV
(43% lower peak), not available here; against CRIU it reports 36% lower peak with CRIU at a smaller batch
(a full CRIU batch did not fit its 256 GB), where ours runs both backends at the same batch.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fig6 import Args as OSWorldArgs, plot, run, scale, vs_paper

PAPER = {"peak_reduction_vs_agentenv_pct": 43, "peak_reduction_vs_criu_pct": 36, "criu_epoch_longer_x": 2.4,
         "note": "CRIU's figures in the paper are at a smaller batch (its full batch ran out of memory)",
         "source": "BunshinRL §5.2, Figure 7 (one WebArena epoch)"}
__all__ = ["Args", "PAPER", "run", "scale", "vs_paper", "plot"]


@dataclass
class Args(OSWorldArgs):
    env: str = "BunshinWebArena-v0"
    """env id"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(tasks=1, group=4, concurrency=4, settle_max_s=5.0)
