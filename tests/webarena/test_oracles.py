"""Every shipped task: its oracle trajectory scores 1.0 on a fresh site, and wrong answers / states score 0.0.

Ids in the oracles were recorded in another browser on another seeded database, so passing also shows that
element ids are reproducible.
"""
from __future__ import annotations

import re

import pytest

from envs.webarena.episode import Episode
from envs.webarena.judge import judge_episode
from envs.webarena.make_tasks import build_specs, plan_to_action
from envs.webarena.tasks import load_oracle, load_task, task_ids, workspace_task

pytestmark = pytest.mark.browser


def wrong_answer(task) -> str:
    """A plausible but wrong answer for a string_match task."""
    ref = task.eval.reference_answers
    if ref.exact_match is not None:
        return str(int(ref.exact_match) + 1) if ref.exact_match.isdigit() else ref.exact_match + " not"
    if ref.must_include is not None:
        return ", ".join(ref.must_include[:-1]) if len(ref.must_include) > 1 else "Olivia Smith"
    if ref.fuzzy_match == "N/A":
        return "Olivia Smith"
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), ", ".join(ref.fuzzy_match))


@pytest.mark.parametrize("tid", task_ids())
def test_oracle_scores_one_and_negatives_score_zero(tid, site, browser):
    task = load_task(tid)
    site.reset_db()
    ep = Episode(browser, **workspace_task(task))
    ep.reset(observe=False)
    if "string_match" not in task.eval.eval_types:
        # the untouched start state must not already satisfy a state/URL check
        assert judge_episode(task, ep, "") == 0.0, "initial state passes the check"
    for action in load_oracle(tid):
        res = ep.step(action, observe=False)
        assert res["last_action_error"] == "", f"{action}: {res['last_action_error']}"
    assert ep.done
    assert judge_episode(task, ep) == 1.0
    if "string_match" in task.eval.eval_types:
        assert judge_episode(task, ep, wrong_answer(task)) == 0.0
        assert judge_episode(task, ep, "") == 0.0


def _swap(plan, old, new):
    assert old in plan, (old, plan)
    return [new if step == old else step for step in plan]


def _wrong_plans():
    """(task id, family, plan that reaches a wrong end state) for one task of each state-changing family."""
    specs = {s.config["task_id"]: s for s in build_specs()}
    out = []
    by_family = {}
    for s in specs.values():
        by_family.setdefault(s.family, s)
    s = by_family["review"]
    stars = s.config["instantiation_dict"]["stars"]
    other = stars % 5 + 1
    out.append((s, _swap(s.plan, ("click", "radio", f"{stars} star" + ("" if stars == 1 else "s")),
                         ("click", "radio", f"{other} star" + ("" if other == 1 else "s")))))
    s = by_family["cart"]
    inst = s.config["instantiation_dict"]
    out.append((s, _swap(s.plan, ("select", "combobox", "Size", inst["size"]),
                         ("select", "combobox", "Size", "XS" if inst["size"] != "XS" else "XL"))))
    s = by_family["checkout"]
    out.append((s, _swap(s.plan, ("click", "radio", "Flat Rate $5.00"), ("click", "radio", "Express $15.00"))))
    s = by_family["address"]
    value = s.config["instantiation_dict"]["value"]
    out.append((s, [("type", *st[1:3], value.replace("1", "7"), False) if st[0] == "type" else st for st in s.plan]))
    s = by_family["wishlist"]
    name = s.config["instantiation_dict"]["product"]
    other_name = [x for x in specs.values() if x.family == "wishlist"][1].config["instantiation_dict"]["product"]
    out.append((s, [tuple(other_name if v == name else v for v in st) for st in s.plan]))
    s = by_family["reorder"]
    out.append((s, [("other_order",) + st[1:] if st[0] == "click" and str(st[2]).startswith("View Order")
                    else st for st in s.plan]))
    return [(s.config["task_id"], s.family, plan) for s, plan in out]


@pytest.mark.parametrize("tid,family,plan", _wrong_plans(), ids=lambda v: v if isinstance(v, str) else None)
def test_wrong_end_state_scores_zero(tid, family, plan, site, browser):
    task = load_task(tid)
    site.reset_db()
    ep = Episode(browser, **workspace_task(task))
    ep.reset(observe=False)
    for step in plan:
        if step[0] == "other_order":  # open a different order than the task names
            tree = browser.axtree()
            ids = re.findall(r"\[(\d+)\] link 'View Order (\d+)'", tree)
            action = next(f"click [{i}]" for i, oid in ids if f"View Order {oid}" != step[2])
        else:
            action = plan_to_action(step, browser.axtree)
        res = ep.step(action, observe=False)
        assert res["last_action_error"] == "", f"{action}: {res['last_action_error']}"
    assert judge_episode(task, ep) == 0.0
