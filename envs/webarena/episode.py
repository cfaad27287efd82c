"""One WebArena episode on a live :class:`~envs.webarena.browser.BrowserSession`: reset, step, evaluate.

Owns: the step loop's bookkeeping (opening a task's start URLs in a fresh, logged-in context; turning action
text into browser calls; recording the final answer; ``done``) and calling the evaluators at the end. Does not
own: the browser mechanism, parsing, task validation or judging rules (their modules), nor the site process or
its database (the caller starts the site; a task that mutates state needs a fresh database per episode).
"""
from __future__ import annotations

import time

from .actions import parse_action
from .errors import ActionParseError
from .evaluators import evaluate
from .site.seed import CUSTOMER_EMAIL, CUSTOMER_PASSWORD
from .tasks import TaskConfig, task_from_dict


class Episode:
    """Drive one task.

    Args:
        session: a started BrowserSession (its ``base_url`` is the site).
        task: a TaskConfig or a WebArena config dict (validated here).
        credentials: (email, password) used when the task has ``require_login``.
    """

    def __init__(self, session, task: TaskConfig | dict,
                 credentials: tuple[str, str] = (CUSTOMER_EMAIL, CUSTOMER_PASSWORD)) -> None:
        self.session = session
        self.task = task if isinstance(task, TaskConfig) else task_from_dict(task)
        self.credentials = credentials
        self.answer: str | None = None
        self.done = False
        self.history: list[str] = []

    def reset(self, viewport: tuple[int, int] | None = None, observe: bool = True) -> dict:
        """Open a fresh context (logged in if required), load the start URL(s); returns the observation
        (``{}`` when ``observe`` is False) plus ``last_action_error`` = ""."""
        s = self.session
        s.new_context(s.base_url, viewport or s.viewport, self.credentials if self.task.require_login else None)
        for i, url in enumerate(self.task.start_urls):
            if i:
                s.execute("new_tab")
            s.goto(url)
        if len(self.task.start_urls) > 1:
            s.execute("tab_focus [0]")
        self.answer, self.done, self.history = None, False, []
        return self._obs(observe, "")

    def step(self, action: str, observe: bool = True) -> dict:
        """Execute one action.

        Returns:
            the observation keys (when ``observe``) plus ``last_action_error`` (str, "" if fine), ``done``
            (bool: a ``stop``/``send_msg_to_user`` was executed), ``answer`` (str or None) and
            ``elapsed_s`` (float, time spent executing).
        """
        t0 = time.perf_counter()
        if self.done:
            return {**self._obs(observe, "the episode is over (stop was called); reset to start again"),
                    "done": True, "answer": self.answer, "elapsed_s": 0.0}
        self.history.append(action)
        try:
            act = parse_action(action)
        except ActionParseError as e:
            err = f"invalid action: {e}"
        else:
            err = self.session.execute(act)
            if act.name in ("stop", "send_msg_to_user"):
                self.answer, self.done = act.args[0], True
        elapsed = time.perf_counter() - t0
        return {**self._obs(observe, err), "done": self.done, "answer": self.answer, "elapsed_s": elapsed}

    def evaluate(self, answer: str | None = None) -> float:
        """Reward (0.0 or 1.0) for ``answer`` (default: the recorded ``stop`` answer) and the live state."""
        ans = self.answer if answer is None else answer
        return evaluate(self.task, ans or "", self.session)

    def _obs(self, observe: bool, err: str) -> dict:
        obs = self.session.observe() if observe else {}
        return {**obs, "last_action_error": err}
