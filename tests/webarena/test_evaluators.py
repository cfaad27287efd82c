"""Evaluator rules that need no browser: string_match (exact, must_include, fuzzy) and url_match."""
from __future__ import annotations

import pytest

from envs.webarena.judge import clean_answer, fuzzy_match, must_include, string_match, url_match
from envs.webarena.tasks import task_from_dict

BASE = "http://127.0.0.1:7770"


def _task(eval_: dict) -> object:
    return task_from_dict({"sites": ["shopping"], "task_id": 1, "require_login": True, "start_url": "__SHOPPING__",
                           "geolocation": None, "intent": "x", "eval": eval_})


def test_clean_answer_strips_quotes_and_case():
    assert clean_answer('  "Hello World" ') == "hello world"
    assert clean_answer("'x'") == "x"


def test_must_include_single_char_is_token_match():
    assert must_include("0", "there are 0 comments", tokenize=True) == 1.0
    assert must_include("0", "there are 10 comments", tokenize=True) == 0.0
    assert must_include("0", "there are 10 comments", tokenize=False) == 1.0
    assert must_include("Red |OR| crimson", "it is crimson") == 1.0


@pytest.mark.parametrize("ref,pred,ok", [
    ("203.37", "$203.37", True),
    ("1234.5", "You spent $1,234.50 in total", True),
    ("203.37", "$203.38", False),
    ("203.37", "I spent 203 dollars", False),
    ("Time: 3h 30min", "time 3h 30min", True),
    ("Acme Pro Backpack", "the acme pro backpack", True),
    ("Acme Pro Backpack", "Northwind Tent", False),
    ("N/A", "N/A", True),
    ("N/A", "This product does not exist in the store", True),
    ("N/A", "Hannah Wilson", False),
])
def test_fuzzy_match_rule(ref, pred, ok):
    assert fuzzy_match(ref, pred) == float(ok)


def test_string_match_combines_all_reference_kinds():
    t = _task({"eval_types": ["string_match"],
               "reference_answers": {"must_include": ["Hannah Wilson", "Caleb Robinson"]}})
    assert string_match(t, "Hannah Wilson, Caleb Robinson") == 1.0
    assert string_match(t, "Hannah Wilson") == 0.0
    t = _task({"eval_types": ["string_match"], "reference_answers": {"exact_match": "37"}})
    assert string_match(t, "37") == 1.0
    assert string_match(t, "37 products") == 0.0


@pytest.mark.parametrize("ref,pred,ok", [
    ("__SHOPPING__/category/shoes?sort=price&dir=desc", f"{BASE}/category/shoes?sort=price&dir=desc&limit=12", True),
    ("__SHOPPING__/category/shoes?sort=price&dir=desc", f"{BASE}/category/shoes?dir=desc&sort=price", True),
    ("__SHOPPING__/category/shoes?sort=price&dir=desc", f"{BASE}/category/shoes?sort=price&dir=asc", False),
    ("__SHOPPING__/category/shoes?sort=price&dir=desc", f"{BASE}/category/baby?sort=price&dir=desc", False),
    ("__SHOPPING__/search?q=hiking+boot", f"{BASE}/search?q=hiking+boot&sort=name", True),
    ("__SHOPPING__/search?q=hiking+boot", f"{BASE}/search?q=hiking", False),
    ("__SHOPPING__/cart/ |OR| __SHOPPING__/checkout", f"{BASE}/checkout", True),
])
def test_url_match_gold_in_pred(ref, pred, ok):
    t = _task({"eval_types": ["url_match"], "reference_url": ref})
    assert url_match(t, pred, BASE) == float(ok)


# --- the judge reads a workspace's answers as untrusted data ------------------------------------------------
from envs.webarena.errors import StateUnavailable  # noqa: E402
from envs.webarena.judge import WorkspaceState, judge  # noqa: E402
from envs.webarena.tasks import load_task  # noqa: E402
from forkcore.errors import ExecutorError, ExecutorUnreachable  # noqa: E402

URL_TASK = _task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__/checkout/cart"})
HTML_TASK = _task({"eval_types": ["program_html"], "program_html": [
    {"url": "/wishlist", "locator": "document.querySelector('#wishlist').outerText",
     "required_contents": {"must_include": ["Blue Shirt"]}}]})


def answering(**answers):
    asked = []

    def call(method, **params):
        asked.append((method, params))
        return answers[method]
    return call, asked


def test_the_judge_asks_the_workspace_only_for_state_and_compares_outside():
    call, asked = answering(**{"webarena.active_url": {"url": BASE + "/wishlist"},
                               "webarena.page_text": {"text": "Wishlist: Blue Shirt &amp; more"}})
    assert judge(HTML_TASK, "", WorkspaceState(call), BASE) == 1.0
    assert asked == [("webarena.active_url", {}), ("webarena.page_text", {
        "url": BASE + "/wishlist", "locator": "document.querySelector('#wishlist').outerText"})]
    assert "Blue Shirt" not in repr(asked), "what the page must say never crosses into the workspace"
    call, _ = answering(**{"webarena.active_url": {"url": BASE + "/"}, "webarena.page_text": {"text": "Red Hat"}})
    assert judge(HTML_TASK, "", WorkspaceState(call), BASE) == 0.0


def test_a_string_match_task_never_asks_the_workspace():
    def call(method, **params):
        raise AssertionError(f"asked {method}")
    task = load_task(16)
    assert judge(task, task.eval.reference_answers.exact_match, WorkspaceState(call), BASE) == 1.0
    assert judge(task, "0", WorkspaceState(call), BASE) == 0.0


@pytest.mark.parametrize("answer", [{"url": 1}, {"url": None}, ["http://x"], "http://x", None, {}])
def test_an_answer_that_is_not_state_is_an_evaluation_error(answer):
    call, _ = answering(**{"webarena.active_url": answer})
    with pytest.raises(StateUnavailable, match="not a 'url' string"):
        judge(URL_TASK, "", WorkspaceState(call), BASE)


def test_no_answer_is_an_evaluation_error_and_a_handler_that_raised_propagates():
    def gone(method, **params):
        raise ExecutorUnreachable("executor socket closed")
    with pytest.raises(StateUnavailable, match="did not answer"):
        judge(URL_TASK, "", WorkspaceState(gone), BASE)

    def raised(method, **params):
        raise ExecutorError("webarena.page_text", "Error", "page.goto: net::ERR_CONNECTION_REFUSED")
    with pytest.raises(ExecutorError):  # the state broke the evaluator: the episode layer scores 0
        judge(URL_TASK, "", WorkspaceState(raised), BASE)
