"""Recorded rollout trajectories: the training data of the Spec Tool Selector and of tail selection.

Owns: the on-disk format (JSONL, one rollout per line), its validation and read/write helpers.

Format (one JSON object per line; unknown keys are kept in ``extra``)::

    {"task_id": "shop-042",                       # required, str
     "rollout_id": "it3-g1-s5",                   # optional, str: unique id of this rollout
     "iteration": 3,                              # optional, int: training iteration that produced it
     "total_s": 81.4,                             # optional, float: wall time of the rollout (else the sum
                                                  #   of think_s + exec_s over steps)
     "steps": [                                   # required, list (may be empty), in execution order
        {"signature": "click(id=12)",             # required, str: canonical call signature (as cached)
         "think_s": 4.1,                          # optional, float >= 0: policy time before this call
         "exec_s": 1.7}                           # optional, float >= 0: time executing this call
     ]}

Blank lines and lines starting with ``#`` are ignored. Errors name the file and line number.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import TrajectoryFormatError


@dataclass(frozen=True, slots=True)
class TrajectoryStep:
    """One tool call of a rollout."""

    signature: str
    think_s: float = 0.0
    exec_s: float = 0.0


@dataclass(frozen=True)
class Trajectory:
    """One rollout: the task and its calls in order (see module docstring for the JSON form)."""

    task_id: str
    steps: tuple[TrajectoryStep, ...]
    rollout_id: str | None = None
    iteration: int | None = None
    total_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def signatures(self) -> tuple[str, ...]:
        return tuple(s.signature for s in self.steps)

    @property
    def duration_s(self) -> float:
        """``total_s`` if recorded, else the sum of think and exec times."""
        if self.total_s is not None:
            return self.total_s
        return sum(s.think_s + s.exec_s for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out["task_id"] = self.task_id
        if self.rollout_id is not None:
            out["rollout_id"] = self.rollout_id
        if self.iteration is not None:
            out["iteration"] = self.iteration
        if self.total_s is not None:
            out["total_s"] = self.total_s
        out["steps"] = [{"signature": s.signature, "think_s": s.think_s, "exec_s": s.exec_s} for s in self.steps]
        return out

    @staticmethod
    def from_signatures(task_id: str, signatures: Iterable[str], **kw: Any) -> Trajectory:
        return Trajectory(task_id, tuple(TrajectoryStep(s) for s in signatures), **kw)


def _num(v: Any, what: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TrajectoryFormatError(f"{where}: {what} must be a finite number >= 0, got {v!r}")
    return float(v)


def parse_trajectory(obj: Any, where: str = "trajectory") -> Trajectory:
    """Validate a decoded JSON object and build a `Trajectory` (``where`` prefixes error messages)."""
    if not isinstance(obj, dict):
        raise TrajectoryFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    task_id = obj.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise TrajectoryFormatError(f"{where}: 'task_id' must be a non-empty string, got {task_id!r}")
    steps_raw = obj.get("steps")
    if not isinstance(steps_raw, list):
        raise TrajectoryFormatError(f"{where}: 'steps' must be a list of {{'signature', 'think_s', 'exec_s'}} "
                                    f"objects, got {type(steps_raw).__name__}")
    steps = []
    for i, s in enumerate(steps_raw):
        w = f"{where}: steps[{i}]"
        if isinstance(s, str):  # tolerated shorthand: a bare signature
            steps.append(TrajectoryStep(s))
            continue
        if not isinstance(s, dict) or not isinstance(s.get("signature"), str) or not s["signature"]:
            raise TrajectoryFormatError(f"{w}: expected {{'signature': str, ...}}, got {s!r}")
        steps.append(TrajectoryStep(s["signature"], _num(s.get("think_s", 0.0), "think_s", w),
                                    _num(s.get("exec_s", 0.0), "exec_s", w)))
    rid = obj.get("rollout_id")
    if rid is not None and not isinstance(rid, str):
        raise TrajectoryFormatError(f"{where}: 'rollout_id' must be a string, got {rid!r}")
    it = obj.get("iteration")
    if it is not None and (isinstance(it, bool) or not isinstance(it, int)):
        raise TrajectoryFormatError(f"{where}: 'iteration' must be an integer, got {it!r}")
    tot = obj.get("total_s")
    total = None if tot is None else _num(tot, "total_s", where)
    extra = {k: v for k, v in obj.items() if k not in ("task_id", "steps", "rollout_id", "iteration", "total_s")}
    return Trajectory(task_id, tuple(steps), rid, it, total, MappingProxyType(extra))


def iter_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file, validating each line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TrajectoryFormatError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
            yield parse_trajectory(obj, where)


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """All trajectories of a JSONL file (see the module docstring for the format)."""
    return list(iter_trajectories(path))


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory], *, append: bool = False) -> int:
    """Write trajectories as JSONL (``append`` adds to an existing file). Returns the number written.

    A fresh file is written to a temp name and renamed, so readers never see half a file."""
    path = Path(path)
    lines = [json.dumps(t.to_json(), separators=(",", ":")) + "\n" for t in trajectories]
    if append:
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(lines)
    else:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    return len(lines)
