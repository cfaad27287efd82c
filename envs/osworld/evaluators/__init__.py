"""Judging OSWorld tasks: `evaluate(task, session)` runs the evaluator's postconfig, its getters and metrics.

Where it runs: in the judge's process, never inside a workspace (envs/osworld/judge.py; .workspace-exclude
names evaluators/, so no workspace holds this package). The getters that read the desktop's state
(envs/osworld/getters/) run where the desktop is and hand their values out as data (`collect`); the judge's own
getters (JUDGE_GETTERS: rules, expected files; judge_getters.py) and every metric run here.

Modules: metrics.py (METRICS, the generic metrics), one module of metrics per application family
(browser_pages, browser_profile, documents, files, images, mail, media, slides), judge_getters.py.

Semantics (as OSWorld's DesktopEnv.evaluate):
  * func "infeasible": 1.0 iff the agent's last action was FAIL, else 0.0 (and a FAIL on a feasible task
    scores 0.0).
  * one func: metric(result_value, expected_value, **options) — or metric(result_value, **options) when
    the task has no `expected`.
  * several funcs with conj "and": the first 0.0 ends with 0.0, else the mean of the scores;
    with conj "or": the first 1.0 ends with 1.0, else the best score.
  * a getter or metric that raises on the *result* (e.g. a file the agent never saved) counts 0.0 for that
    metric; errors of the task itself (unknown metric/getter) raise EvaluatorError.
"""

from __future__ import annotations


from .. import getters
from ..errors import EvaluatorError, OSWorldError, StateUnavailable
from ..getters import GETTERS, JUDGE_GETTERS, get_value
from ..tasks import _thaw  # one JSON thaw for tasks and evaluators
from . import metrics
# modules by application family and the judge's own getters; importing them registers their metrics and getters
from . import browser_pages, browser_profile, documents, files, images, judge_getters, mail, media, slides  # noqa: F401
from .metrics import METRICS

__all__ = ["evaluate", "GETTERS", "JUDGE_GETTERS", "METRICS", "getters", "metrics"]


def evaluate(task, session, last_action: str | None = None, *, details: list | None = None,
             collect=None, postconfig=None) -> float:
    """Score the desktop's current state for `task`.

    Args:
        task: an envs.osworld.tasks.Task.
        session: a started DesktopSession holding the end state, in this process; or, when the desktop is in a
            workspace, an object with the attributes the JUDGE_GETTERS read (`run_dir`, `downloads`).
        last_action: the agent's last action kind ("FAIL", "DONE", ...) — for infeasible tasks.
        details: optional list that receives one dict per metric {func, score, error}.
        collect: `collect(getter_config) -> value` runs a state getter where the desktop is (default: on
            `session`); raising StateUnavailable means the state could not be read (not a score).
        postconfig: `postconfig(steps)` runs the evaluator's postconfig steps there (default: on `session`).

    Returns:
        float in [0, 1].
    """
    from ..tasks import run_config

    ev = task.evaluator
    if ev.funcs == ("infeasible",):
        return 1.0 if last_action == "FAIL" else 0.0
    if last_action == "FAIL":
        return 0.0
    collect = collect or (lambda config: get_value(session, config))
    if ev.postconfig:
        (postconfig or (lambda steps: run_config(session, steps)))(ev.postconfig)

    def value(config):
        if config is None:
            return None
        return get_value(session, config) if config.get("type") in JUDGE_GETTERS else collect(config)

    scores: list[float] = []
    for i, func in enumerate(ev.funcs):
        fn = METRICS.get(func)
        if fn is None:
            raise EvaluatorError(f"task {task.id}: unknown metric {func!r}")
        err = ""
        try:
            result = value(ev.results[i])
            options = {k: _thaw(v) for k, v in (ev.options[i] or {}).items()}
            if ev.expected[i] is not None:
                expected = value(ev.expected[i])
                score = float(fn(_thaw(result), _thaw(expected), **options))
            else:
                score = float(fn(_thaw(result), **options))
        except (EvaluatorError, StateUnavailable):
            raise
        except OSWorldError as e:  # e.g. a shipped file missing: a task error
            raise EvaluatorError(f"task {task.id}: {func}: {e}") from e
        except Exception as e:  # the end state broke the metric (bad file...): counts as failed
            score, err = 0.0, f"{type(e).__name__}: {e}"
        if details is not None:
            details.append({"func": func, "score": score, "error": err})
        if ev.conj == "and" and score == 0.0:
            return 0.0
        if ev.conj == "or" and score == 1.0:
            return 1.0
        scores.append(score)
    if not scores:
        return 0.0
    return max(scores) if ev.conj == "or" else sum(scores) / len(scores)
