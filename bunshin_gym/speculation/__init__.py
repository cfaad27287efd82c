"""Speculative tool execution support: recorded trajectories (format + I/O), the Spec Tool Selector that
predicts the next call(s), tail-aware selection of which samples/calls to speculate for, and the chain
bookkeeping. Pure Python: running predicted calls on the live workspace is bunshin_gym/speculator.py's job.
"""

from .chain import ChainOutcome, SpeculationStats, SpeculativeChain
from .errors import SelectorDependencyMissing, SelectorFormatError, SelectorNotTrained, SpeculationError, TrajectoryFormatError
from .selector import (
    EOS,
    NGramBackoff,
    Prediction,
    SelectorConfig,
    SelectorReport,
    SpecToolSelector,
    features,
    tool_name,
    validate_selector_config,
)
from .tail import SampleProgress, TailConfig, TailSelector, TimingModel, validate_tail_config
from .trajectories import (
    Trajectory,
    TrajectoryStep,
    iter_trajectories,
    parse_trajectory,
    read_trajectories,
    write_trajectories,
)

__all__ = [
    "ChainOutcome",
    "EOS",
    "NGramBackoff",
    "Prediction",
    "SampleProgress",
    "SelectorConfig",
    "SelectorDependencyMissing",
    "SelectorFormatError",
    "SelectorNotTrained",
    "SelectorReport",
    "SpecToolSelector",
    "SpeculationError",
    "SpeculationStats",
    "SpeculativeChain",
    "TailConfig",
    "TailSelector",
    "TimingModel",
    "Trajectory",
    "TrajectoryFormatError",
    "TrajectoryStep",
    "features",
    "iter_trajectories",
    "parse_trajectory",
    "read_trajectories",
    "tool_name",
    "validate_selector_config",
    "validate_tail_config",
    "write_trajectories",
]
