"""Typed errors of `bunshin_gym.speculation`. Messages say what failed, what was expected and the fix."""

from __future__ import annotations


class SpeculationError(Exception):
    """Base class of every error `bunshin_gym.speculation` raises."""


class TrajectoryFormatError(SpeculationError, ValueError):
    """A trajectory JSONL line does not match the format documented in `trajectories.py`."""


class SelectorNotTrained(SpeculationError, RuntimeError):
    """`SpecToolSelector` was asked to predict before `fit` (or `load`)."""

    def __init__(self) -> None:
        super().__init__("SpecToolSelector has no training data: call selector.fit(trajectories) or "
                         "SpecToolSelector.load(path) first (record trajectories with write_trajectories).")


class SelectorFormatError(SpeculationError):
    """A saved selector file is not one this version can load."""


class SelectorDependencyMissing(SpeculationError, ImportError):
    """scikit-learn is needed for the trained selector model."""

    def __init__(self) -> None:
        super().__init__("the Spec Tool Selector's model needs scikit-learn: "
                         "/opt/bunshin/venv/bin/pip install 'bunshin-gym[train]' (or scikit-learn), "
                         "or use SelectorConfig(model='ngram') for the dependency-free frequency model.")
