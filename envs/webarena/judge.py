"""The WebArena judge: string_match, url_match and program_html without an LLM, outside every workspace.

Owns: :func:`judge` (reward in {0.0, 1.0}, the product of every evaluator the task lists), the three evaluators
and the two ways to read an end state: :class:`WorkspaceState` (a workspace's executor, untrusted) and
:class:`SessionState` (a BrowserSession in this process: make_tasks, tests). Never copied into a workspace
(``.workspace-exclude``), nor are the task files it reads.

What crosses the workspace's boundary, and which way:
  in   ``webarena.active_url()`` (no argument), and for each program_html check ``webarena.page_text(url,
       locator)``: the site URL to open and the JS expression to read there (what is looked at, not what it
       must say).
  out  the active tab's URL; each page's text. Both are untrusted data: a value that is not a string is
       StateUnavailable (an evaluation error), never a score.
Never in: reference answers, ``required_contents``, ``reference_url``, the task's ``eval`` as a whole, any reward.

Semantics (WebArena's ``evaluation_harness/evaluators.py`` unless noted):

- string_match. The answer is cleaned (strip, one pair of surrounding quotes removed, lower-case).
  ``exact_match``: cleaned answer == cleaned reference. ``must_include``: every reference is a substring of the
  answer (a reference ``a |OR| b`` passes if either does); when there is one single-character reference it must
  be a whole token of the answer (WebArena's ``tokenize`` rule, with ``\\w+`` tokens instead of nltk).
  ``fuzzy_match`` (WebArena asks GPT-4; this env uses a fixed rule, see :func:`fuzzy_match`):
  every reference must pass, where a reference passes when (1) every number in it appears among the answer's
  numbers (``$1,234.50`` == ``1234.5``) and (2) if it has words, rapidfuzz ``token_set_ratio`` of the
  normalised texts is >= 80 or every word of the reference occurs in the answer. ``"N/A"`` (infeasible task)
  passes when the answer is ``N/A`` or says so (``not available``, ``cannot``, ``doesn't exist``...).
- url_match. ``GOLD in PRED``: the reference's host+path must be a substring of the current page's host+path
  and every reference query parameter must have one of its values in the current URL's (extra parameters are
  fine); references may be joined by `` |OR| ``. Trailing slashes are ignored.
- program_html. For each check: the workspace opens a *new* page in the agent's context (same cookies; the
  agent's tabs are left alone) at ``url`` (``last`` = the agent's current URL), evaluates the JS ``locator``
  there (empty = the page's HTML); here it is HTML-unescaped and compared by ``exact_match`` / ``must_include``
  as above (no lower-casing of the page text beyond what clean_answer does).

Evaluators never read the database file: every check goes through the live site, so they stay valid inside a
forked workspace whatever its DB path.
"""
from __future__ import annotations

import html
import re
from typing import Any, Callable, Protocol
from urllib.parse import parse_qs, urlsplit

from forkcore.errors import ExecutorError, ForkcoreError

from .errors import StateUnavailable
from .site_urls import resolve_url
from .tasks import TaskConfig

FUZZY_THRESHOLD = 80
_INFEASIBLE_PHRASES = ("n/a", "not available", "not possible", "cannot", "can't", "doesn't exist",
                       "does not exist", "no such", "not exist", "infeasible", "unable")


def clean_answer(answer: str) -> str:
    """WebArena's clean_answer: strip, drop one pair of surrounding quotes, lower-case."""
    a = str(answer).strip()
    if len(a) >= 2 and a[0] == a[-1] and a[0] in "'\"":
        a = a[1:-1]
    return a.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    """1.0 if ``ref`` (any alternative of ``a |OR| b``) occurs in ``pred`` (after cleaning)."""
    for alt in str(ref).split(" |OR| "):
        r, p = clean_answer(alt), clean_answer(pred)
        if tokenize and len(r) == 1:
            if r in re.findall(r"\w+|[^\w\s]", p):
                return 1.0
        elif r in p:
            return 1.0
    return 0.0


