"""The OSWorld judge reads what a workspace answers as untrusted data (its agent is root there): an answer that is
not a getter's value, or no answer at all, is StateUnavailable (an evaluation error, never a score); a file it
hands out is written only inside the judge's own folder. The workspace side is stood in for by `call`, the one
function through which the judge reaches an executor."""
from __future__ import annotations

import base64

import pytest

from envs.osworld.errors import EvaluatorError, StateUnavailable
from envs.osworld.judge import judge
from envs.osworld.tasks import JUDGE_FILES_DIR, TASKS_DIR, load_task
from forkcore.errors import ExecutorError, ExecutorUnreachable

TASK = load_task(TASKS_DIR / "os-sort-names.json")
GOLD = (JUDGE_FILES_DIR / "names_sorted_expected.txt").read_bytes()


def answering(value):
    def call(method, **params):
        assert method == "osworld.collect" and params["getter"]["type"] == "vm_file"
        return value
    return call


def file_value(name: str, data: bytes) -> dict:
    return {"value": {"file": name, "b64": base64.b64encode(data).decode()}}


def test_the_agents_file_is_compared_with_the_gold_outside():
    assert judge(TASK, "DONE", answering(file_value("names_sorted.txt", GOLD))) == 1.0
    assert judge(TASK, "DONE", answering(file_value("names_sorted.txt", b"wrong\n"))) == 0.0
    assert judge(TASK, "DONE", answering({"value": None})) == 0.0  # the agent never saved it


@pytest.mark.parametrize("answer", [
    "a string", {"reward": 1.0}, {"value": {"file": "../../escape", "b64": ""}},
    {"value": {"file": "/etc/passwd", "b64": ""}}, {"value": {"file": "x", "b64": "not base64!"}},
    {"value": {"file": "", "b64": ""}},
])
def test_an_answer_that_is_not_a_getters_value_is_an_evaluation_error(answer):
    with pytest.raises(StateUnavailable):
        judge(TASK, "DONE", answering(answer))


def test_no_answer_is_an_evaluation_error_and_a_getter_that_raised_scores_0():
    def unreachable(method, **params):
        raise ExecutorUnreachable("the executor died")
    with pytest.raises(StateUnavailable, match="did not answer"):
        judge(TASK, "DONE", unreachable)

    def raised(method, **params):  # the end state broke the getter (OSWorld's semantics: that metric scores 0)
        raise ExecutorError(method, "PermissionError", "/home/user/Documents")
    assert judge(TASK, "DONE", raised) == 0.0

    def task_error(method, **params):  # the task's own evaluator is wrong: not the agent's doing
        raise ExecutorError(method, "EvaluatorError", "unknown getter type 'nope'")
    with pytest.raises(EvaluatorError):
        judge(TASK, "DONE", task_error)


def test_fail_and_infeasible_are_judged_without_asking_the_workspace():
    def never(method, **params):
        raise AssertionError("the workspace was asked")
    assert judge(TASK, "FAIL", never) == 0.0
