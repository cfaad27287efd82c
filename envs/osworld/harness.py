"""Episode plumbing for OSWorld tasks on a DesktopSession, without the gym API: set a task up, replay a
trajectory, score it. Used by the tests and the oracle checker; bunshin_gym's env wraps the same calls.

    python -m envs.osworld.harness [TASK_ID ...]     # run oracles on a fresh host desktop, print scores

Owns: the order reset → config → actions → evaluate, and timing. Does not own: the step loop, caching or
forking (bunshin_gym / forkcore).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from .actions import execute
from .tasks import Task, load_oracle, load_tasks, run_config

__all__ = ["setup_task", "run_trajectory", "EpisodeResult", "run_episode"]


def setup_task(session, task: Task, *, reset: bool = True) -> float:
    """Reset the desktop (optional) and run the task's config; returns the seconds it took."""
    t0 = time.monotonic()
    if reset:
        session.reset()
    session.downloads = task.downloads  # where the download steps and the cloud_file getter find the files
    run_config(session, task.config)
    session.instruction = task.instruction
    return time.monotonic() - t0


@dataclass
class EpisodeResult:
    """What replaying a trajectory gave: score, the last action kind, per-step errors and timings."""

    score: float
    last_action: str | None
    errors: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    details: list[dict] = field(default_factory=list)


def run_trajectory(session, actions: Sequence[Any], space: str = "pyautogui") -> tuple[str | None, list[str]]:
    """Execute actions in order until DONE/FAIL; returns (last action kind, error per step)."""
    last, errors = None, []
    for a in actions:
        r = execute(session, a, space)
        errors.append(r.error)
        last = r.action.kind if r.action is not None else None
        if r.done:
            break
    return last, errors


def run_episode(session, task: Task, actions: Sequence[Any] | None = None, space: str = "pyautogui") -> EpisodeResult:
    """reset → config → actions (default: the task's oracle) → evaluate."""
    from .evaluators import evaluate  # judge-only (not in a workspace, which imports this module for setup_task)

    t0 = time.monotonic()
    setup_s = setup_task(session, task)
    t1 = time.monotonic()
    acts = load_oracle(task.id) if actions is None else actions
    last, errors = run_trajectory(session, acts, space)
    t2 = time.monotonic()
    details: list[dict] = []
    score = evaluate(task, session, last, details=details)
    t3 = time.monotonic()
    return EpisodeResult(score, last, errors, {"setup": setup_s, "actions": t2 - t1, "evaluate": t3 - t2,
                                               "total": t3 - t0}, details)


def main(argv=None) -> int:
    from .desktop import DesktopSession
    ap = argparse.ArgumentParser(description="Replay oracle trajectories on a host desktop and print scores.")
    ap.add_argument("ids", nargs="*", help="task ids (default: all)")
    ap.add_argument("--size", default="1280x800", help="screen WIDTHxHEIGHT")
    args = ap.parse_args(argv)
    w, h = (int(x) for x in args.size.split("x"))
    tasks = [t for t in load_tasks() if not args.ids or t.id in args.ids]
    bad = 0
    with DesktopSession(tempfile.mkdtemp(prefix="osworld-home-"), size=(w, h)) as s:
        for t in tasks:
            r = run_episode(s, t)
            errs = [e for e in r.errors if e]
            bad += r.score != 1.0
            print(f"{t.id:32s} score={r.score:.2f} setup={r.seconds['setup']:.1f}s actions={r.seconds['actions']:.1f}s "
                  f"eval={r.seconds['evaluate']:.1f}s {r.details if r.score != 1.0 else ''} {errs[:1] if errs else ''}",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