def _numbers(text: str) -> list[float]:
    out = []
    for m in re.finditer(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+", text):
        try:
            out.append(round(float(m.group().replace(",", "")), 6))
        except ValueError:
            pass
    return out


def _norm_text(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def fuzzy_match(ref: str, pred: str) -> float:
    """This env's LLM-free fuzzy rule (documented in the module docstring)."""
    if clean_answer(ref) == "n/a":
        p = clean_answer(pred)
        return float(p in ("n/a", "na", "none") or any(ph in p for ph in _INFEASIBLE_PHRASES))
    from rapidfuzz import fuzz

    ref_nums, pred_nums = _numbers(ref), _numbers(pred)
    if any(n not in pred_nums for n in ref_nums):
        return 0.0
    words = re.findall(r"[a-z]+", ref.lower())
    if not words:
        return 1.0
    r, p = _norm_text(ref), _norm_text(pred)
    if fuzz.token_set_ratio(r, p) >= FUZZY_THRESHOLD:
        return 1.0
    return float(all(w in p.split() for w in words))


def string_match(task: TaskConfig, answer: str) -> float:
    """Score ``answer`` against ``task.eval.reference_answers`` (all present keys must pass)."""
    ref = task.eval.reference_answers
    if ref is None:
        return 0.0
    score = 1.0
    if ref.exact_match is not None:
        score *= exact_match(ref.exact_match, answer)
    if ref.must_include is not None:
        tok = len(ref.must_include) == 1
        for value in ref.must_include:
            score *= must_include(value, answer, tokenize=tok)
    if ref.fuzzy_match is not None:
        refs = [ref.fuzzy_match] if isinstance(ref.fuzzy_match, str) else list(ref.fuzzy_match)
        for value in refs:
            score *= fuzzy_match(value, answer)
    return score


def _parse_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parts = urlsplit(url.rstrip("/"))
    return parts.netloc + parts.path.rstrip("/"), parse_qs(parts.query)


def url_match(task: TaskConfig, current_url: str, base_url: str) -> float:
    """WebArena's ``GOLD in PRED`` URL rule (see module docstring)."""
    refs = [TaskConfig.resolve(u.strip(), base_url) for u in task.eval.reference_url.split(" |OR| ")]
    pred_base, pred_q = _parse_url(current_url)
    parsed = [_parse_url(u) for u in refs]
    if task.eval.url_note not in ("GOLD in PRED", ""):
        return 0.0
    base_ok = any(b in pred_base for b, _ in parsed)
    ref_q: dict[str, set[str]] = {}
    for _, q in parsed:
        for k, vals in q.items():
            ref_q.setdefault(k, set()).update(vals)
    query_ok = all(any(v in pred_q.get(k, []) for v in vals) for k, vals in ref_q.items())
    return float(base_ok and query_ok)


class EndState(Protocol):
    """What the judge may ask of an end state."""

    def active_url(self) -> str:
        """The URL of the agent's active tab."""

    def page_text(self, url: str, locator: str) -> str:
        """The text ``locator`` reads on the site page ``url`` (empty locator: the page's HTML)."""


class WorkspaceState:
    """An end state in a workspace, read through ``call(method, **params)`` (its executor). What it answers is
    untrusted: anything but a string is StateUnavailable; so is no answer (killed, hung, gone). A handler that
    raised (an ExecutorError: e.g. the site no longer answers) propagates: the state broke the evaluator."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def _text(self, method: str, key: str, **params: Any) -> str:
        try:
            answer = self._call(method, **params)
        except ExecutorError:
            raise
        except ForkcoreError as e:
            raise StateUnavailable(f"{method}: the workspace did not answer ({type(e).__name__}: {e})") from e
        value = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(value, str):
            raise StateUnavailable(f"{method}: the workspace answered {str(answer)[:120]!r}, not a {key!r} string")
        return value

    def active_url(self) -> str:
        return self._text("webarena.active_url", "url")

    def page_text(self, url: str, locator: str) -> str:
        return self._text("webarena.page_text", "text", url=url, locator=locator)


class SessionState:
    """An end state in a BrowserSession of this process (make_tasks, tests)."""

    def __init__(self, session) -> None:
        self.session = session

    def active_url(self) -> str:
        return self.session.page.url

    def page_text(self, url: str, locator: str) -> str:
        return self.session.page_text(url, locator)


def program_html(task: TaskConfig, state: EndState, base_url: str, current_url: str) -> float:
    """Every ``program_html`` check of ``task``, each page read by ``state``."""
    score = 1.0
    for check in task.eval.program_html:
        url = current_url if check.url == "last" else resolve_url(check.url, base_url)
        content = html.unescape(state.page_text(url, check.locator))
        if check.exact_match is not None:
            score *= exact_match(check.exact_match, content)
        else:
            for value in check.must_include or ():
                score *= must_include(value, content, tokenize=False)
        if score == 0.0:
            break
    return score


def judge(task: TaskConfig, answer: str, state: EndState, base_url: str) -> float:
    """Reward of an episode.

    Args:
        task: the task that was attempted (with its ``eval``: it never leaves this process).
        answer: the agent's final answer (``stop [answer]``'s argument; "" if none).
        state: the end state (:class:`WorkspaceState` or :class:`SessionState`): its active URL for url_match
            and program_html's ``last``, its pages' text for program_html.
        base_url: the site's URL, for ``__SHOPPING__`` and site-relative URLs.

    Returns:
        1.0 or 0.0: the product of the evaluators in ``task.eval.eval_types``.
    Raises:
        StateUnavailable: the state could not be read.
    """
    score, current_url = 1.0, None
    for kind in task.eval.eval_types:
        if kind == "string_match":
            score *= string_match(task, answer)
        else:
            current_url = state.active_url() if current_url is None else current_url
            score *= (url_match(task, current_url, base_url) if kind == "url_match"
                      else program_html(task, state, base_url, current_url))
        if score == 0.0:
            break
    return float(score)


def judge_episode(task: TaskConfig, episode, answer: str | None = None) -> float:
    """:func:`judge` of an :class:`~envs.webarena.episode.Episode` that runs in this process (make_tasks,
    tests): ``answer`` defaults to the episode's ``stop`` answer."""
    answer = episode.answer if answer is None else answer
    return judge(task, answer or "", SessionState(episode.session), episode.session.base_url)
